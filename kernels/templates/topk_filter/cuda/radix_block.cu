// atrex-template: radix_block
// atrex-description: one thread block per row: the row is staged once in shared memory (16-byte loads; rows over 48K values are re-read from global/L2 instead), then a radix select on the order-preserving 32-bit key of each value, RADIX_BITS per pass (a shared histogram of the keys that still match the chosen prefix, the k-th bucket found by one warp's suffix scan over the bins, early exit once a bucket holds exactly the values still needed), then one pass writes value or -inf (ties with the threshold kept)
// atrex-param: RADIX_BITS = 8 | 4, 8
#ifndef RADIX_BITS
#define RADIX_BITS 8
#endif

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(RADIX_BITS == 4 || RADIX_BITS == 8, "RADIX_BITS");

namespace {

using atrex::cand::aligned;
using atrex::cand::fail;
using atrex::cand::kF32;

constexpr int kThreads = 512;
constexpr int kBins = 1 << RADIX_BITS;
constexpr int kMaxSmemValues = 48 * 1024;  // 192 KiB of dynamic shared memory

// Order-preserving key of a float (no NaN in the inputs); -0 maps to +0's key, so key order is
// the float order the reference's `<` uses.
__device__ __forceinline__ uint32_t key_of(float f) {
  uint32_t u = __float_as_uint(f);
  if (u == 0x80000000u) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

template <bool kSmem, int V>
__global__ void __launch_bounds__(kThreads)
    topk_kernel(const float* __restrict__ x, float* __restrict__ out, int cols, int k) {
  extern __shared__ float4 dyn[];
  float* row_s = reinterpret_cast<float*>(dyn);
  __shared__ int hist[kBins];
  __shared__ uint32_t s_prefix;
  __shared__ int s_need, s_done;
  const int t = threadIdx.x;
  const int64_t row = blockIdx.x;
  const float* xr = x + row * cols;
  float* orow = out + row * cols;
  if (kSmem) {
    using W = typename std::conditional<V == 4, float4, float>::type;
    const W* src = reinterpret_cast<const W*>(xr);
    W* dst = reinterpret_cast<W*>(row_s);
    for (int i = t; i < cols / V; i += kThreads) dst[i] = __ldg(src + i);
    __syncthreads();
  }
  const float* src = kSmem ? row_s : xr;
  uint32_t prefix = 0, mask = 0;
  int need = k;
  for (int shift = 32 - RADIX_BITS; shift >= 0; shift -= RADIX_BITS) {
    for (int b = t; b < kBins; b += kThreads) hist[b] = 0;
    __syncthreads();
    for (int i = t; i < cols; i += kThreads) {
      const uint32_t key = key_of(src[i]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & (kBins - 1)], 1);
    }
    __syncthreads();
    if (t < 32) {
      // Lane l holds bins [l * per, (l + 1) * per) from the top: suffix counts by a scan.
      constexpr int per = kBins / 32 > 0 ? kBins / 32 : 1;
      int c[per], sum = 0;
#pragma unroll
      for (int j = 0; j < per; ++j) {
        const int b = kBins - 1 - (t * per + j);
        c[j] = b >= 0 ? hist[b] : 0;
        sum += c[j];
      }
      int incl = sum;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, incl, o);
        if (t >= o) incl += y;
      }
      int above = incl - sum;  // values in higher bins than this lane's first
      // The lane whose range crosses `need` picks the bin.
      if (above < need && incl >= need) {
#pragma unroll
        for (int j = 0; j < per; ++j) {
          if (above + c[j] >= need) {
            const int b = kBins - 1 - (t * per + j);
            s_prefix = prefix | (static_cast<uint32_t>(b) << shift);
            s_done = above + c[j] == need;
            s_need = need - above;
            break;
          }
          above += c[j];
        }
      }
    }
    __syncthreads();
    prefix = s_prefix;
    need = s_need;
    mask |= static_cast<uint32_t>(kBins - 1) << shift;
    if (s_done) break;  // block-uniform
    __syncthreads();
  }
  // Keep key >= prefix: with an exact bucket its lower bits are 0, otherwise it is the k-th key.
  for (int i = t; i < cols; i += kThreads) {
    const float v = src[i];
    orow[i] = key_of(v) >= prefix ? v : -INFINITY;
  }
}

template <bool kSmem, int V>
int launch(const float* x, float* o, int64_t rows, int cols, int k, cudaStream_t s) {
  const size_t smem = kSmem ? static_cast<size_t>(cols) * sizeof(float) : 0;
  static bool opted = false;  // once per process and kernel: the shared memory beyond 48 KiB
  if (kSmem && !opted) {
    const cudaError_t e = cudaFuncSetAttribute(topk_kernel<kSmem, V>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(kMaxSmemValues * sizeof(float)));
    if (e != cudaSuccess) return fail("topk_filter: %s", cudaGetErrorString(e));
    opted = true;
  }
  topk_kernel<kSmem, V><<<static_cast<unsigned>(rows), kThreads, smem, s>>>(x, o, cols, k);
  return 0;
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// logits [S, V] fp32 -> out [S, V] fp32: logits where >= the row's k-th largest (k =
// min(top_k, V), default 50), else -inf.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch_args) {
  atrex::cand::Tensors ts(launch_args, "topk_filter");
  const DLTensor* x = ts.input("logits", kF32, 2);
  const DLTensor* o = ts.output("out", kF32, 2);
  ts.same_dims(x, o);
  if (!ts.ok()) return ts.failed();
  const int64_t rows = x->shape[0], cols = x->shape[1];
  int64_t k = atrex_param_int(launch_args, "top_k", 50);
  if (k > cols) k = cols;
  if (k < 1 || cols > 0x7fffffff || rows > 0x7fffffff)
    return fail("topk_filter: top_k must be >= 1 (got %lld)", static_cast<long long>(k));
  if (rows == 0 || cols == 0) return 0;
  const auto* xp = static_cast<const float*>(x->data);
  auto* op = static_cast<float*>(o->data);
  cudaStream_t s = static_cast<cudaStream_t>(launch_args->stream);
  const int c = static_cast<int>(cols), kk = static_cast<int>(k);
  int rc;
  if (cols > kMaxSmemValues)
    rc = launch<false, 1>(xp, op, rows, c, kk, s);
  else if (cols % 4 == 0 && aligned(xp, 16))
    rc = launch<true, 4>(xp, op, rows, c, kk, s);
  else
    rc = launch<true, 1>(xp, op, rows, c, kk, s);
  if (rc) return rc;
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("topk_filter: %s", cudaGetErrorString(err));
}
