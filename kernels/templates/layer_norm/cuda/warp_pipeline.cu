// atrex-template: warp_pipeline
// atrex-description: persistent warps with an asynchronous row pipeline: a grid sized to the SMs, each warp walks rows with a grid stride and keeps STAGES rows in flight through cp.async into its own shared-memory ring (the next rows load while the current one is reduced), then the mean, the centred sum of squares and the affine output are three passes over the row in shared memory with shuffle-only reductions; no block barrier, no register cache of the row
// atrex-param: WARPS = 4 | 2, 4
// atrex-param: STAGES = 2 | 2, 3
#ifndef WARPS
#define WARPS 4
#endif
#ifndef STAGES
#define STAGES 2
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(WARPS >= 1 && WARPS <= 16, "WARPS");
static_assert(STAGES >= 2 && STAGES <= 4, "STAGES");

namespace {

using atrex::cand::aligned;
using atrex::cand::fail;
using atrex::cand::kBF16;

constexpr int kMaxSmem = 200 * 1024;

__device__ __forceinline__ float bf2f(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_wait_stages() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 1));
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// The 8 bf16 values of a 16-byte word as floats.
__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// hidden % 8 == 0, rows 16-byte aligned (checked by the host). Dynamic shared memory:
// WARPS x STAGES rows of hidden bf16. Rows past the end are committed as empty groups so the
// wait count stays uniform.
__global__ void __launch_bounds__(WARPS * 32)
    pipeline_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,
                    const uint16_t* __restrict__ b, uint16_t* __restrict__ out, int64_t rows,
                    int hidden, float eps) {
  extern __shared__ __align__(16) uint4 ring[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int packs = hidden / 8;
  uint4* mine = ring + static_cast<int64_t>(warp) * STAGES * packs;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * WARPS + warp;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * WARPS;
  auto issue = [&](int64_t row, int slot) {
    if (row < rows) {
      const uint4* src = reinterpret_cast<const uint4*>(x + row * hidden);
      for (int p = lane; p < packs; p += 32) cp_async16(mine + slot * packs + p, src + p);
    }
    cp_commit();
  };
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) issue(first + s * stride, s);
  const float inv_h = 1.0f / static_cast<float>(hidden);
  int slot = 0;
  for (int64_t row = first; row < rows; row += stride) {
    issue(row + (STAGES - 1) * stride, (slot + STAGES - 1) % STAGES);
    cp_wait_stages();
    __syncwarp();
    const uint4* buf = mine + slot * packs;
    float s = 0.f;
    for (int p = lane; p < packs; p += 32) {
      float f[8];
      unpack8(buf[p], f);
#pragma unroll
      for (int e = 0; e < 8; ++e) s += f[e];
    }
    const float mean = warp_sum(s) * inv_h;
    float m2 = 0.f;
    for (int p = lane; p < packs; p += 32) {
      float f[8];
      unpack8(buf[p], f);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float d = f[e] - mean;
        m2 = fmaf(d, d, m2);
      }
    }
    const float rstd = 1.0f / sqrtf(warp_sum(m2) * inv_h + eps);
    uint4* orow = reinterpret_cast<uint4*>(out + row * hidden);
    for (int p = lane; p < packs; p += 32) {
      float f[8], wf[8], bf[8];
      unpack8(buf[p], f);
      unpack8(__ldg(reinterpret_cast<const uint4*>(w) + p), wf);
      unpack8(__ldg(reinterpret_cast<const uint4*>(b) + p), bf);
      uint32_t o[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const __nv_bfloat162 v = __floats2bfloat162_rn(((f[2 * i] - mean) * rstd) * wf[2 * i] + bf[2 * i],
                                                       ((f[2 * i + 1] - mean) * rstd) * wf[2 * i + 1] + bf[2 * i + 1]);
        o[i] = *reinterpret_cast<const uint32_t*>(&v);
      }
      orow[p] = make_uint4(o[0], o[1], o[2], o[3]);
    }
    __syncwarp();  // this slot is refilled STAGES - 1 rows from now
    slot = (slot + 1) % STAGES;
  }
  asm volatile("cp.async.wait_group 0;\n" ::);
}

