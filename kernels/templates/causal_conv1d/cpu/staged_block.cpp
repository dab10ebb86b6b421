// atrex-template: staged_block
// atrex-description: loop over channels, split into contiguous chunks over up to THREADS std::threads (1: serial; more from 64 thousand multiply-adds per thread); each row decoded to fp32 BLOCK tokens at a time into a staging buffer led by the halo (initial state, then the previous block's tail), taps outermost and tokens innermost over contiguous fp32 (vectorised), then one vectorised bias/round/silu pass with a polynomial exp instead of libm
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: BLOCK = 512 | 64, 512
#ifndef THREADS
#define THREADS 2
#endif
#ifndef BLOCK
#define BLOCK 512
#endif
#define MIN_KELEMS 64

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

// exp(x) without libm, so the loop vectorises: x = n ln2 + r with |r| <= ln2 / 2 (two-part ln2),
// a degree-7 Taylor polynomial for e^r (relative error below 3e-9), 2^n through the exponent
// bits. x is clamped to [-87, 88]: e^-87 underflows the silu's denominator to 1 anyway, and
// the silu of a conv below -87 rounds to -0 in bf16 either way.
inline float exp_poly(float x) {
  x = x < -87.f ? -87.f : (x > 88.f ? 88.f : x);
  const float n = __builtin_nearbyintf(x * 1.44269504088896341f);
  const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;
  const float p =
      1.f + r * (1.f + r * (0.5f + r * (1.f / 6 + r * (1.f / 24 + r * (1.f / 120 + r * (1.f / 720 +
                                                                                    r * (1.f / 5040)))))));
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

// Channels [begin, end). Each row is decoded to fp32 BLOCK tokens at a time into a staging
// buffer that starts with the `halo` values before the block (the initial state for the first
// block, the previous block's tail after), so every output of the block reads only the buffer:
// the taps loop is outermost and the token loop innermost (contiguous fp32, vectorised), and
// the bias, bf16 rounding and silu run as one more vectorised pass over the block.
void rows(const Args& a, int64_t begin, int64_t end) {
  const int width = a.width, halo = width - 1;
  float buf[BLOCK + kMaxWidth];
  float acc[BLOCK];
  for (int64_t d = begin; d < end; ++d) {
    float w[kMaxWidth];
    for (int j = 0; j < width; ++j) w[j] = bf16_to_float(a.w[d * width + j]);
    const float b = bf16_to_float(a.bias[d]);
    const uint16_t* xr = a.x + d * a.tokens;
    uint16_t* orow = a.out + d * a.tokens;
    for (int k = 0; k < halo; ++k) buf[k] = bf16_to_float(a.state[d * halo + k]);
    for (int64_t t0 = 0; t0 < a.tokens; t0 += BLOCK) {
      const int64_t n = a.tokens - t0 < BLOCK ? a.tokens - t0 : BLOCK;
      if (t0 > 0)
        for (int k = 0; k < halo; ++k) buf[k] = buf[BLOCK + k];  // the previous block's tail
      for (int64_t t = 0; t < n; ++t) buf[halo + t] = bf16_to_float(xr[t0 + t]);
      for (int64_t t = 0; t < n; ++t) acc[t] = b;
      for (int j = 0; j < width; ++j) {
        const float wj = w[j];
        const float* src = buf + j;
        for (int64_t t = 0; t < n; ++t) acc[t] += wj * src[t];
      }
      if (a.silu) {
        for (int64_t t = 0; t < n; ++t) {
          const float conv = bf16_to_float(float_to_bf16(acc[t]));
          orow[t0 + t] = float_to_bf16(conv / (1.0f + exp_poly(-conv)));
        }
      } else {
        for (int64_t t = 0; t < n; ++t) orow[t0 + t] = float_to_bf16(acc[t]);
      }
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
