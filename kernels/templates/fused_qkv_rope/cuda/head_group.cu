// atrex-template: head_group
// atrex-description: ROW_THREADS lanes per (token, head), several heads per block; each lane rotates VEC-wide NeoX pairs (lane packs at f and f + rope_dim/2, 2*VEC-byte loads) with the frequencies computed in registers; v heads and lanes past rope_dim are copied pack by pack
// atrex-param: ROW_THREADS = 16 | 4, 8, 16
// atrex-param: BLOCK_THREADS = 128 | 64, 128
// atrex-param: VEC = 8 | 2, 4, 8
#ifndef ROW_THREADS
#define ROW_THREADS 16
#endif
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 128
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

static_assert(ROW_THREADS >= 1 && ROW_THREADS <= 32 && (ROW_THREADS & (ROW_THREADS - 1)) == 0,
              "ROW_THREADS");
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

// Rotates the packs at src + f and src + f + half (NeoX pairs f, f + half) into dst.
template <bool F16, int V>
__device__ __forceinline__ void rotate(const uint16_t* src, uint16_t* dst, int f, int half,
                                       float pos, int rope, float base) {
  const Pack<V> lo = load<V>(src + f), hi = load<V>(src + f + half);
  Pack<V> olo, ohi;
#pragma unroll
  for (int e = 0; e < V; ++e) {
    // 1 / base^(2i / rope) as the reference forms it (pow, then reciprocal), fp32.
    const float inv = 1.0f / powf(base, static_cast<float>(2 * (f + e)) / static_cast<float>(rope));
    float s, c;
    sincosf(pos * inv, &s, &c);
    const float a = to_f<F16>(lo.h[e]), b = to_f<F16>(hi.h[e]);
    olo.h[e] = from_f<F16>(a * c - b * s);
    ohi.h[e] = from_f<F16>(b * c + a * s);
  }
  store<V>(dst + f, olo);
  store<V>(dst + f + half, ohi);
}

constexpr int kHeadsPerBlock = BLOCK_THREADS / ROW_THREADS;

// One ROW_THREADS group per (token, head) of the flattened [T, Hq + 2 Hkv] head list. dim, rope
// and rope / 2 are multiples of V; every pointer is 2V-byte aligned (checked by the host).
template <bool F16, int V>
__global__ void __launch_bounds__(BLOCK_THREADS)
    qkv_rope_kernel(const uint16_t* __restrict__ qkv, const int32_t* __restrict__ positions,
                    uint16_t* __restrict__ q, uint16_t* __restrict__ k, uint16_t* __restrict__ v,
                    int64_t units, int hq, int hkv, int dim, int rope, float base) {
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * kHeadsPerBlock + threadIdx.x / ROW_THREADS;
  if (unit >= units) return;
  const int lane = static_cast<int>(threadIdx.x) % ROW_THREADS;
  const int heads = hq + 2 * hkv;
  const int64_t t = unit / heads;
  const int h = static_cast<int>(unit - t * heads);
  const uint16_t* src = qkv + unit * dim;
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
  int copy_from = 0;
  if (rotated) {
    const float pos = static_cast<float>(__ldg(positions + t));
    const int half = rope / 2;
    for (int f = lane * V; f < half; f += ROW_THREADS * V)
      rotate<F16, V>(src, dst, f, half, pos, rope, base);
    copy_from = rope;
  }
  for (int d = copy_from + lane * V; d < dim; d += ROW_THREADS * V) store<V>(dst + d, load<V>(src + d));
}

template <bool F16, int V>
void launch_v(const uint16_t* qkv, const int32_t* pos, uint16_t* q, uint16_t* k, uint16_t* v,
              int64_t tokens, int hq, int hkv, int dim, int rope, float base_f, cudaStream_t s) {
  const int64_t units = tokens * (hq + 2 * hkv);
  const int64_t blocks = (units + kHeadsPerBlock - 1) / kHeadsPerBlock;
  qkv_rope_kernel<F16, V><<<static_cast<unsigned>(blocks), BLOCK_THREADS, 0, s>>>(
      qkv, pos, q, k, v, units, hq, hkv, dim, rope, base_f);
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
  if (dim > 0x7fffffff || hq + 2 * hkv > 0x7fffffff) return fail("fused_qkv_rope: too large");
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
