// atrex-template: head_loop
// atrex-description: loop over (token, head) units, split into contiguous chunks over up to THREADS std::threads (1: serial; more only when the work reaches MIN_KELEMS thousand elements per thread); per unit a sum of squares over UNROLL independent fp32 accumulators, then fp16(w * fp16(x * r)) per lane (_Float16 conversions); v heads memcpy'd
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: MIN_KELEMS = 64 | 16, 64
#ifndef THREADS
#define THREADS 2
#endif
#ifndef MIN_KELEMS
#define MIN_KELEMS 64
#endif
#define UNROLL 8

#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>

#include "atrex/candidate_util.h"

namespace {

using atrex::cand::fail;
using atrex::cand::kF16;
using atrex::cand::parallel_rows;

inline float h2f(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}
inline uint16_t f2h(float f) {
  const _Float16 v = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}

struct Args {
  const uint16_t* x;
  const uint16_t* qw;
  const uint16_t* kw;
  uint16_t* out;
  int64_t hq, hkv, d;
  float eps;
};

// Units [begin, end) of the flattened [T, Hq + 2 Hkv] heads.
void units(const Args& a, int64_t begin, int64_t end) {
  const int64_t slots = a.hq + 2 * a.hkv, d = a.d;
  for (int64_t u = begin; u < end; ++u) {
    const int64_t slot = u % slots;
    const uint16_t* xr = a.x + u * d;
    uint16_t* orow = a.out + u * d;
    if (slot >= a.hq + a.hkv) {
      std::memcpy(orow, xr, static_cast<size_t>(d) * 2);
      continue;
    }
    float acc[UNROLL] = {};
    int64_t j = 0;
    for (; j + UNROLL <= d; j += UNROLL)
      for (int e = 0; e < UNROLL; ++e) {
        const float v = h2f(xr[j + e]);
        acc[e] += v * v;
      }
    float ss = 0.f;
    for (int e = 0; e < UNROLL; ++e) ss += acc[e];
    for (; j < d; ++j) ss += h2f(xr[j]) * h2f(xr[j]);
    const float r = 1.0f / std::sqrt(ss / static_cast<float>(d) + a.eps);
    const uint16_t* w = slot < a.hq ? a.qw : a.kw;
    for (j = 0; j < d; ++j) orow[j] = f2h(h2f(w[j]) * h2f(f2h(h2f(xr[j]) * r)));
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// hidden_states [T, (Hq + 2 Hkv) d], q_weight, k_weight [d] (fp16) -> out like hidden_states.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "fused_qk_rmsnorm");
  const DLTensor* x = ts.input("hidden_states", kF16, 2);
  const DLTensor* qw = ts.input("q_weight", kF16, 1);
  const DLTensor* kw = ts.input("k_weight", kF16, 1);
  const DLTensor* o = ts.output("out", kF16, 2);
  ts.same_dims(x, o);
  ts.same_dims(qw, kw);
  if (!ts.ok()) return ts.failed();
  const Args a{static_cast<const uint16_t*>(x->data), static_cast<const uint16_t*>(qw->data),
               static_cast<const uint16_t*>(kw->data), static_cast<uint16_t*>(o->data),
               atrex_param_int(launch, "head_num", 0), atrex_param_int(launch, "kv_head_num", 0),
               qw->shape[0], static_cast<float>(atrex_param_float(launch, "eps", 1e-6))};
  const int64_t slots = a.hq + 2 * a.hkv;
  if (a.hq < 0 || a.hkv < 0 || a.d <= 0 || slots * a.d != x->shape[1])
    return fail("fused_qk_rmsnorm: hidden_states width must be (head_num + 2 kv_head_num) * size_per_head");
  parallel_rows(x->shape[0] * slots, a.d, THREADS, int64_t{MIN_KELEMS} * 1024,
                [&](int64_t begin, int64_t end) { units(a, begin, end); });
  return 0;
}
