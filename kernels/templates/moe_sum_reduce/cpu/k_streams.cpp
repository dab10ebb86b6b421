// atrex-template: k_streams
// atrex-description: per token one pass over the columns reading all top_k expert rows together, each output summed in registers in the reference's k order (top_k 1..8 compile-time, so the k loop unrolls and the column loop vectorises over K streams; others a runtime loop), no accumulator block; tokens split over up to THREADS std::threads (1: serial; more from MIN_KELEMS thousand elements per thread)
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: MIN_KELEMS = 64 | 16, 64
#ifndef THREADS
#define THREADS 2
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

// One pass over the columns with all K expert rows streamed together: each output is
// ((0 + x_0) + x_1) + ... + x_{K-1} in fp32 (the reference's k order) computed in registers,
// no accumulator array; K is a compile-time constant for 1..8 so the k loop unrolls and the
// column loop vectorises over K input streams.
template <int K>
void token_k(const uint16_t* __restrict x, uint16_t* __restrict out, int64_t hidden, float scale) {
  for (int64_t h = 0; h < hidden; ++h) {
    float s = 0.f;
    for (int k = 0; k < K; ++k) s += bf16_to_float(x[k * hidden + h]);
    out[h] = float_to_bf16(s * scale);
  }
}

// Any other top_k: the same traversal with a runtime k loop.
void token_any(const uint16_t* __restrict x, uint16_t* __restrict out, int64_t top_k,
               int64_t hidden, float scale) {
  for (int64_t h = 0; h < hidden; ++h) {
    float s = 0.f;
    for (int64_t k = 0; k < top_k; ++k) s += bf16_to_float(x[k * hidden + h]);
    out[h] = float_to_bf16(s * scale);
  }
}

void token(const uint16_t* x, uint16_t* out, int64_t top_k, int64_t hidden, float scale) {
  switch (top_k) {
    case 1: return token_k<1>(x, out, hidden, scale);
    case 2: return token_k<2>(x, out, hidden, scale);
    case 3: return token_k<3>(x, out, hidden, scale);
    case 4: return token_k<4>(x, out, hidden, scale);
    case 5: return token_k<5>(x, out, hidden, scale);
    case 6: return token_k<6>(x, out, hidden, scale);
    case 7: return token_k<7>(x, out, hidden, scale);
    case 8: return token_k<8>(x, out, hidden, scale);
    default: return token_any(x, out, top_k, hidden, scale);
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
