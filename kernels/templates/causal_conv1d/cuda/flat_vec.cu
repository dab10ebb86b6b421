// atrex-template: flat_vec
// atrex-description: x [dim, T] walked as one flat array in 2*VEC-byte packs (row boundaries need no alignment): each thread convolves PACKS_PER_THREAD packs with a register window (the pack plus the width-1 values before it), the channel's taps and bias cached in registers, the initial state read where a row starts
// atrex-param: BLOCK_THREADS = 256 | 128, 256
// atrex-param: VEC = 8 | 2, 4, 8
// atrex-param: PACKS_PER_THREAD = 1 | 1, 2, 4
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 256
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef PACKS_PER_THREAD
#define PACKS_PER_THREAD 1
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <cstring>

#include "atrex/candidate_util.h"

static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS <= 1024, "BLOCK_THREADS");
static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "VEC");
static_assert(PACKS_PER_THREAD >= 1 && PACKS_PER_THREAD <= 8, "PACKS_PER_THREAD");

namespace {

using atrex::cand::fail;
using atrex::cand::is;
using atrex::cand::kBF16;
using atrex::cand::aligned;

// Widest conv this template takes (taps are runtime; W = 0 instantiates the runtime-width path).
constexpr int kMaxWidth = 8;

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
__device__ __forceinline__ uint16_t f2bf(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

struct Args {
  const uint16_t* x;
  const uint16_t* w;
  const uint16_t* bias;
  const uint16_t* state;
  uint16_t* out;
  int64_t n;       // dim * T
  int64_t tokens;  // T
  int width;
  bool silu;
};

// The taps and bias of channel d, as floats.
template <int W>
struct Taps {
  float w[W == 0 ? kMaxWidth : W];
  float b;
};
template <int W>
__device__ __forceinline__ void load_taps(const Args& a, int64_t d, int width, Taps<W>& t) {
#pragma unroll
  for (int j = 0; j < (W == 0 ? kMaxWidth : W); ++j)
    t.w[j] = j < width ? bf2f(__ldg(a.w + d * width + j)) : 0.f;
  t.b = bf2f(__ldg(a.bias + d));
}

// Pack at flat index i0 (a multiple of V); elements past n are neither read nor written.
template <int W, int V>
__device__ __forceinline__ void conv_pack(const Args& a, int64_t i0) {
  constexpr int KW = W == 0 ? kMaxWidth : W;
  const int width = W == 0 ? a.width : W;
  // win[k] = x(flat i0 - (width - 1) + k), the window of taps of the pack's V outputs.
  float win[KW - 1 + V];
#pragma unroll
  for (int k = 0; k < KW - 1; ++k) {
    const int64_t i = i0 - (width - 1) + k;
    win[k] = (k < width - 1 && i >= 0) ? bf2f(__ldg(a.x + i)) : 0.f;
  }
  if (i0 + V <= a.n) {
    const Pack<V> p = load<V>(a.x + i0);
#pragma unroll
    for (int e = 0; e < V; ++e) win[width - 1 + e] = bf2f(p.h[e]);
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) win[width - 1 + e] = i0 + e < a.n ? bf2f(__ldg(a.x + i0 + e)) : 0.f;
  }
  int64_t d = i0 / a.tokens;
  int64_t t = i0 - d * a.tokens;
  Taps<W> taps;
  load_taps<W>(a, d, width, taps);
  Pack<V> o;
#pragma unroll
  for (int e = 0; e < V; ++e) {
    if (t == a.tokens) {  // the pack crosses into the next channel
      ++d;
      t = 0;
      if (i0 + e < a.n) load_taps<W>(a, d, width, taps);
    }
    float acc = taps.b;
#pragma unroll
    for (int j = 0; j < KW; ++j) {
      if (j < width) {
        const int64_t p = t + j - (width - 1);  // < 0: inside the initial state
        const float xv =
            p >= 0 ? win[e + j] : (i0 + e < a.n ? bf2f(__ldg(a.state + d * (width - 1) + (width - 1) + p)) : 0.f);
        acc = fmaf(taps.w[j], xv, acc);
      }
    }
    const float conv = bf2f(f2bf(acc));
    o.h[e] = f2bf(a.silu ? conv / (1.0f + expf(-conv)) : conv);
    ++t;
  }
  if (i0 + V <= a.n) {
    store<V>(a.out + i0, o);
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e)
      if (i0 + e < a.n) a.out[i0 + e] = o.h[e];
  }
}

