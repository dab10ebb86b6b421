// atrex-template: block_row
// atrex-description: one thread block per row; the residual sum v = bf16(x + residual) is formed once per element, written as residual_out and kept in registers (REG_PACKS 2*VEC-byte packs per thread), then a block sum of squares, the doubly rounded normed values kept in place of v, a block amax, and paired fp32->e4m3 conversions of normed / scale; one read of x and residual, one write of each output
// atrex-param: BLOCK_THREADS = 256 | 128, 256, 512
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
#include <cuda_fp8.h>
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
using atrex::cand::kF32;
using atrex::cand::kFP8E4M3;

// The float8_e4m3fnuz range of the reference (stored as e4m3fn).
constexpr float kInvFp8Max = 1.0f / 240.0f;

template <int V>
struct alignas(2 * V) Pack {
  uint16_t h[V];
};
template <int V>
struct alignas(V) Bytes {
  uint8_t b[V];
};
template <int V>
struct Word;
template <>
struct Word<8> {
  using T = uint4;
  using Half = uint2;
};
template <>
struct Word<4> {
  using T = uint2;
  using Half = unsigned;
};
template <>
struct Word<2> {
  using T = unsigned;
  using Half = unsigned short;
};
template <>
struct Word<1> {
  using T = unsigned short;
  using Half = unsigned char;
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
__device__ __forceinline__ uint16_t f2bf(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

// v = bf16(x + residual), its squares added to ss.
template <int V>
__device__ __forceinline__ Pack<V> residual_sum(const Pack<V>& x, const Pack<V>& r, float& ss) {
  Pack<V> v;
#pragma unroll
  for (int e = 0; e < V; ++e) {
    v.h[e] = f2bf(bf2f(x.h[e]) + bf2f(r.h[e]));
    const float f = bf2f(v.h[e]);
    ss = fmaf(f, f, ss);
  }
  return v;
}
// normed = bf16(bf16(v * rstd) * w), its magnitudes folded into amax.
template <int V>
__device__ __forceinline__ Pack<V> normalise(const Pack<V>& v, const Pack<V>& w, float rstd,
                                             float& amax) {
  Pack<V> n;
#pragma unroll
  for (int e = 0; e < V; ++e) {
    n.h[e] = f2bf(bf2f(f2bf(bf2f(v.h[e]) * rstd)) * bf2f(w.h[e]));
    amax = fmaxf(amax, fabsf(bf2f(n.h[e])));
  }
  return n;
}
// q = e4m3(normed / scale), V bytes in one store.
template <int V>
__device__ __forceinline__ void quant_store(uint8_t* q, const Pack<V>& n, float s) {
  Bytes<V> o;
#pragma unroll
  for (int e = 0; e < V; e += 2) {
    const float2 f = make_float2(__fdiv_rn(bf2f(n.h[e]), s), __fdiv_rn(bf2f(n.h[e + 1]), s));
    const __nv_fp8x2_storage_t two = __nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, __NV_E4M3);
    memcpy(&o.b[e], &two, 2);
  }
  typename Word<V>::Half u;
  memcpy(&u, &o, sizeof u);
  *reinterpret_cast<typename Word<V>::Half*>(q) = u;
}

// Sum (kMax false) or max (kMax true) over the block; every thread gets the result.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v, float* partial) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  v = (threadIdx.x & 31) < (blockDim.x >> 5) ? partial[threadIdx.x & 31] : 0.f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  __syncthreads();  // partial is reused by the next reduction
  return v;
}

