// atrex-template: head_split
// atrex-description: work split by head, not by token: the flat list of (token, q/k head) units plus one v-block unit per token is cut into contiguous chunks over up to THREADS std::threads (1: serial; more once the chunk reaches MIN_KELEMS thousand elements), so a single decode token's heads spread over the cores; inverse frequencies computed once per call; each chunk refills its cos/sin table only when its token changes, with a vectorisable fp64 range reduction and polynomials instead of libm cos/sin
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: MIN_KELEMS = 64 | 4, 64
#ifndef THREADS
#define THREADS 2
#endif
#ifndef MIN_KELEMS
#define MIN_KELEMS 64
#endif

#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "atrex/candidate_util.h"

namespace {

using atrex::cand::fail;
using atrex::cand::is;
using atrex::cand::kBF16;
using atrex::cand::kF16;
using atrex::cand::kI32;
using atrex::cand::bf16_to_float;
using atrex::cand::float_to_bf16;
using atrex::cand::parallel_rows;

template <bool F16>
inline float to_f(uint16_t h) {
  if constexpr (F16) {
    _Float16 v;
    std::memcpy(&v, &h, 2);
    return static_cast<float>(v);
  } else {
    return bf16_to_float(h);
  }
}
template <bool F16>
inline uint16_t from_f(float f) {
  if constexpr (F16) {
    const _Float16 v = static_cast<_Float16>(f);
    uint16_t h;
    std::memcpy(&h, &v, 2);
    return h;
  } else {
    return float_to_bf16(f);
  }
}

struct Shape {
  int64_t hq, hkv, dim, rope;
  float base;
};

// cos and sin of fp32 angles a[0..n) without libm calls, so the loop vectorises: the quadrant
// q = round(a * 2/pi) and the remainder r = a - q pi/2 in fp64 (exact enough for |a| < 2^40),
// Taylor polynomials on |r| <= pi/4 (errors below 2e-10), then a branch-free quadrant swap.
inline void sincos_table(const float* a, int64_t n, float* cs, float* sn) {
  for (int64_t i = 0; i < n; ++i) {
    const double x = a[i];
    const double q = __builtin_nearbyint(x * 0.63661977236758134308);
    const double r = x - q * 1.57079632679489661923;
    const double r2 = r * r;
    const double s =
        r * (1.0 + r2 * (-1.0 / 6 + r2 * (1.0 / 120 + r2 * (-1.0 / 5040 + r2 * (1.0 / 362880)))));
    const double c =
        1.0 + r2 * (-0.5 + r2 * (1.0 / 24 + r2 * (-1.0 / 720 + r2 * (1.0 / 40320 +
                                                                     r2 * (-1.0 / 3628800)))));
    const int64_t k = static_cast<int64_t>(q) & 3;
    const double sv = (k & 1) ? c : s, cv = (k & 1) ? s : c;
    sn[i] = static_cast<float>((k & 2) ? -sv : sv);
    cs[i] = static_cast<float>(((k + 1) & 2) ? -cv : cv);
  }
}

template <bool F16>
void rotate_head(const uint16_t* src, uint16_t* dst, const Shape& s, const float* cs,
                 const float* sn) {
  const int64_t half = s.rope / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float a = to_f<F16>(src[i]), b = to_f<F16>(src[i + half]);
    dst[i] = from_f<F16>(a * cs[i] - b * sn[i]);
    dst[i + half] = from_f<F16>(b * cs[i] + a * sn[i]);
  }
  std::memcpy(dst + s.rope, src + s.rope, static_cast<size_t>(s.dim - s.rope) * 2);
}

// Units [begin, end) of the flat list t * units_per_token + u, u < Hq + Hkv a q or k head and
// u == Hq + Hkv the token's whole v block. inv[i] = 1 / base^(2i / rope) (fp32, as the reference
// forms it) comes from the caller, computed once per call; the cos/sin table is refilled only
// when the token changes, so a chunk that starts mid-token pays one extra table.
template <bool F16>
void units(const uint16_t* x, const int32_t* pos, uint16_t* q, uint16_t* k, uint16_t* v,
           const Shape& s, const float* inv, int64_t begin, int64_t end) {
  const int64_t heads = s.hq + 2 * s.hkv, half = s.rope / 2, per = s.hq + s.hkv + 1;
  std::vector<float> table(static_cast<size_t>(3 * half));
  float* cs = table.data();
  float* sn = cs + half;
  float* ang = sn + half;
  int64_t have = -1;
  for (int64_t w = begin; w < end; ++w) {
    const int64_t t = w / per, u = w % per;
    const uint16_t* row = x + t * heads * s.dim;
    if (u == s.hq + s.hkv) {
      std::memcpy(v + t * s.hkv * s.dim, row + u * s.dim, static_cast<size_t>(s.hkv * s.dim) * 2);
      continue;
    }
    if (have != t) {
      const float p = static_cast<float>(pos[t]);
      for (int64_t i = 0; i < half; ++i) ang[i] = p * inv[i];  // fp32, as the reference rounds it
      sincos_table(ang, half, cs, sn);
      have = t;
    }
    uint16_t* dst = u < s.hq ? q + (t * s.hq + u) * s.dim : k + (t * s.hkv + u - s.hq) * s.dim;
    rotate_head<F16>(row + u * s.dim, dst, s, cs, sn);
  }
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
  Shape s{atrex_param_int(launch, "num_heads", 0), atrex_param_int(launch, "num_kv_heads", 0),
          atrex_param_int(launch, "head_dim", 0), 0,
          static_cast<float>(atrex_param_float(launch, "rope_base", 10000.0))};
  s.rope = atrex_param_int(launch, "rope_dim", s.dim);
  const int64_t t = x->shape[0];
  if (s.hq < 0 || s.hkv < 0 || s.dim <= 0 || s.rope <= 0 || s.rope % 2 != 0 || s.rope > s.dim ||
      x->shape[1] != (s.hq + 2 * s.hkv) * s.dim || atrex_numel(p) != t)
    return fail("fused_qkv_rope: qkv width must be (num_heads + 2 num_kv_heads) head_dim, rope_dim even and <= head_dim");
  for (const DLTensor* o : {oq, ok, ov}) {
    if (o->dtype.code != x->dtype.code || o->dtype.bits != 16)
      return fail("fused_qkv_rope: q, k and v must have qkv's dtype");
  }
  if (atrex_numel(oq) != t * s.hq * s.dim || atrex_numel(ok) != t * s.hkv * s.dim ||
      atrex_numel(ov) != t * s.hkv * s.dim)
    return fail("fused_qkv_rope: output sizes do not match [T, H, D]");
  const auto* xp = static_cast<const uint16_t*>(x->data);
  const auto* pp = static_cast<const int32_t*>(p->data);
  auto* qp = static_cast<uint16_t*>(oq->data);
  auto* kp = static_cast<uint16_t*>(ok->data);
  auto* vp = static_cast<uint16_t*>(ov->data);
  const int64_t half = s.rope / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv[i] = 1.0f / std::pow(s.base, static_cast<float>(2 * i) / static_cast<float>(s.rope));
  // A unit is one head of D elements (the v unit moves Hkv D, weighted as one head here).
  const int64_t per = s.hq + s.hkv + 1;
  parallel_rows(t * per, s.dim, THREADS, int64_t{MIN_KELEMS} * 1024, [&](int64_t b, int64_t e) {
    if (f16)
      units<true>(xp, pp, qp, kp, vp, s, inv.data(), b, e);
    else
      units<false>(xp, pp, qp, kp, vp, s, inv.data(), b, e);
  });
  return 0;
}
