// atrex-template: gate_table
// atrex-description: table-driven activation: bf16(silu(g)) depends only on the gate's 16 bits, so a 65536-entry fp32 table of it (built once per process with the reference's expf, 256 KiB) replaces the exp; each output is one gather and one multiply by up, in a single vectorisable pass; rows split into contiguous chunks over up to THREADS std::threads (1: serial; more from MIN_KELEMS thousand elements per thread)
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
using atrex::cand::bf16_to_float;
using atrex::cand::float_to_bf16;
using atrex::cand::parallel_rows;

// act[bits] = bf16(g / (1 + expf(-g))) as fp32 for the bf16 gate g with those bits, exactly as
// the reference rounds the activation tensor (NaN gates give NaN, +-inf give inf and -0 / NaN
// as expf does).
const float* gate_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t b = 0; b < 65536; ++b) {
      const float g = bf16_to_float(static_cast<uint16_t>(b));
      t[b] = bf16_to_float(float_to_bf16(g / (1.0f + std::exp(-g))));
    }
    return t;
  }();
  return table.data();
}

void row(const uint16_t* __restrict x, uint16_t* __restrict out, const float* __restrict act,
         int64_t d) {
  for (int64_t j = 0; j < d; ++j) out[j] = float_to_bf16(act[x[j]] * bf16_to_float(x[d + j]));
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* o = atrex_output(launch, "out");
  if (!x || !o) return fail("silu_and_mul: missing tensor x or out");
  if (x->ndim < 1 || !is(x, kBF16) || !is(o, kBF16))
    return fail("silu_and_mul: expected bf16 x[N, 2d] and out[N, d]");
  const int64_t cols = x->shape[x->ndim - 1], d = cols / 2;
  const int64_t rows = cols > 0 ? atrex_numel(x) / cols : 0;
  if (atrex_numel(o) != rows * d) return fail("silu_and_mul: out must hold N * d elements");
  const auto* xp = static_cast<const uint16_t*>(x->data);
  auto* op = static_cast<uint16_t*>(o->data);
  const float* act = gate_table();
  parallel_rows(rows, d, THREADS, int64_t{MIN_KELEMS} * 1024, [=](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) row(xp + r * cols, op + r * d, act, d);
  });
  return 0;
}
