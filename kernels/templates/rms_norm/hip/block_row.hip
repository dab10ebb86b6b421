// atrex-template: block_row
// atrex-description: one thread block per row (whole wavefronts, at most BLOCK_THREADS), VEC-wide bf16 vector loads, wavefront-shuffle + shared-memory sum, second pass re-reads the row (cache hit); wavefront size 32 or 64. Compiled by CI (hipcc), never run: no AMD GPU
// atrex-param: BLOCK_THREADS = 256 | 64, 128, 256, 512, 1024
// atrex-param: VEC = 8 | 1, 2, 4, 8
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 256
#endif
#ifndef VEC
#define VEC 8
#endif

#include <hip/hip_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(BLOCK_THREADS % 64 == 0 && BLOCK_THREADS >= 64 && BLOCK_THREADS <= 1024,
              "BLOCK_THREADS");
static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "VEC");

namespace {

using atrex::cand::fail;
using atrex::cand::is;
using atrex::cand::kBF16;
using atrex::cand::aligned;

// V consecutive bf16 values (as bits), aligned so that one access moves them.
template <int V>
struct alignas(2 * V) Pack {
  uint16_t h[V];
};

__device__ __forceinline__ float bf2f(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
// Round to nearest even; NaN stays NaN.
__device__ __forceinline__ uint16_t f2bf(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

template <int V>
__device__ __forceinline__ float sum_sq(const Pack<V>& p) {
  float s = 0.f;
#pragma unroll
  for (int e = 0; e < V; ++e) s = fmaf(bf2f(p.h[e]), bf2f(p.h[e]), s);
  return s;
}

// Sum over the block: shuffle within each wavefront, then one partial per wavefront through shared
// memory, summed again by every wavefront (no second barrier). blockDim.x is a multiple of 64.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[BLOCK_THREADS / 32];
  const int lane = static_cast<int>(threadIdx.x) % warpSize,
            wave = static_cast<int>(threadIdx.x) / warpSize;
  for (int o = warpSize / 2; o > 0; o >>= 1) v += __shfl_xor(v, o);
  if (lane == 0) partial[wave] = v;
  __syncthreads();
  const int waves = static_cast<int>(blockDim.x) / warpSize;
  v = lane < waves ? partial[lane] : 0.f;
  for (int o = warpSize / 2; o > 0; o >>= 1) v += __shfl_xor(v, o);
  return v;
}

// hidden % V == 0 and every row base is 2V-byte aligned (checked by the host).
template <int V>
__global__ void __launch_bounds__(BLOCK_THREADS)
    rms_norm_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,
                    uint16_t* __restrict__ out, int hidden, float eps) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * hidden;
  const auto* xr = reinterpret_cast<const Pack<V>*>(x + base);
  const auto* wr = reinterpret_cast<const Pack<V>*>(w);
  auto* orow = reinterpret_cast<Pack<V>*>(out + base);
  const int nvec = hidden / V, nt = static_cast<int>(blockDim.x);
  float ss = 0.f;
  for (int i = static_cast<int>(threadIdx.x); i < nvec; i += nt) ss += sum_sq(xr[i]);
  ss = block_sum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(hidden) + eps);
  for (int i = static_cast<int>(threadIdx.x); i < nvec; i += nt) {
    const Pack<V> xv = xr[i], wv = wr[i];
    Pack<V> o;
#pragma unroll
    for (int e = 0; e < V; ++e)
      o.h[e] = f2bf((bf2f(xv.h[e]) * inv) * bf2f(wv.h[e]));  // the reference's order
    orow[i] = o;
  }
}

template <int V>
void launch_v(const uint16_t* x, const uint16_t* w, uint16_t* out, int64_t rows, int hidden,
              float eps, hipStream_t s) {
  // Whole 64-wide wavefronts, at most BLOCK_THREADS, no more than the row has vectors for.
  const int64_t want = hidden / V;
  const int threads =
      static_cast<int>(want >= BLOCK_THREADS ? BLOCK_THREADS : (want + 63) / 64 * 64);
  hipLaunchKernelGGL(rms_norm_kernel<V>, dim3(static_cast<unsigned>(rows)), dim3(threads), 0, s, x,
                     w, out, hidden, eps);
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* o = atrex_output(launch, "out");
  if (!x || !w || !o) return fail("rms_norm: missing tensor x, weight or out");
  if (x->ndim != 2 || w->ndim != 1 || o->ndim != 2 || !is(x, kBF16) || !is(w, kBF16) || !is(o, kBF16))
    return fail("rms_norm: expected bf16 x[T,H], weight[H], out[T,H]");
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  if (w->shape[0] != hidden || o->shape[0] != rows || o->shape[1] != hidden)
    return fail("rms_norm: shape mismatch");
  if (rows > 0x7fffffff || hidden > 0x7fffffff) return fail("rms_norm: too large");
  if (rows == 0 || hidden == 0) return 0;
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const auto* xp = static_cast<const uint16_t*>(x->data);
  const auto* wp = static_cast<const uint16_t*>(w->data);
  auto* op = static_cast<uint16_t*>(o->data);
  // Widest vector that divides the row and keeps every row base aligned; 1 is the scalar fallback.
  int v = VEC;
  while (v > 1 &&
         !(hidden % v == 0 && aligned(xp, 2 * v) && aligned(wp, 2 * v) && aligned(op, 2 * v)))
    v /= 2;
  hipStream_t s = static_cast<hipStream_t>(launch->stream);
  const int h = static_cast<int>(hidden);
  if (VEC >= 8 && v == 8)
    launch_v<(VEC >= 8 ? 8 : 1)>(xp, wp, op, rows, h, eps, s);
  else if (VEC >= 4 && v == 4)
    launch_v<(VEC >= 4 ? 4 : 1)>(xp, wp, op, rows, h, eps, s);
  else if (VEC >= 2 && v == 2)
    launch_v<(VEC >= 2 ? 2 : 1)>(xp, wp, op, rows, h, eps, s);
  else
    launch_v<1>(xp, wp, op, rows, h, eps, s);
  const hipError_t err = hipGetLastError();
  return err == hipSuccess ? 0 : fail(hipGetErrorString(err));
}
