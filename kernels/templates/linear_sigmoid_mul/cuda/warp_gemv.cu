// atrex-template: warp_gemv
// atrex-description: CUDA-core GEMV tiles for decode-sized token counts, where streaming the weight once sets the time: a block stages TOK_TILE tokens of hidden_states in shared memory, each warp owns COLS weight rows and streams them with coalesced 16-byte loads (32 lanes read 512 contiguous bytes), every weight pack is used for all staged tokens, fp32 partial dots are combined with shuffles and the bias, bf16 gate rounding, sigmoid and post_mul_mat product are applied by the owning lanes
// atrex-param: TOK_TILE = 8 | 4, 8, 16
// atrex-param: COLS = 4 | 2, 4
#ifndef TOK_TILE
#define TOK_TILE 8
#endif
#ifndef COLS
#define COLS 4
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

// out[t, n] = bf16(sigmoid(bf16(x[t] . w[n] + bias[n])) * post[t, n]): x [T, H] and w [N, H]
// bf16, fp32 accumulation.
namespace {

using atrex::cand::aligned;
using atrex::cand::fail;
using atrex::cand::kBF16;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kColsPerBlock = kWarps * COLS;

static_assert(TOK_TILE >= 1 && TOK_TILE <= 16, "TOK_TILE");
static_assert(COLS >= 1 && COLS <= 8, "COLS");

__device__ __forceinline__ float bf2f(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
__device__ __forceinline__ float round_bf16(float f) {
  return __bfloat162float(__float2bfloat16_rn(f));
}
__device__ __forceinline__ float gate_mul(float acc, float bias, float post) {
  const float g = round_bf16(acc + bias);
  return (1.0f / (1.0f + expf(-g))) * post;
}
// The 8 bf16 values of a 16-byte word as floats (low half first).
__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// k % 8 == 0 and x, w 16-byte aligned (checked by the host). Dynamic shared memory holds
// TOK_TILE rows of x (k bf16 each); rows past T are zero and their outputs are not written.
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,
                const uint16_t* __restrict__ bias, const uint16_t* __restrict__ post,
                uint16_t* __restrict__ out, int64_t t, int64_t n, int64_t k) {
  extern __shared__ __align__(16) uint4 xs[];  // [TOK_TILE][k / 8]
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * TOK_TILE;
  const int tokens = static_cast<int>(t - t0 < TOK_TILE ? t - t0 : TOK_TILE);
  const int64_t packs = k / 8;
  for (int64_t i = threadIdx.x; i < TOK_TILE * packs; i += kThreads) {
    const int64_t row = i / packs, col = i % packs;
    xs[i] = row < tokens ? __ldg(reinterpret_cast<const uint4*>(x + (t0 + row) * k) + col)
                         : make_uint4(0, 0, 0, 0);
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kColsPerBlock + warp * COLS;
  if (c0 >= n) return;
  const uint4* wrow[COLS];
#pragma unroll
  for (int c = 0; c < COLS; ++c)
    wrow[c] = reinterpret_cast<const uint4*>(w + (c0 + c < n ? c0 + c : c0) * k);
  float acc[COLS][TOK_TILE];
#pragma unroll
  for (int c = 0; c < COLS; ++c)
#pragma unroll
    for (int r = 0; r < TOK_TILE; ++r) acc[c][r] = 0.f;
  for (int64_t p = lane; p < packs; p += 32) {
    float wf[COLS][8];
#pragma unroll
    for (int c = 0; c < COLS; ++c) unpack8(__ldg(wrow[c] + p), wf[c]);
#pragma unroll
    for (int r = 0; r < TOK_TILE; ++r) {
      float xf[8];
      unpack8(xs[r * packs + p], xf);
#pragma unroll
      for (int c = 0; c < COLS; ++c)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[c][r] = fmaf(xf[e], wf[c][e], acc[c][r]);
    }
  }
  // Butterfly sums: every lane ends with every total; lane (c * TOK_TILE + r) % 32 writes (r, c).
#pragma unroll
  for (int c = 0; c < COLS; ++c)
#pragma unroll
    for (int r = 0; r < TOK_TILE; ++r) {
      float v = acc[c][r];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      const int64_t col = c0 + c;
      if (lane == (c * TOK_TILE + r) % 32 && r < tokens && col < n) {
        const int64_t off = (t0 + r) * n + col;
        out[off] = __bfloat16_as_ushort(__float2bfloat16_rn(gate_mul(v, bf2f(bias[col]), bf2f(post[off]))));
      }
    }
}

// Any H, any alignment: one warp per output, lanes striding over K, a shuffle sum.
__global__ void scalar_kernel(const uint16_t* x, const uint16_t* w, const uint16_t* bias,
                              const uint16_t* post, uint16_t* out, int64_t t, int64_t n, int64_t k) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); o < t * n;
       o += warps) {
    const int64_t r = o / n, c = o % n;
    float s = 0.f;
    for (int64_t i = lane; i < k; i += 32) s = fmaf(bf2f(x[r * k + i]), bf2f(w[c * k + i]), s);
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) s += __shfl_xor_sync(0xffffffffu, s, d);
    if (lane == 0) out[o] = __bfloat16_as_ushort(__float2bfloat16_rn(gate_mul(s, bf2f(bias[c]), bf2f(post[o]))));
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// hidden_states [T, H], weight [N, H], bias [N], post_mul_mat [T, N] (bf16) -> out [T, N] bf16.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "linear_sigmoid_mul");
  const DLTensor* x = ts.input("hidden_states", kBF16, 2);
  const DLTensor* w = ts.input("weight", kBF16, 2);
  const DLTensor* b = ts.input("bias", kBF16, 1);
  const DLTensor* p = ts.input("post_mul_mat", kBF16, 2);
  const DLTensor* o = ts.output("out", kBF16, 2);
  ts.same_dims(p, o);
  if (!ts.ok() || !ts.dim_is(w, 1, x->shape[1]) || !ts.dim_is(b, 0, w->shape[0]) ||
      !ts.dim_is(o, 0, x->shape[0]) || !ts.dim_is(o, 1, w->shape[0]))
    return ts.failed();
  const int64_t t = x->shape[0], k = x->shape[1], n = w->shape[0];
  if (t == 0 || n == 0) return 0;
  const auto* xp = static_cast<const uint16_t*>(x->data);
  const auto* wp = static_cast<const uint16_t*>(w->data);
  const auto* bp = static_cast<const uint16_t*>(b->data);
  const auto* pp = static_cast<const uint16_t*>(p->data);
  auto* op = static_cast<uint16_t*>(o->data);
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  const int64_t gy = (t + TOK_TILE - 1) / TOK_TILE;
  const int64_t bytes = static_cast<int64_t>(TOK_TILE) * k * 2;
  if (k % 8 == 0 && k > 0 && aligned(xp, 16) && aligned(wp, 16) && gy <= 65535 && bytes <= 200 * 1024) {
    static int attr_bytes = 0;  // the dynamic shared memory beyond 48 KiB, raised as needed
    if (bytes > attr_bytes) {
      const cudaError_t e = cudaFuncSetAttribute(gemv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(bytes));
      if (e != cudaSuccess) return fail("linear_sigmoid_mul: %s", cudaGetErrorString(e));
      attr_bytes = static_cast<int>(bytes);
    }
    const dim3 grid(static_cast<unsigned>((n + kColsPerBlock - 1) / kColsPerBlock), static_cast<unsigned>(gy));
    gemv_kernel<<<grid, kThreads, static_cast<size_t>(bytes), s>>>(xp, wp, bp, pp, op, t, n, k);
  } else {
    const int64_t blocks = (t * n + 7) / 8;
    scalar_kernel<<<static_cast<unsigned>(blocks < (1 << 16) ? blocks : (1 << 16)), 256, 0, s>>>(
        xp, wp, bp, pp, op, t, n, k);
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("linear_sigmoid_mul: %s", cudaGetErrorString(err));
}
