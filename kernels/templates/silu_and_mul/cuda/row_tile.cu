// atrex-template: row_tile
// atrex-description: 2D tiles: threadIdx.x walks VEC-wide column packs, threadIdx.y and ROWS_PER_THREAD walk rows; all gate/up loads of a thread issued before any math
// atrex-param: BLOCK_THREADS = 256 | 64, 128, 256, 512
// atrex-param: VEC = 8 | 2, 4, 8
// atrex-param: ROWS_PER_THREAD = 2 | 1, 2, 4, 8
// atrex-param: FAST_EXP = 0 | 0, 1
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 256
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef ROWS_PER_THREAD
#define ROWS_PER_THREAD 2
#endif
#ifndef FAST_EXP
#define FAST_EXP 0
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS <= 1024, "BLOCK_THREADS");
static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "VEC");

namespace {

using atrex::cand::fail;
using atrex::cand::is;
using atrex::cand::kBF16;
using atrex::cand::aligned;

// V consecutive bf16 values (as bits), aligned like the word that moves them.
template <int V>
struct alignas(2 * V) Pack {
  uint16_t h[V];
};

// The machine word that moves V bf16 values in one access (V = 8: a 16-byte load/store).
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

// Read-only-cache load of an input.
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
// Round-to-nearest-even; pairs go through one packed cvt.rn.bf16x2.f32.
template <int V>
__device__ __forceinline__ Pack<V> to_bf16(const float (&f)[V]) {
  Pack<V> o;
  if constexpr (V == 1)
    o.h[0] = __bfloat16_as_ushort(__float2bfloat16_rn(f[0]));
  else {
#pragma unroll
    for (int e = 0; e < V; e += 2) {
      const __nv_bfloat162 b = __floats2bfloat162_rn(f[e], f[e + 1]);
      memcpy(&o.h[e], &b, 4);
    }
  }
  return o;
}

__device__ __forceinline__ float silu_bf16(float g) {
#if FAST_EXP
  const float a = __fdividef(g, 1.0f + __expf(-g));
#else
  const float a = g / (1.0f + expf(-g));
#endif
  return bf2f(
      __bfloat16_as_ushort(__float2bfloat16_rn(a)));  // the reference rounds the activation to bf16
}
template <int V>
__device__ __forceinline__ Pack<V> silu_mul(const Pack<V>& g, const Pack<V>& u) {
  float f[V];
#pragma unroll
  for (int e = 0; e < V; ++e) f[e] = silu_bf16(bf2f(g.h[e])) * bf2f(u.h[e]);
  return to_bf16<V>(f);
}

// d % V == 0 and cols % V == 0 (checked by the host). Block = blockDim.x column packs x blockDim.y
// rows, each thread covering ROWS_PER_THREAD rows blockDim.y apart.
template <int V>
__global__ void __launch_bounds__(BLOCK_THREADS, 1)
    silu_and_mul_kernel(const uint16_t* __restrict__ x, uint16_t* __restrict__ out, int64_t rows,
                        int64_t cols, int64_t d) {
  const int64_t c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c * V >= d) return;
  const int64_t row0 =
      static_cast<int64_t>(blockIdx.x) * blockDim.y * ROWS_PER_THREAD + threadIdx.y;
  Pack<V> g[ROWS_PER_THREAD], u[ROWS_PER_THREAD];
#pragma unroll
  for (int r = 0; r < ROWS_PER_THREAD; ++r) {
    const int64_t row = row0 + static_cast<int64_t>(r) * blockDim.y;
    if (row < rows) {
      const uint16_t* p = x + row * cols + c * V;
      g[r] = load<V>(p);
      u[r] = load<V>(p + d);
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS_PER_THREAD; ++r) {
    const int64_t row = row0 + static_cast<int64_t>(r) * blockDim.y;
    if (row < rows) store<V>(out + row * d + c * V, silu_mul<V>(g[r], u[r]));
  }
}

template <int V>
int launch_v(const uint16_t* x, uint16_t* out, int64_t rows, int64_t cols, int64_t d,
             cudaStream_t s) {
  const int64_t row_packs = d / V;
  // Narrow rows get several rows per block instead of idle lanes.
  const int bx =
      static_cast<int>(row_packs >= BLOCK_THREADS ? BLOCK_THREADS : (row_packs + 31) / 32 * 32);
  const int by = BLOCK_THREADS / bx;
  const int64_t rows_per_block = static_cast<int64_t>(by) * ROWS_PER_THREAD;
  const int64_t gx = (rows + rows_per_block - 1) / rows_per_block, gy = (row_packs + bx - 1) / bx;
  if (gx > 0x7fffffff || gy > 65535) return fail("silu_and_mul: grid too large");
  silu_and_mul_kernel<V>
      <<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), dim3(bx, by), 0, s>>>(
          x, out, rows, cols, d);
  return 0;
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// x: [..., cols] -> out: [..., d], d = cols / 2 (rounded down, as the reference does for odd cols).
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* o = atrex_output(launch, "out");
  if (!x || !o) return fail("silu_and_mul: missing tensor x or out");
  if (x->ndim < 1 || !is(x, kBF16) || !is(o, kBF16))
    return fail("silu_and_mul: expected bf16 x[N, 2d] and out[N, d]");
  const int64_t cols = x->shape[x->ndim - 1], d = cols / 2;
  const int64_t rows = cols > 0 ? atrex_numel(x) / cols : 0;
  if (atrex_numel(o) != rows * d) return fail("silu_and_mul: out must hold N * d elements");
  if (rows == 0 || d == 0) return 0;
  const auto* xp = static_cast<const uint16_t*>(x->data);
  auto* op = static_cast<uint16_t*>(o->data);
  // Widest vector dividing both row lengths with aligned bases, so every gate/up/out pack is
  // aligned.
  int v = VEC;
  while (v > 1 && !(d % v == 0 && cols % v == 0 && aligned(xp, 2 * v) && aligned(op, 2 * v)))
    v /= 2;
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  int rc;
  if (VEC >= 8 && v == 8)
    rc = launch_v<(VEC >= 8 ? 8 : 1)>(xp, op, rows, cols, d, s);
  else if (VEC >= 4 && v == 4)
    rc = launch_v<(VEC >= 4 ? 4 : 1)>(xp, op, rows, cols, d, s);
  else if (v == 2)
    rc = launch_v<2>(xp, op, rows, cols, d, s);
  else
    rc = launch_v<1>(xp, op, rows, cols, d, s);
  if (rc != 0) return rc;
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail(cudaGetErrorString(err));
}