template <int W, int V>
__global__ void __launch_bounds__(BLOCK_THREADS) conv_kernel(Args a, int64_t packs) {
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * PACKS_PER_THREAD) * BLOCK_THREADS + threadIdx.x;
#pragma unroll
  for (int k = 0; k < PACKS_PER_THREAD; ++k) {
    const int64_t p = first + static_cast<int64_t>(k) * BLOCK_THREADS;
    if (p < packs) conv_pack<W, V>(a, p * V);
  }
}

template <int V>
void launch_v(const Args& a, cudaStream_t s) {
  const int64_t packs = (a.n + V - 1) / V;
  const int64_t per_block = static_cast<int64_t>(BLOCK_THREADS) * PACKS_PER_THREAD;
  const int64_t blocks = (packs + per_block - 1) / per_block;
  if (a.width == 4)
    conv_kernel<4, V><<<static_cast<unsigned>(blocks), BLOCK_THREADS, 0, s>>>(a, packs);
  else
    conv_kernel<0, V><<<static_cast<unsigned>(blocks), BLOCK_THREADS, 0, s>>>(a, packs);
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// x [dim, T], weight [dim, width], bias [dim], initial_state [1, dim, width - 1] (bf16) ->
// out [dim, T] bf16.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "causal_conv1d");
  const DLTensor* x = ts.input("x", kBF16, 2);
  const DLTensor* w = ts.input("weight", kBF16, 2);
  const DLTensor* b = ts.input("bias", kBF16, 1);
  const DLTensor* st = ts.input("initial_state", kBF16, 3);
  const DLTensor* o = ts.output("out", kBF16, 2);
  ts.same_dims(x, o);
  if (!ts.ok()) return ts.failed();
  const int64_t dim = x->shape[0], tokens = x->shape[1], width = w->shape[1];
  if (w->shape[0] != dim || b->shape[0] != dim || st->shape[0] != 1 || st->shape[1] != dim ||
      st->shape[2] != width - 1)
    return fail("causal_conv1d: weight [dim, width], bias [dim], initial_state [1, dim, width - 1] expected");
  if (width < 1 || width > kMaxWidth)
    return fail("causal_conv1d: width %lld not in [1, %d]", static_cast<long long>(width), kMaxWidth);
  if (dim == 0 || tokens == 0) return 0;
  const AtrexParam* act = atrex_param(launch, "activation");
  Args a{static_cast<const uint16_t*>(x->data), static_cast<const uint16_t*>(w->data),
         static_cast<const uint16_t*>(b->data), static_cast<const uint16_t*>(st->data),
         static_cast<uint16_t*>(o->data), dim * tokens, tokens, static_cast<int>(width),
         !act || std::strcmp(act->string_value, "none") != 0};
  int v = VEC;
  while (v > 1 && !(aligned(a.x, 2 * v) && aligned(a.out, 2 * v))) v /= 2;
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  if (VEC >= 8 && v == 8)
    launch_v<(VEC >= 8 ? 8 : 1)>(a, s);
  else if (VEC >= 4 && v == 4)
    launch_v<(VEC >= 4 ? 4 : 1)>(a, s);
  else if (v == 2)
    launch_v<2>(a, s);
  else
    launch_v<1>(a, s);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail(cudaGetErrorString(err));
}
