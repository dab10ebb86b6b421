// atrex-template: head_loop
// atrex-description: token loop, tokens split into contiguous chunks over up to THREADS std::threads (1: serial; more only when the work reaches MIN_KELEMS thousand elements per thread); per token its cos/sin of every frequency gathered once from its section's axis row into a small table, then every q and k head rotated with branch-free loops (NeoX halves or GPT-J pairs, unrolled PAIR_UNROLL times); lanes past rotary_dim memcpy'd
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: MIN_KELEMS = 64 | 16, 64
#ifndef THREADS
#define THREADS 2
#endif
#ifndef MIN_KELEMS
#define MIN_KELEMS 64
#endif
#define PAIR_UNROLL 4
#define ATREX_PRAGMA(x) _Pragma(#x)
#define ATREX_UNROLL(n) ATREX_PRAGMA(GCC unroll n)

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "atrex/candidate_util.h"

namespace {

using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::kF32;
using atrex::cand::bf16_to_float;
using atrex::cand::float_to_bf16;
using atrex::cand::parallel_rows;

struct Args {
  const uint16_t* q;
  const uint16_t* k;
  const float* cos;
  const float* sin;
  uint16_t* qo;
  uint16_t* ko;
  int64_t tokens, hq, hkv, hs, rot;
  bool neox;
  int64_t s[3];
  bool interleaved;
  int64_t axis(int64_t f) const {
    if (interleaved) {
      if (f % 3 == 1 && f <= 3 * s[1]) return 1;
      if (f % 3 == 2 && f <= 3 * s[2]) return 2;
      return 0;
    }
    return f < s[0] ? 0 : (f < s[0] + s[1] ? 1 : 2);
  }
};

void rotate_head(const Args& a, const uint16_t* x, uint16_t* y, const float* cs, const float* sn) {
  const int64_t half = a.rot / 2;
  if (a.neox) {
    ATREX_UNROLL(PAIR_UNROLL)
    for (int64_t f = 0; f < half; ++f) {
      const float x1 = bf16_to_float(x[f]), x2 = bf16_to_float(x[f + half]);
      y[f] = float_to_bf16(x1 * cs[f] - x2 * sn[f]);
      y[f + half] = float_to_bf16(x2 * cs[f] + x1 * sn[f]);
    }
  } else {
    ATREX_UNROLL(PAIR_UNROLL)
    for (int64_t f = 0; f < half; ++f) {
      const float x1 = bf16_to_float(x[2 * f]), x2 = bf16_to_float(x[2 * f + 1]);
      y[2 * f] = float_to_bf16(x1 * cs[f] - x2 * sn[f]);
      y[2 * f + 1] = float_to_bf16(x2 * cs[f] + x1 * sn[f]);
    }
  }
  std::memcpy(y + a.rot, x + a.rot, static_cast<size_t>(a.hs - a.rot) * 2);
}

// Tokens [begin, end).
void tokens(const Args& a, int64_t begin, int64_t end) {
  const int64_t half = a.rot / 2;
  std::vector<float> table(static_cast<size_t>(2 * half));
  std::vector<int64_t> axis(static_cast<size_t>(half));
  for (int64_t f = 0; f < half; ++f) axis[static_cast<size_t>(f)] = a.axis(f);
  float* cs = table.data();
  float* sn = cs + half;
  for (int64_t t = begin; t < end; ++t) {
    for (int64_t f = 0; f < half; ++f) {
      const int64_t at = (axis[static_cast<size_t>(f)] * a.tokens + t) * half + f;
      cs[f] = a.cos[at];
      sn[f] = a.sin[at];
    }
    for (int64_t h = 0; h < a.hq; ++h)
      rotate_head(a, a.q + (t * a.hq + h) * a.hs, a.qo + (t * a.hq + h) * a.hs, cs, sn);
    for (int64_t h = 0; h < a.hkv; ++h)
      rotate_head(a, a.k + (t * a.hkv + h) * a.hs, a.ko + (t * a.hkv + h) * a.hs, cs, sn);
  }
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
  const int64_t t = q->shape[0];
  if (hs <= 0 || rot <= 0 || rot % 2 != 0 || rot > hs || q->shape[1] % hs != 0 ||
      k->shape[1] % hs != 0 || k->shape[0] != t || c->shape[0] != 3 || c->shape[1] != t ||
      c->shape[2] != rot / 2)
    return fail("mrope: expected q [T, Hq * hs], k [T, Hkv * hs], cos/sin [3, T, rotary_dim / 2]");
  const Args a{static_cast<const uint16_t*>(q->data), static_cast<const uint16_t*>(k->data),
               static_cast<const float*>(c->data), static_cast<const float*>(sn->data),
               static_cast<uint16_t*>(qo->data), static_cast<uint16_t*>(ko->data), t,
               q->shape[1] / hs, k->shape[1] / hs, hs, rot,
               atrex_param_int(launch, "is_neox_style", 1) != 0,
               {section->int_list[0], section->int_list[1], section->int_list[2]},
               atrex_param_int(launch, "mrope_interleaved", 0) != 0};
  parallel_rows(t, (a.hq + a.hkv) * hs, THREADS, int64_t{MIN_KELEMS} * 1024,
                [&](int64_t begin, int64_t end) { tokens(a, begin, end); });
  return 0;
}