// hidden % V == 0 and every row base 2V-byte (bf16) / V-byte (fp8) aligned (checked by the
// host). Packs past the register cache are recomputed from x and residual (the same v).
template <int V>
__global__ void __launch_bounds__(BLOCK_THREADS)
    rmsnorm_quant_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ res,
                         const uint16_t* __restrict__ w, uint8_t* __restrict__ q,
                         float* __restrict__ scale, uint16_t* __restrict__ res_out, int hidden,
                         float eps) {
  __shared__ float partial[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * hidden;
  const int nvec = hidden / V, nt = static_cast<int>(blockDim.x), tid = static_cast<int>(threadIdx.x);
  Pack<V> cache[REG_PACKS];
  float ss = 0.f;
#pragma unroll
  for (int c = 0; c < REG_PACKS; ++c) {
    const int i = c * nt + tid;
    if (i < nvec) {
      cache[c] = residual_sum(load<V>(x + base + i * V), load<V>(res + base + i * V), ss);
      store<V>(res_out + base + i * V, cache[c]);
    }
  }
  for (int i = REG_PACKS * nt + tid; i < nvec; i += nt)
    store<V>(res_out + base + i * V, residual_sum(load<V>(x + base + i * V), load<V>(res + base + i * V), ss));
  ss = block_reduce<false>(ss, partial);
  const float rstd = 1.0f / sqrtf(ss / static_cast<float>(hidden) + eps);
  float amax = 0.f;
#pragma unroll
  for (int c = 0; c < REG_PACKS; ++c) {
    const int i = c * nt + tid;
    if (i < nvec) cache[c] = normalise(cache[c], load<V>(w + i * V), rstd, amax);
  }
  for (int i = REG_PACKS * nt + tid; i < nvec; i += nt) {
    float unused = 0.f;
    normalise(residual_sum(load<V>(x + base + i * V), load<V>(res + base + i * V), unused),
              load<V>(w + i * V), rstd, amax);
  }
  amax = block_reduce<true>(amax, partial);
  float s = amax * kInvFp8Max;
  if (s == 0.f) s = 1.f;
#pragma unroll
  for (int c = 0; c < REG_PACKS; ++c) {
    const int i = c * nt + tid;
    if (i < nvec) quant_store<V>(q + base + i * V, cache[c], s);
  }
  for (int i = REG_PACKS * nt + tid; i < nvec; i += nt) {
    float u0 = 0.f, u1 = 0.f;
    const Pack<V> n = normalise(residual_sum(load<V>(x + base + i * V), load<V>(res + base + i * V), u0),
                                load<V>(w + i * V), rstd, u1);
    quant_store<V>(q + base + i * V, n, s);
  }
  if (tid == 0) scale[blockIdx.x] = s;
}

// Any hidden, any alignment: one element per step.
__global__ void __launch_bounds__(BLOCK_THREADS)
    rmsnorm_quant_scalar(const uint16_t* __restrict__ x, const uint16_t* __restrict__ res,
                         const uint16_t* __restrict__ w, uint8_t* __restrict__ q,
                         float* __restrict__ scale, uint16_t* __restrict__ res_out, int hidden,
                         float eps) {
  __shared__ float partial[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * hidden;
  float ss = 0.f;
  for (int h = threadIdx.x; h < hidden; h += blockDim.x) {
    const uint16_t v = f2bf(bf2f(x[base + h]) + bf2f(res[base + h]));
    res_out[base + h] = v;
    ss = fmaf(bf2f(v), bf2f(v), ss);
  }
  ss = block_reduce<false>(ss, partial);
  const float rstd = 1.0f / sqrtf(ss / static_cast<float>(hidden) + eps);
  auto normed = [&](int h) {
    const float v = bf2f(f2bf(bf2f(x[base + h]) + bf2f(res[base + h])));
    return bf2f(f2bf(bf2f(f2bf(v * rstd)) * bf2f(w[h])));
  };
  float amax = 0.f;
  for (int h = threadIdx.x; h < hidden; h += blockDim.x) amax = fmaxf(amax, fabsf(normed(h)));
  amax = block_reduce<true>(amax, partial);
  float s = amax * kInvFp8Max;
  if (s == 0.f) s = 1.f;
  for (int h = threadIdx.x; h < hidden; h += blockDim.x)
    q[base + h] = __nv_cvt_float_to_fp8(__fdiv_rn(normed(h), s), __NV_SATFINITE, __NV_E4M3);
  if (threadIdx.x == 0) scale[blockIdx.x] = s;
}

template <int V>
void launch_v(const uint16_t* x, const uint16_t* r, const uint16_t* w, uint8_t* q, float* sc,
              uint16_t* ro, int64_t rows, int hidden, float eps, cudaStream_t s) {
  // Just enough threads to cache the row (a multiple of 32, at most BLOCK_THREADS).
  const int64_t want = (hidden / V + REG_PACKS - 1) / REG_PACKS;
  const int threads = static_cast<int>(want >= BLOCK_THREADS ? BLOCK_THREADS : (want + 31) / 32 * 32);
  rmsnorm_quant_kernel<V><<<static_cast<unsigned>(rows), threads, 0, s>>>(x, r, w, q, sc, ro, hidden, eps);
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// x, residual [T, H], weight [H] (bf16) -> quantized [T, H] e4m3, scale [T, 1] fp32,
// residual_out [T, H] bf16.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "fused_rmsnorm_quant");
  const DLTensor* x = ts.input("x", kBF16, 2);
  const DLTensor* r = ts.input("residual", kBF16, 2);
  const DLTensor* w = ts.input("weight", kBF16, 1);
  const DLTensor* q = ts.output("quantized", kFP8E4M3, 2);
  const DLTensor* sc = ts.output("scale", kF32, 2);
  const DLTensor* ro = ts.output("residual_out", kBF16, 2);
  ts.same_dims(x, r);
  ts.same_dims(x, q);
  ts.same_dims(x, ro);
  if (!ts.ok()) return ts.failed();
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  if (w->shape[0] != hidden) return fail("fused_rmsnorm_quant: weight must be [hidden_size]");
  if (sc->shape[0] != rows || sc->shape[1] != 1) return fail("fused_rmsnorm_quant: scale must be [T, 1]");
  if (rows > 0x7fffffff || hidden > 0x7fffffff) return fail("fused_rmsnorm_quant: too large");
  if (rows == 0 || hidden == 0) return 0;
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-5));
  const auto* xp = static_cast<const uint16_t*>(x->data);
  const auto* rp = static_cast<const uint16_t*>(r->data);
  const auto* wp = static_cast<const uint16_t*>(w->data);
  auto* qp = static_cast<uint8_t*>(q->data);
  auto* sp = static_cast<float*>(sc->data);
  auto* op = static_cast<uint16_t*>(ro->data);
  int v = VEC;
  auto fits = [&](int n) {
    return hidden % n == 0 && aligned(xp, 2 * n) && aligned(rp, 2 * n) && aligned(wp, 2 * n) &&
           aligned(op, 2 * n) && aligned(qp, n);
  };
  while (v > 2 && !fits(v)) v /= 2;
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  const int h = static_cast<int>(hidden);
  if (!fits(v))
    rmsnorm_quant_scalar<<<static_cast<unsigned>(rows), BLOCK_THREADS, 0, s>>>(xp, rp, wp, qp, sp, op, h, eps);
  else if (VEC >= 8 && v == 8)
    launch_v<(VEC >= 8 ? 8 : 2)>(xp, rp, wp, qp, sp, op, rows, h, eps, s);
  else if (VEC >= 4 && v == 4)
    launch_v<(VEC >= 4 ? 4 : 2)>(xp, rp, wp, qp, sp, op, rows, h, eps, s);
  else
    launch_v<2>(xp, rp, wp, qp, sp, op, rows, h, eps, s);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail(cudaGetErrorString(err));
}
