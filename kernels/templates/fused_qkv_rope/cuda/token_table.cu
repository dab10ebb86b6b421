// atrex-template: token_table
// atrex-description: one block per (token, HEADS_PER_BLOCK heads); the token's cos/sin table (rope_dim/2 entries) is computed once into shared memory, then the block's threads stride flat over the heads' VEC-wide packs (a rotated pack and its NeoX partner together; copies for v and the tail lanes)
// atrex-param: HEADS_PER_BLOCK = 8 | 2, 4, 8
// atrex-param: BLOCK_THREADS = 256 | 64, 128, 256
// atrex-param: VEC = 8 | 2, 4, 8
#ifndef HEADS_PER_BLOCK
#define HEADS_PER_BLOCK 8
#endif
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 256
#endif
#ifndef VEC
#define VEC 8
#endif

#include <cmath>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(HEADS_PER_BLOCK >= 1, "HEADS_PER_BLOCK");
static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS <= 1024, "BLOCK_THREADS");
static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "VEC");

namespace {

using atrex::cand::fail;
using atrex::cand::is;
using atrex::cand::kBF16;
using atrex::cand::kF16;
using atrex::cand::kI32;
using atrex::cand::aligned;

// V consecutive 16-bit values (bf16 or fp16 bits), aligned like the word that moves them.
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
// F16: the bits are fp16, else bf16.
template <bool F16>
__device__ __forceinline__ float to_f(uint16_t h) {
  if constexpr (F16)
    return __half2float(__ushort_as_half(h));
  else
    return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
template <bool F16>
__device__ __forceinline__ uint16_t from_f(float f) {
  if constexpr (F16)
    return __half_as_ushort(__float2half_rn(f));
  else
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

// Block (t, c): heads [c * HEADS_PER_BLOCK, ...) of token t. Dynamic shared memory holds
// cos[rope / 2] then sin[rope / 2] of the token's angles. dim, rope and rope / 2 are multiples of V;
// every pointer is 2V-byte aligned (checked by the host).
template <bool F16, int V>
__global__ void __launch_bounds__(BLOCK_THREADS)
    qkv_rope_kernel(const uint16_t* __restrict__ qkv, const int32_t* __restrict__ positions,
                    uint16_t* __restrict__ q, uint16_t* __restrict__ k, uint16_t* __restrict__ v,
                    int hq, int hkv, int dim, int rope, float base) {
  extern __shared__ float trig[];
  const int half = rope / 2;
  const int64_t t = blockIdx.x;
  const int heads = hq + 2 * hkv;
  const int h0 = static_cast<int>(blockIdx.y) * HEADS_PER_BLOCK;
  const int nh = min(HEADS_PER_BLOCK, heads - h0);
  // Only blocks holding a q or k head need the table.
  if (h0 < hq + hkv) {
    const float pos = static_cast<float>(__ldg(positions + t));
    for (int i = threadIdx.x; i < half; i += BLOCK_THREADS) {
      const float inv = 1.0f / powf(base, static_cast<float>(2 * i) / static_cast<float>(rope));
      sincosf(pos * inv, &trig[half + i], &trig[i]);
    }
    __syncthreads();
  }
  const int packs = dim / V;
  for (int u = threadIdx.x; u < nh * packs; u += BLOCK_THREADS) {
    const int hl = u / packs;
    const int d = (u - hl * packs) * V;
    const int h = h0 + hl;
    const uint16_t* src = qkv + (t * heads + h) * dim;
    uint16_t* dst;
    bool rotated = true;
    if (h < hq) {
      dst = q + (t * hq + h) * dim;
    } else if (h < hq + hkv) {
      dst = k + (t * hkv + (h - hq)) * dim;
    } else {
      dst = v + (t * hkv + (h - hq - hkv)) * dim;
      rotated = false;
    }
    if (!rotated || d >= rope) {
      store<V>(dst + d, load<V>(src + d));
    } else if (d < half) {
      const Pack<V> lo = load<V>(src + d), hi = load<V>(src + d + half);
      Pack<V> olo, ohi;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float c = trig[d + e], s = trig[half + d + e];
        const float a = to_f<F16>(lo.h[e]), b = to_f<F16>(hi.h[e]);
        olo.h[e] = from_f<F16>(a * c - b * s);
        ohi.h[e] = from_f<F16>(b * c + a * s);
      }
      store<V>(dst + d, olo);
      store<V>(dst + d + half, ohi);
    }
    // d in [half, rope): written with its partner d - half.
  }
}

template <bool F16, int V>
void launch_v(const uint16_t* qkv, const int32_t* pos, uint16_t* q, uint16_t* k, uint16_t* v,
              int64_t tokens, int hq, int hkv, int dim, int rope, float base_f, cudaStream_t s) {
  const int heads = hq + 2 * hkv;
  const dim3 grid(static_cast<unsigned>(tokens),
                  static_cast<unsigned>((heads + HEADS_PER_BLOCK - 1) / HEADS_PER_BLOCK));
  const size_t smem = sizeof(float) * static_cast<size_t>(rope);
  qkv_rope_kernel<F16, V><<<grid, BLOCK_THREADS, smem, s>>>(qkv, pos, q, k, v, hq, hkv, dim, rope,
                                                            base_f);
}

template <bool F16>
void launch_dtype(int vec, const uint16_t* qkv, const int32_t* pos, uint16_t* q, uint16_t* k,
                  uint16_t* v, int64_t tokens, int hq, int hkv, int dim, int rope, float base_f,
                  cudaStream_t s) {
  if (VEC >= 8 && vec == 8)
    launch_v<F16, (VEC >= 8 ? 8 : 1)>(qkv, pos, q, k, v, tokens, hq, hkv, dim, rope, base_f, s);
  else if (VEC >= 4 && vec == 4)
    launch_v<F16, (VEC >= 4 ? 4 : 1)>(qkv, pos, q, k, v, tokens, hq, hkv, dim, rope, base_f, s);
  else if (vec == 2)
    launch_v<F16, 2>(qkv, pos, q, k, v, tokens, hq, hkv, dim, rope, base_f, s);
  else
    launch_v<F16, 1>(qkv, pos, q, k, v, tokens, hq, hkv, dim, rope, base_f, s);
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// qkv [T, (Hq + 2 Hkv) D], positions [T] int32 -> q [T, Hq, D], k, v [T, Hkv, D]; bf16 or fp16.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "qkv");
  const DLTensor* p = atrex_input(launch, "positions");
  const DLTensor* oq = atrex_output(launch, "q");
  const DLTensor* ok = atrex_output(launch, "k");
  const DLTensor* ov = atrex_output(launch, "v");
  if (!x || !p || !oq || !ok || !ov) return fail("fused_qkv_rope: missing qkv, positions, q, k or v");
  const bool f16 = is(x, kF16);
  if (!(f16 || is(x, kBF16)) || x->ndim != 2 || !is(p, kI32))
    return fail("fused_qkv_rope: expected bf16/fp16 qkv[T, (Hq + 2 Hkv) D] and int32 positions[T]");
  const int64_t tokens = x->shape[0];
  const int64_t hq = atrex_param_int(launch, "num_heads", 0);
  const int64_t hkv = atrex_param_int(launch, "num_kv_heads", 0);
  const int64_t dim = atrex_param_int(launch, "head_dim", 0);
  const int64_t rope = atrex_param_int(launch, "rope_dim", dim);
  const double base = atrex_param_float(launch, "rope_base", 10000.0);
  if (hq < 0 || hkv < 0 || dim <= 0 || rope <= 0 || rope % 2 != 0 || rope > dim ||
      x->shape[1] != (hq + 2 * hkv) * dim || atrex_numel(p) != tokens)
    return fail("fused_qkv_rope: qkv width must be (num_heads + 2 num_kv_heads) head_dim, rope_dim even and <= head_dim");
  for (const DLTensor* o : {oq, ok, ov}) {
    if (o->dtype.code != x->dtype.code || o->dtype.bits != 16)
      return fail("fused_qkv_rope: q, k and v must have qkv's dtype");
  }
  if (atrex_numel(oq) != tokens * hq * dim || atrex_numel(ok) != tokens * hkv * dim ||
      atrex_numel(ov) != tokens * hkv * dim)
    return fail("fused_qkv_rope: output sizes do not match [T, H, D]");
  if (dim > 0x7fffffff || hq + 2 * hkv > 0x7fffffff || tokens > 0x7fffffff ||
      (hq + 2 * hkv) / HEADS_PER_BLOCK >= 65535 || rope > 12288)
    return fail("fused_qkv_rope: too large for this template (rope_dim <= 12288, < 65535 head blocks)");
  if (tokens == 0 || hq + 2 * hkv == 0) return 0;
  const auto* xp = static_cast<const uint16_t*>(x->data);
  auto* qp = static_cast<uint16_t*>(oq->data);
  auto* kp = static_cast<uint16_t*>(ok->data);
  auto* vp = static_cast<uint16_t*>(ov->data);
  // Widest pack dividing D, rope_dim and rope_dim / 2 with every base aligned.
  int vec = VEC;
  while (vec > 1 && !(dim % vec == 0 && (rope / 2) % vec == 0 && aligned(xp, 2 * vec) &&
                      aligned(qp, 2 * vec) && aligned(kp, 2 * vec) && aligned(vp, 2 * vec)))
    vec /= 2;
  const float base_f = static_cast<float>(base);
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  const auto* pp = static_cast<const int32_t*>(p->data);
  if (f16)
    launch_dtype<true>(vec, xp, pp, qp, kp, vp, tokens, static_cast<int>(hq), static_cast<int>(hkv),
                       static_cast<int>(dim), static_cast<int>(rope), base_f, s);
  else
    launch_dtype<false>(vec, xp, pp, qp, kp, vp, tokens, static_cast<int>(hq), static_cast<int>(hkv),
                        static_cast<int>(dim), static_cast<int>(rope), base_f, s);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail(cudaGetErrorString(err));
}
