// atrex-template: token_block
// atrex-description: one block per token: the token's cos/sin of every frequency (each from its section's axis row) gathered once into shared memory, then the block's threads stride flat over the 2*VEC-byte packs of all its q and k heads (NeoX partner packs together, GPT-J pairs inside a pack, copies past rotary_dim)
// atrex-param: BLOCK_THREADS = 256 | 64, 128, 256
// atrex-param: VEC = 8 | 2, 4, 8
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 256
#endif
#ifndef VEC
#define VEC 8
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS <= 1024, "BLOCK_THREADS");
static_assert(VEC == 2 || VEC == 4 || VEC == 8, "VEC");

namespace {

using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::kF32;
using atrex::cand::aligned;

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

// Which cos/sin axis (0 t, 1 h, 2 w) frequency f uses.
struct Sections {
  int s0, s1, s2;
  bool interleaved;
  __device__ __forceinline__ int axis(int f) const {
    if (interleaved) {
      if (f % 3 == 1 && f <= 3 * s1) return 1;
      if (f % 3 == 2 && f <= 3 * s2) return 2;
      return 0;
    }
    return f < s0 ? 0 : (f < s0 + s1 ? 1 : 2);
  }
};

struct Args {
  const uint16_t* q;
  const uint16_t* k;
  const float* cos;
  const float* sin;
  uint16_t* qo;
  uint16_t* ko;
  int64_t tokens;
  int hq, hkv, hs, rot;
  bool neox;
  Sections sec;
};

// Block t: token t's q and k heads. Dynamic shared memory: cos[rot / 2], then sin[rot / 2].
// hs, rot and rot / 2 are multiples of V; every pointer 2V-byte aligned (checked by the host).
template <int V>
__global__ void __launch_bounds__(BLOCK_THREADS) mrope_kernel(Args a) {
  extern __shared__ float trig[];
  const int half = a.rot / 2;
  const int64_t t = blockIdx.x;
  for (int f = threadIdx.x; f < half; f += BLOCK_THREADS) {
    const int64_t at = (static_cast<int64_t>(a.sec.axis(f)) * a.tokens + t) * half + f;
    trig[f] = __ldg(a.cos + at);
    trig[half + f] = __ldg(a.sin + at);
  }
  __syncthreads();
  const int packs = a.hs / V, heads = a.hq + a.hkv;
  for (int w = threadIdx.x; w < heads * packs; w += BLOCK_THREADS) {
    const int h = w / packs;
    const int d = (w - h * packs) * V;
    const bool is_q = h < a.hq;
    const int64_t u = is_q ? t * a.hq + h : t * a.hkv + (h - a.hq);
    const uint16_t* src = (is_q ? a.q : a.k) + u * a.hs;
    uint16_t* dst = (is_q ? a.qo : a.ko) + u * a.hs;
    if (d >= a.rot) {
      store<V>(dst + d, load<V>(src + d));
    } else if (!a.neox) {
      if constexpr (V == 1) {
        // Scalar fallback: the pair (d, d + 1) from its even lane.
        if (d % 2 == 0) {
          const float c = trig[d / 2], s = trig[half + d / 2];
          const float x1 = bf2f(src[d]), x2 = bf2f(src[d + 1]);
          dst[d] = f2bf(x1 * c - x2 * s);
          dst[d + 1] = f2bf(x2 * c + x1 * s);
        }
        continue;
      }
      const Pack<V> p = load<V>(src + d);
      Pack<V> o;
#pragma unroll
      for (int e = 0; e + 1 < V; e += 2) {
        const int f = (d + e) / 2;
        const float c = trig[f], s = trig[half + f];
        const float x1 = bf2f(p.h[e]), x2 = bf2f(p.h[e + 1]);
        o.h[e] = f2bf(x1 * c - x2 * s);
        o.h[e + 1] = f2bf(x2 * c + x1 * s);
      }
      store<V>(dst + d, o);
    } else if (d < half) {
      const Pack<V> lo = load<V>(src + d), hi = load<V>(src + d + half);
      Pack<V> olo, ohi;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float c = trig[d + e], s = trig[half + d + e];
        const float x1 = bf2f(lo.h[e]), x2 = bf2f(hi.h[e]);
        olo.h[e] = f2bf(x1 * c - x2 * s);
        ohi.h[e] = f2bf(x2 * c + x1 * s);
      }
      store<V>(dst + d, olo);
      store<V>(dst + d + half, ohi);
    }
    // NeoX d in [half, rot): written with its partner d - half.
  }
}

