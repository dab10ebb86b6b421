// atrex-template: col_block
// atrex-description: token loop, tokens split into contiguous chunks over up to THREADS std::threads (1: serial; more only when the work reaches MIN_KELEMS thousand elements per thread); per token and block of COL_BLOCK columns, float sums kept in L1 while the top_k rows stream past (vectorised inner loop)
// atrex-param: THREADS = 2 | 1, 2, 3, 4
// atrex-param: COL_BLOCK = 128 | 32, 128, 512
// atrex-param: MIN_KELEMS = 64 | 16, 64, 256, 1024
#ifndef THREADS
#define THREADS 2
#endif
#ifndef COL_BLOCK
#define COL_BLOCK 128
#endif
#ifndef MIN_KELEMS
#define MIN_KELEMS 64
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>

#include "atrex/candidate_util.h"

static_assert(THREADS >= 1 && THREADS <= 4, "THREADS");

namespace {

using atrex::cand::fail;
using atrex::cand::is;
using atrex::cand::kBF16;
using atrex::cand::bf16_to_float;
using atrex::cand::float_to_bf16;
using atrex::cand::parallel_rows;

// Column blocks keep COL_BLOCK float sums in registers/L1 while the top_k rows stream past; k order
// as the reference.
void token(const uint16_t* __restrict x, uint16_t* __restrict out, int64_t top_k, int64_t hidden,
           float scale) {
  float acc[COL_BLOCK];
  for (int64_t h0 = 0; h0 < hidden; h0 += COL_BLOCK) {
    const int n = hidden - h0 < COL_BLOCK ? static_cast<int>(hidden - h0) : COL_BLOCK;
    for (int j = 0; j < n; ++j) acc[j] = 0.f;
    for (int64_t k = 0; k < top_k; ++k) {
      const uint16_t* src = x + k * hidden + h0;
      for (int j = 0; j < n; ++j) acc[j] += bf16_to_float(src[j]);
    }
    for (int j = 0; j < n; ++j) out[h0 + j] = float_to_bf16(acc[j] * scale);
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// expert_outputs: [T, K, H] -> out: [T, H] = bf16(sum_k x * routed_scaling_factor).
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "expert_outputs");
  const DLTensor* o = atrex_output(launch, "out");
  if (!x || !o) return fail("moe_sum_reduce: missing tensor expert_outputs or out");
  if (x->ndim != 3 || o->ndim != 2 || !is(x, kBF16) || !is(o, kBF16))
    return fail("moe_sum_reduce: expected bf16 expert_outputs[T,K,H] and out[T,H]");
  const int64_t tokens = x->shape[0], top_k = x->shape[1], hidden = x->shape[2];
  if (o->shape[0] != tokens || o->shape[1] != hidden) return fail("moe_sum_reduce: shape mismatch");
  const float scale = static_cast<float>(atrex_param_float(launch, "routed_scaling_factor", 1.0));
  const auto* xp = static_cast<const uint16_t*>(x->data);
  auto* op = static_cast<uint16_t*>(o->data);
  parallel_rows(tokens, top_k * hidden, THREADS, int64_t{MIN_KELEMS} * 1024, [=](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      token(xp + t * top_k * hidden, op + t * hidden, top_k, hidden, scale);
  });
  return 0;
}
