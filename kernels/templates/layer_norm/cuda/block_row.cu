// atrex-template: block_row
// atrex-description: one thread block per row, sized so each thread caches at most REG_PACKS 2*VEC-byte packs of x in registers (capped at BLOCK_THREADS); the mean, then the centred sum of squares from the registers (two exact passes, no second read of x), both block reductions (shuffles + shared memory), then (x - mean) * rstd * w + b with VEC-wide stores
// atrex-param: BLOCK_THREADS = 256 | 64, 128, 256
// atrex-param: VEC = 8 | 2, 4, 8
// atrex-param: REG_PACKS = 2 | 1, 2, 4
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 256
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef REG_PACKS
#define REG_PACKS 2
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS >= 32 && BLOCK_THREADS <= 1024,
              "BLOCK_THREADS");
static_assert(VEC == 2 || VEC == 4 || VEC == 8, "VEC");

namespace {

using atrex::cand::aligned;
using atrex::cand::fail;
using atrex::cand::kBF16;

template <int V>
struct alignas(2 * V) Pack {
  uint16_t h[V];
};
template <int V>
struct Word;
template <>
struct Word<8> {
  using T = uint4;
};
template <>
struct Word<4> {
  using T = uint2;
};
template <>
struct Word<2> {
  using T = unsigned;
};
template <>
struct Word<1> {
  using T = unsigned short;
};
template <int V>
__device__ __forceinline__ Pack<V> load(const uint16_t* p) {
  const typename Word<V>::T u = __ldg(reinterpret_cast<const typename Word<V>::T*>(p));
  Pack<V> r;
  memcpy(&r, &u, sizeof r);
  return r;
}
template <int V>
__device__ __forceinline__ void store(uint16_t* p, const Pack<V>& v) {
  typename Word<V>::T u;
  memcpy(&u, &v, sizeof u);
  *reinterpret_cast<typename Word<V>::T*>(p) = u;
}
__device__ __forceinline__ float bf2f(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
template <int V>
__device__ __forceinline__ float pack_sum(const Pack<V>& p, float s) {
#pragma unroll
  for (int e = 0; e < V; ++e) s += bf2f(p.h[e]);
  return s;
}
template <int V>
__device__ __forceinline__ float pack_dev2(const Pack<V>& p, float mean, float s) {
#pragma unroll
  for (int e = 0; e < V; ++e) {
    const float d = bf2f(p.h[e]) - mean;
    s = fmaf(d, d, s);
  }
  return s;
}
// ((x - mean) * rstd) * w + b, the reference's order, one bf16 rounding.
template <int V>
__device__ __forceinline__ Pack<V> affine(const Pack<V>& x, const Pack<V>& w, const Pack<V>& b,
                                          float mean, float rstd) {
  Pack<V> o;
#pragma unroll
  for (int e = 0; e < V; ++e)
    o.h[e] = __bfloat16_as_ushort(
        __float2bfloat16_rn(((bf2f(x.h[e]) - mean) * rstd) * bf2f(w.h[e]) + bf2f(b.h[e])));
  return o;
}

__device__ __forceinline__ float block_sum(float v, float* partial) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  v = (threadIdx.x & 31) < (blockDim.x >> 5) ? partial[threadIdx.x & 31] : 0.f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();  // partial is reused by the next reduction
  return v;
}

// hidden % V == 0, x/w/b/out 2V-byte aligned (checked by the host; V = 1 is any alignment).
// Packs past the register cache are read again from x.
template <int V>
__global__ void __launch_bounds__(BLOCK_THREADS)
    layer_norm_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,
                      const uint16_t* __restrict__ b, uint16_t* __restrict__ out, int hidden,
                      float eps) {
  __shared__ float partial[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * hidden;
  const int nvec = hidden / V, nt = static_cast<int>(blockDim.x), tid = static_cast<int>(threadIdx.x);
  Pack<V> cache[REG_PACKS];
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < REG_PACKS; ++c) {
    const int i = c * nt + tid;
    if (i < nvec) {
      cache[c] = load<V>(x + base + i * V);
      s = pack_sum(cache[c], s);
    }
  }
  for (int i = REG_PACKS * nt + tid; i < nvec; i += nt) s = pack_sum(load<V>(x + base + i * V), s);
  const float inv_h = 1.0f / static_cast<float>(hidden);
  const float mean = block_sum(s, partial) * inv_h;
  float m2 = 0.f;
#pragma unroll
  for (int c = 0; c < REG_PACKS; ++c) {
    const int i = c * nt + tid;
    if (i < nvec) m2 = pack_dev2(cache[c], mean, m2);
  }
  for (int i = REG_PACKS * nt + tid; i < nvec; i += nt) m2 = pack_dev2(load<V>(x + base + i * V), mean, m2);
  const float rstd = 1.0f / sqrtf(block_sum(m2, partial) * inv_h + eps);
#pragma unroll
  for (int c = 0; c < REG_PACKS; ++c) {
    const int i = c * nt + tid;
    if (i < nvec) store<V>(out + base + i * V, affine(cache[c], load<V>(w + i * V), load<V>(b + i * V), mean, rstd));
  }
  for (int i = REG_PACKS * nt + tid; i < nvec; i += nt)
    store<V>(out + base + i * V, affine(load<V>(x + base + i * V), load<V>(w + i * V), load<V>(b + i * V), mean, rstd));
}

template <int V>
void launch_v(const uint16_t* x, const uint16_t* w, const uint16_t* b, uint16_t* out, int64_t rows,
              int hidden, float eps, cudaStream_t s) {
  // Just enough threads to cache the row (a multiple of 32, at most BLOCK_THREADS).
  const int64_t want = (hidden / V + REG_PACKS - 1) / REG_PACKS;
  const int threads = static_cast<int>(want >= BLOCK_THREADS ? BLOCK_THREADS : (want + 31) / 32 * 32);
  layer_norm_kernel<V><<<static_cast<unsigned>(rows), threads, 0, s>>>(x, w, b, out, hidden, eps);
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
  int v = VEC;
  auto fits = [&](int n) {
    return hidden % n == 0 && aligned(xp, 2 * n) && aligned(wp, 2 * n) && aligned(bp, 2 * n) &&
           aligned(op, 2 * n);
  };
  while (v > 1 && !fits(v)) v /= 2;
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  const int h = static_cast<int>(hidden);
  if (VEC >= 8 && v == 8)
    launch_v<(VEC >= 8 ? 8 : 1)>(xp, wp, bp, op, rows, h, eps, s);
  else if (VEC >= 4 && v == 4)
    launch_v<(VEC >= 4 ? 4 : 1)>(xp, wp, bp, op, rows, h, eps, s);
  else if (v == 2)
    launch_v<2>(xp, wp, bp, op, rows, h, eps, s);
  else
    launch_v<1>(xp, wp, bp, op, rows, h, eps, s);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail(cudaGetErrorString(err));
}
