// atrex-template: row_loop
// atrex-description: row loop, rows split into contiguous chunks over up to THREADS std::threads (1: serial; more only when the work is large enough; MIN_KELEMS 64 Ki elements per thread, not listed: every CI corner here runs shapes of 17M elements); per row the activation of z and the gated input computed once per element into a row buffer, the sum of squares over UNROLL independent accumulators, then one scale-and-round pass
// atrex-param: THREADS = 2 | 1, 2
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
#include <vector>

#include "atrex/candidate_util.h"

namespace {

using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::bf16_to_float;
using atrex::cand::float_to_bf16;
using atrex::cand::parallel_rows;

struct Args {
  const uint16_t* x;
  const uint16_t* w;
  const uint16_t* z;
  uint16_t* out;
  int64_t hidden;
  float eps;
  bool norm_before_gate, sigmoid;
};

// Rows [begin, end).
void rows(const Args& a, int64_t begin, int64_t end) {
  std::vector<float> in(static_cast<size_t>(a.hidden)), gate(static_cast<size_t>(a.hidden));
  for (int64_t r = begin; r < end; ++r) {
    const int64_t base = r * a.hidden;
    for (int64_t h = 0; h < a.hidden; ++h) {
      const float v = bf16_to_float(a.z[base + h]);
      const float e = std::exp(-v);
      const float act = a.sigmoid ? 1.0f / (1.0f + e) : v / (1.0f + e);
      const float xv = bf16_to_float(a.x[base + h]);
      in[static_cast<size_t>(h)] = a.norm_before_gate ? xv : xv * act;
      gate[static_cast<size_t>(h)] = act;
    }
    float acc[UNROLL] = {};
    int64_t h = 0;
    for (; h + UNROLL <= a.hidden; h += UNROLL)
      for (int u = 0; u < UNROLL; ++u) acc[u] += in[static_cast<size_t>(h + u)] * in[static_cast<size_t>(h + u)];
    float ss = 0.f;
    for (int u = 0; u < UNROLL; ++u) ss += acc[u];
    for (; h < a.hidden; ++h) ss += in[static_cast<size_t>(h)] * in[static_cast<size_t>(h)];
    const float rstd = 1.0f / std::sqrt(ss / static_cast<float>(a.hidden) + a.eps);
    for (h = 0; h < a.hidden; ++h) {
      float o = (in[static_cast<size_t>(h)] * rstd) * bf16_to_float(a.w[h]);
      if (a.norm_before_gate) o *= gate[static_cast<size_t>(h)];
      a.out[base + h] = float_to_bf16(o);
    }
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// x, z [rows, H], weight [H] (bf16) -> out [rows, H] bf16.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "gated_rms_norm");
  const DLTensor* x = ts.input("x", kBF16, 2);
  const DLTensor* w = ts.input("weight", kBF16, 1);
  const DLTensor* z = ts.input("z", kBF16, 2);
  const DLTensor* o = ts.output("out", kBF16, 2);
  ts.same_dims(x, z);
  ts.same_dims(x, o);
  if (!ts.ok()) return ts.failed();
  if (w->shape[0] != x->shape[1]) return fail("gated_rms_norm: weight must be [hidden_size]");
  const AtrexParam* ap = atrex_param(launch, "activation");
  const char* act_name = ap && ap->string_value ? ap->string_value : "silu";
  const bool sigmoid = std::strcmp(act_name, "sigmoid") == 0;
  if (!sigmoid && std::strcmp(act_name, "silu") != 0 && std::strcmp(act_name, "swish") != 0)
    return fail("gated_rms_norm: activation \"%s\" is not silu, swish or sigmoid", act_name);
  const Args a{static_cast<const uint16_t*>(x->data), static_cast<const uint16_t*>(w->data),
               static_cast<const uint16_t*>(z->data), static_cast<uint16_t*>(o->data), x->shape[1],
               static_cast<float>(atrex_param_float(launch, "eps", 1e-6)),
               atrex_param_int(launch, "norm_before_gate", 1) != 0, sigmoid};
  parallel_rows(x->shape[0], a.hidden, THREADS, int64_t{MIN_KELEMS} * 1024,
                [&](int64_t begin, int64_t end) { rows(a, begin, end); });
  return 0;
}
