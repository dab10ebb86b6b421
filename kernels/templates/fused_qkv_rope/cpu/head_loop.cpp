// atrex-template: head_loop
// atrex-description: loop over tokens, then their heads; tokens split into contiguous chunks over up to THREADS std::threads (1: serial; more only when the work reaches MIN_KELEMS thousand elements per thread); the token's cos/sin table (rope_dim/2 entries) is built once and shared by its q and k heads, each rotation a branch-free loop over the two halves; v and the tail lanes memcpy'd
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: MIN_KELEMS = 64 | 16, 64
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

// cos[i], sin[i] of position * 1 / base^(2i / rope), fp32 as the reference forms them.
void fill_table(float pos, const Shape& s, float* cs, float* sn) {
  const int64_t half = s.rope / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float inv =
        1.0f / std::pow(s.base, static_cast<float>(2 * i) / static_cast<float>(s.rope));
    cs[i] = std::cos(pos * inv);
    sn[i] = std::sin(pos * inv);
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

// Tokens [begin, end).
template <bool F16>
void tokens(const uint16_t* x, const int32_t* pos, uint16_t* q, uint16_t* k, uint16_t* v,
            const Shape& s, int64_t begin, int64_t end) {
  const int64_t heads = s.hq + 2 * s.hkv, half = s.rope / 2;
  std::vector<float> table(static_cast<size_t>(2 * half));
  float* cs = table.data();
  float* sn = cs + half;
  for (int64_t t = begin; t < end; ++t) {
    const uint16_t* row = x + t * heads * s.dim;
    fill_table(static_cast<float>(pos[t]), s, cs, sn);
    for (int64_t h = 0; h < s.hq + s.hkv; ++h) {
      uint16_t* dst = h < s.hq ? q + (t * s.hq + h) * s.dim : k + (t * s.hkv + h - s.hq) * s.dim;
      rotate_head<F16>(row + h * s.dim, dst, s, cs, sn);
    }
    std::memcpy(v + t * s.hkv * s.dim, row + (s.hq + s.hkv) * s.dim,
                static_cast<size_t>(s.hkv * s.dim) * 2);
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
  const int64_t row = (s.hq + 2 * s.hkv) * s.dim;
  parallel_rows(t, row, THREADS, int64_t{MIN_KELEMS} * 1024, [&](int64_t b, int64_t e) {
    if (f16)
      tokens<true>(xp, pp, qp, kp, vp, s, b, e);
    else
      tokens<false>(xp, pp, qp, kp, vp, s, b, e);
  });
  return 0;
}