// Any hidden, any alignment: one warp per row (grid stride), three passes over global memory.
__global__ void scalar_kernel(const uint16_t* x, const uint16_t* w, const uint16_t* b, uint16_t* out,
                              int64_t rows, int hidden, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  const float inv_h = 1.0f / static_cast<float>(hidden);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows;
       row += warps) {
    const uint16_t* xr = x + row * hidden;
    float s = 0.f;
    for (int h = lane; h < hidden; h += 32) s += bf2f(xr[h]);
    const float mean = warp_sum(s) * inv_h;
    float m2 = 0.f;
    for (int h = lane; h < hidden; h += 32) {
      const float d = bf2f(xr[h]) - mean;
      m2 = fmaf(d, d, m2);
    }
    const float rstd = 1.0f / sqrtf(warp_sum(m2) * inv_h + eps);
    for (int h = lane; h < hidden; h += 32)
      out[row * hidden + h] =
          __bfloat16_as_ushort(__float2bfloat16_rn(((bf2f(xr[h]) - mean) * rstd) * bf2f(w[h]) + bf2f(b[h])));
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// x [..., H], weight, bias [H] (bf16) -> out [..., H] bf16; rows = numel(x) / H.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "layer_norm");
  const DLTensor* x0 = atrex_input(launch, "x");
  const int nd = x0 && x0->ndim >= 1 ? x0->ndim : 1;  // any rank >= 1
  const DLTensor* x = ts.input("x", kBF16, nd);
  const DLTensor* w = ts.input("weight", kBF16, 1);
  const DLTensor* b = ts.input("bias", kBF16, 1);
  const DLTensor* o = ts.output("out", kBF16, nd);
  ts.same_dims(x, o);
  if (!ts.ok()) return ts.failed();
  const int64_t hidden = x->shape[x->ndim - 1];
  if (w->shape[0] != hidden || b->shape[0] != hidden)
    return fail("layer_norm: weight and bias must be [shape[-1]]");
  if (hidden == 0) return 0;
  const int64_t rows = atrex_numel(x) / hidden;
  if (rows > 0x7fffffff || hidden > 0x7fffffff) return fail("layer_norm: too large");
  if (rows == 0) return 0;
  const float eps = 1e-5f;
  const auto* xp = static_cast<const uint16_t*>(x->data);
  const auto* wp = static_cast<const uint16_t*>(w->data);
  const auto* bp = static_cast<const uint16_t*>(b->data);
  auto* op = static_cast<uint16_t*>(o->data);
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  static int sms = 0;  // once per process
  if (sms == 0) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      sms = 132;
  }
  const int64_t bytes = static_cast<int64_t>(WARPS) * STAGES * hidden * 2;
  const bool fits = hidden % 8 == 0 && aligned(xp, 16) && aligned(wp, 16) && aligned(bp, 16) && aligned(op, 16);
  if (fits && bytes <= kMaxSmem) {
    static int64_t attr_bytes = 0;
    if (bytes > attr_bytes) {
      const cudaError_t e = cudaFuncSetAttribute(pipeline_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(bytes));
      if (e != cudaSuccess) return fail("layer_norm: %s", cudaGetErrorString(e));
      attr_bytes = bytes;
    }
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, pipeline_kernel, WARPS * 32, static_cast<size_t>(bytes)) !=
            cudaSuccess ||
        per_sm < 1)
      per_sm = 1;
    const int64_t need = (rows + WARPS - 1) / WARPS;
    const int64_t grid = need < static_cast<int64_t>(sms) * per_sm ? need : static_cast<int64_t>(sms) * per_sm;
    pipeline_kernel<<<static_cast<unsigned>(grid), WARPS * 32, static_cast<size_t>(bytes), s>>>(
        xp, wp, bp, op, rows, static_cast<int>(hidden), eps);
  } else {
    const int64_t blocks = (rows + 7) / 8;
    scalar_kernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), 256, 0, s>>>(xp, wp, bp, op, rows,
                                                                                        static_cast<int>(hidden), eps);
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("layer_norm: %s", cudaGetErrorString(err));
}
