// atrex-template: row_loop
// atrex-description: loop over channels, split into contiguous chunks over up to THREADS std::threads (1: serial; more only when the work reaches MIN_KELEMS thousand multiply-adds per thread); each row convolved with its taps in a local array (the initial state prepended once into a small head buffer, the body read straight from x as bf16), fp32 accumulation, TOKEN_UNROLL outputs per step, libm exp in the silu
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: TOKEN_UNROLL = 8 | 4, 8
// atrex-param: MIN_KELEMS = 64 | 16, 64
#ifndef THREADS
#define THREADS 2
#endif
#ifndef TOKEN_UNROLL
#define TOKEN_UNROLL 8
#endif
#ifndef MIN_KELEMS
#define MIN_KELEMS 64
#endif

#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>

#include "atrex/candidate_util.h"

namespace {

using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::bf16_to_float;
using atrex::cand::float_to_bf16;
using atrex::cand::parallel_rows;

constexpr int kMaxWidth = 8;

struct Args {
  const uint16_t* x;
  const uint16_t* w;
  const uint16_t* bias;
  const uint16_t* state;
  uint16_t* out;
  int64_t tokens;
  int width;
  bool silu;
};

inline uint16_t finish(float acc, bool silu) {
  const float conv = bf16_to_float(float_to_bf16(acc));
  return float_to_bf16(silu ? conv / (1.0f + std::exp(-conv)) : conv);
}

// Channels [begin, end).
void rows(const Args& a, int64_t begin, int64_t end) {
  const int width = a.width, halo = width - 1;
  for (int64_t d = begin; d < end; ++d) {
    float w[kMaxWidth];
    for (int j = 0; j < width; ++j) w[j] = bf16_to_float(a.w[d * width + j]);
    const float b = bf16_to_float(a.bias[d]);
    const uint16_t* xr = a.x + d * a.tokens;
    uint16_t* orow = a.out + d * a.tokens;
    // The first `halo` outputs reach into the initial state: head[k] = row value at k - halo.
    float head[2 * kMaxWidth];
    const int64_t nhead = halo < a.tokens ? halo : a.tokens;
    for (int k = 0; k < halo; ++k) head[k] = bf16_to_float(a.state[d * halo + k]);
    for (int64_t k = 0; k < nhead + halo && k < 2 * kMaxWidth; ++k)
      if (k >= halo) head[k] = k - halo < a.tokens ? bf16_to_float(xr[k - halo]) : 0.f;
    for (int64_t t = 0; t < nhead; ++t) {
      float acc = b;
      for (int j = 0; j < width; ++j) acc += w[j] * head[t + j];
      orow[t] = finish(acc, a.silu);
    }
    // Body: every tap inside x.
    int64_t t = nhead;
    for (; t + TOKEN_UNROLL <= a.tokens; t += TOKEN_UNROLL) {
      float acc[TOKEN_UNROLL];
      for (int u = 0; u < TOKEN_UNROLL; ++u) acc[u] = b;
      for (int j = 0; j < width; ++j)
        for (int u = 0; u < TOKEN_UNROLL; ++u) acc[u] += w[j] * bf16_to_float(xr[t + u + j - halo]);
      for (int u = 0; u < TOKEN_UNROLL; ++u) orow[t + u] = finish(acc[u], a.silu);
    }
    for (; t < a.tokens; ++t) {
      float acc = b;
      for (int j = 0; j < width; ++j) acc += w[j] * bf16_to_float(xr[t + j - halo]);
      orow[t] = finish(acc, a.silu);
    }
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// x [dim, T], weight [dim, width], bias [dim], initial_state [1, dim, width - 1] (bf16) ->
// out [dim, T] bf16.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "causal_conv1d");
  const DLTensor* x = ts.input("x", kBF16, 2);
  const DLTensor* w = ts.input("weight", kBF16, 2);
  const DLTensor* b = ts.input("bias", kBF16, 1);
  const DLTensor* st = ts.input("initial_state", kBF16, 3);
  const DLTensor* o = ts.output("out", kBF16, 2);
  ts.same_dims(x, o);
  if (!ts.ok()) return ts.failed();
  const int64_t dim = x->shape[0], tokens = x->shape[1], width = w->shape[1];
  if (w->shape[0] != dim || b->shape[0] != dim || st->shape[0] != 1 || st->shape[1] != dim ||
      st->shape[2] != width - 1)
    return fail("causal_conv1d: weight [dim, width], bias [dim], initial_state [1, dim, width - 1] expected");
  if (width < 1 || width > kMaxWidth)
    return fail("causal_conv1d: width %lld not in [1, %d]", static_cast<long long>(width), kMaxWidth);
  const AtrexParam* act = atrex_param(launch, "activation");
  const Args a{static_cast<const uint16_t*>(x->data), static_cast<const uint16_t*>(w->data),
               static_cast<const uint16_t*>(b->data), static_cast<const uint16_t*>(st->data),
               static_cast<uint16_t*>(o->data), tokens, static_cast<int>(width),
               !act || std::strcmp(act->string_value, "none") != 0};
  parallel_rows(dim, tokens * width, THREADS, int64_t{MIN_KELEMS} * 1024,
                [&](int64_t begin, int64_t end) { rows(a, begin, end); });
  return 0;
}