template <int V>
void launch_v(const Args& a, cudaStream_t s) {
  const size_t smem = sizeof(float) * static_cast<size_t>(a.rot);
  mrope_kernel<V><<<static_cast<unsigned>(a.tokens), BLOCK_THREADS, smem, s>>>(a);
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// q [T, Hq * hs], k [T, Hkv * hs] (bf16), cos, sin [3, T, rot / 2] (fp32) -> rotated q, k.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "mrope");
  const DLTensor* q = ts.input("q", kBF16, 2);
  const DLTensor* k = ts.input("k", kBF16, 2);
  const DLTensor* c = ts.input("cos", kF32, 3);
  const DLTensor* sn = ts.input("sin", kF32, 3);
  const DLTensor* qo = ts.output("q", kBF16, 2);
  const DLTensor* ko = ts.output("k", kBF16, 2);
  ts.same_dims(q, qo);
  ts.same_dims(k, ko);
  ts.same_dims(c, sn);
  if (!ts.ok()) return ts.failed();
  const AtrexParam* section = atrex_param(launch, "mrope_section");
  if (!section || section->int_list_length != 3) return fail("mrope: mrope_section must have 3 entries");
  const int64_t hs = atrex_param_int(launch, "head_size", 0);
  const int64_t rot = atrex_param_int(launch, "rotary_dim", hs);
  const int64_t tokens = q->shape[0];
  if (hs <= 0 || rot <= 0 || rot % 2 != 0 || rot > hs || q->shape[1] % hs != 0 ||
      k->shape[1] % hs != 0 || k->shape[0] != tokens || c->shape[0] != 3 || c->shape[1] != tokens ||
      c->shape[2] != rot / 2)
    return fail("mrope: expected q [T, Hq * hs], k [T, Hkv * hs], cos/sin [3, T, rotary_dim / 2]");
  if (q->shape[1] / hs + k->shape[1] / hs > 0x7fffffff || hs > 0x7fffffff || tokens > 0x7fffffff ||
      rot > 12288)
    return fail("mrope: too large for this template (rotary_dim <= 12288)");
  Args a{static_cast<const uint16_t*>(q->data), static_cast<const uint16_t*>(k->data),
         static_cast<const float*>(c->data), static_cast<const float*>(sn->data),
         static_cast<uint16_t*>(qo->data), static_cast<uint16_t*>(ko->data), tokens,
         static_cast<int>(q->shape[1] / hs), static_cast<int>(k->shape[1] / hs),
         static_cast<int>(hs), static_cast<int>(rot),
         atrex_param_int(launch, "is_neox_style", 1) != 0,
         Sections{static_cast<int>(section->int_list[0]), static_cast<int>(section->int_list[1]),
                  static_cast<int>(section->int_list[2]),
                  atrex_param_int(launch, "mrope_interleaved", 0) != 0}};
  if (tokens == 0 || a.hq + a.hkv == 0) return 0;
  // Packs must divide hs, rot and rot / 2 (NeoX halves) with aligned bases.
  int v = VEC;
  while (v > 1 && !(hs % v == 0 && (rot / 2) % v == 0 && aligned(a.q, 2 * v) && aligned(a.k, 2 * v) &&
                    aligned(a.qo, 2 * v) && aligned(a.ko, 2 * v)))
    v /= 2;
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  if (VEC >= 8 && v == 8)
    launch_v<(VEC >= 8 ? 8 : 2)>(a, s);
  else if (VEC >= 4 && v == 4)
    launch_v<(VEC >= 4 ? 4 : 2)>(a, s);
  else if (v == 2)
    launch_v<2>(a, s);
  else
    launch_v<1>(a, s);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail(cudaGetErrorString(err));
}
