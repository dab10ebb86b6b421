// atrex-template: staged
// atrex-description: q_weight and k_weight decoded to fp32 once per call; per (token, head) unit one fp16 decode pass into an fp32 staging row that also sums the squares over ACC independent accumulators, then a scale pass over fp32 only (fp16(w * fp16(x * r))); v heads memcpy'd; units split over up to THREADS std::threads (1: serial; more from 64 thousand elements per thread)
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: ACC = 8 | 4, 8
#ifndef THREADS
#define THREADS 2
#endif
#ifndef ACC
#define ACC 8
#endif
#define MIN_KELEMS 64

#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

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
  const float* qw;  // the weights decoded to fp32 once per call
  const float* kw;
  uint16_t* out;
  int64_t hq, hkv, d;
  float eps;
};

// Units [begin, end) of the flattened [T, Hq + 2 Hkv] heads. A q/k head is decoded from fp16
// once, into an fp32 staging row, in the same vectorised pass that sums its squares over ACC
// independent accumulators; the scale pass then reads only fp32 (the staged row and the
// call's decoded weight) and rounds twice as the reference does: fp16(w * fp16(x * r)).
void units(const Args& a, int64_t begin, int64_t end) {
  const int64_t slots = a.hq + 2 * a.hkv, d = a.d;
  std::vector<float> stage(static_cast<size_t>(d));
  float* xs = stage.data();
  for (int64_t u = begin; u < end; ++u) {
    const int64_t slot = u % slots;
    const uint16_t* xr = a.x + u * d;
    uint16_t* orow = a.out + u * d;
    if (slot >= a.hq + a.hkv) {
      std::memcpy(orow, xr, static_cast<size_t>(d) * 2);
      continue;
    }
    float acc[ACC] = {};
    int64_t j = 0;
    for (; j + ACC <= d; j += ACC)
      for (int e = 0; e < ACC; ++e) {
        const float v = h2f(xr[j + e]);
        xs[j + e] = v;
        acc[e] += v * v;
      }
    float ss = 0.f;
    for (int e = 0; e < ACC; ++e) ss += acc[e];
    for (; j < d; ++j) {
      xs[j] = h2f(xr[j]);
      ss += xs[j] * xs[j];
    }
    const float r = 1.0f / std::sqrt(ss / static_cast<float>(d) + a.eps);
    const float* w = slot < a.hq ? a.qw : a.kw;
    for (j = 0; j < d; ++j) orow[j] = f2h(w[j] * h2f(f2h(xs[j] * r)));
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
  const auto* qwp = static_cast<const uint16_t*>(qw->data);
  const auto* kwp = static_cast<const uint16_t*>(kw->data);
  Args a{static_cast<const uint16_t*>(x->data), nullptr, nullptr, static_cast<uint16_t*>(o->data),
               atrex_param_int(launch, "head_num", 0), atrex_param_int(launch, "kv_head_num", 0),
               qw->shape[0], static_cast<float>(atrex_param_float(launch, "eps", 1e-6))};
  const int64_t slots = a.hq + 2 * a.hkv;
  if (a.hq < 0 || a.hkv < 0 || a.d <= 0 || slots * a.d != x->shape[1])
    return fail("fused_qk_rmsnorm: hidden_states width must be (head_num + 2 kv_head_num) * size_per_head");
  std::vector<float> wf(static_cast<size_t>(2 * a.d));
  for (int64_t j = 0; j < a.d; ++j) {
    wf[static_cast<size_t>(j)] = h2f(qwp[j]);
    wf[static_cast<size_t>(a.d + j)] = h2f(kwp[j]);
  }
  a.qw = wf.data();
  a.kw = wf.data() + a.d;
  parallel_rows(x->shape[0] * slots, a.d, THREADS, int64_t{MIN_KELEMS} * 1024,
                [&](int64_t begin, int64_t end) { units(a, begin, end); });
  return 0;
}
