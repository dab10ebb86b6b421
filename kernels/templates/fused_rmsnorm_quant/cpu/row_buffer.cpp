// atrex-template: row_buffer
// atrex-description: per row, the residual sum v = bf16(x + residual) goes to residual_out and a float row buffer in one pass (the sum of squares over UNROLL independent accumulators), the doubly rounded normed values replace v in the buffer with their amax, then one quantising pass over the buffer; rows split over up to THREADS std::threads when the work is large enough
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: UNROLL = 8 | 1, 8
#ifndef THREADS
#define THREADS 2
#endif
#ifndef UNROLL
#define UNROLL 8
#endif
#define MIN_KELEMS 64

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "atrex/candidate_util.h"

namespace {

using atrex::cand::bf16_to_float;
using atrex::cand::fail;
using atrex::cand::float_to_bf16;
using atrex::cand::kBF16;
using atrex::cand::kF32;
using atrex::cand::kFP8E4M3;
using atrex::cand::parallel_rows;

inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

// e4m3fn bits of f, |f| <= 448 (round to nearest even; subnormals below 2^-6).
inline uint8_t to_e4m3(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  u &= 0x7fffffffu;
  float a;
  std::memcpy(&a, &u, 4);
  if (a < 0.015625f) return static_cast<uint8_t>(sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f)));
  u += 0x7ffffu + ((u >> 20) & 1u);  // keep 3 mantissa bits; a carry moves into the exponent
  const uint32_t exp = (u >> 23) - 127u + 7u, man = (u >> 20) & 7u;
  return static_cast<uint8_t>(sign | (exp << 3) | man);
}

struct Args {
  const uint16_t *x, *res, *w;
  uint8_t* q;
  float* scale;
  uint16_t* res_out;
  int64_t hidden;
  float eps;
};

// Rows [begin, end).
void rows(const Args& a, int64_t begin, int64_t end) {
  const int64_t hd = a.hidden;
  std::vector<float> buf(static_cast<size_t>(hd));
  float* b = buf.data();
  for (int64_t r = begin; r < end; ++r) {
    const uint16_t* xr = a.x + r * hd;
    const uint16_t* rr = a.res + r * hd;
    uint16_t* ro = a.res_out + r * hd;
    float acc[UNROLL] = {};
    int64_t h = 0;
    for (; h + UNROLL <= hd; h += UNROLL) {
      for (int u = 0; u < UNROLL; ++u) {
        const uint16_t v = float_to_bf16(bf16_to_float(xr[h + u]) + bf16_to_float(rr[h + u]));
        ro[h + u] = v;
        b[h + u] = bf16_to_float(v);
        acc[u] += b[h + u] * b[h + u];
      }
    }
    float ss = 0.f;
    for (int u = 0; u < UNROLL; ++u) ss += acc[u];
    for (; h < hd; ++h) {
      const uint16_t v = float_to_bf16(bf16_to_float(xr[h]) + bf16_to_float(rr[h]));
      ro[h] = v;
      b[h] = bf16_to_float(v);
      ss += b[h] * b[h];
    }
    const float rstd = 1.0f / std::sqrt(ss / static_cast<float>(hd) + a.eps);
    float amax = 0.f;
    for (h = 0; h < hd; ++h) {
      b[h] = round_bf16(round_bf16(b[h] * rstd) * bf16_to_float(a.w[h]));
      amax = std::fmax(amax, std::fabs(b[h]));
    }
    float s = amax * (1.0f / 240.0f);
    if (s == 0.f) s = 1.f;
    uint8_t* qr = a.q + r * hd;
    for (h = 0; h < hd; ++h) qr[h] = to_e4m3(b[h] / s);
    a.scale[r] = s;
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// x, residual [T, H], weight [H] (bf16) -> quantized [T, H] e4m3, scale [T, 1] fp32,
// residual_out [T, H] bf16.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "fused_rmsnorm_quant");
  const DLTensor* x = ts.input("x", kBF16, 2);
  const DLTensor* r = ts.input("residual", kBF16, 2);
  const DLTensor* w = ts.input("weight", kBF16, 1);
  const DLTensor* q = ts.output("quantized", kFP8E4M3, 2);
  const DLTensor* sc = ts.output("scale", kF32, 2);
  const DLTensor* ro = ts.output("residual_out", kBF16, 2);
  ts.same_dims(x, r);
  ts.same_dims(x, q);
  ts.same_dims(x, ro);
  if (!ts.ok()) return ts.failed();
  const int64_t n = x->shape[0], hidden = x->shape[1];
  if (w->shape[0] != hidden) return fail("fused_rmsnorm_quant: weight must be [hidden_size]");
  if (sc->shape[0] != n || sc->shape[1] != 1) return fail("fused_rmsnorm_quant: scale must be [T, 1]");
  const Args a{static_cast<const uint16_t*>(x->data), static_cast<const uint16_t*>(r->data),
               static_cast<const uint16_t*>(w->data), static_cast<uint8_t*>(q->data),
               static_cast<float*>(sc->data), static_cast<uint16_t*>(ro->data), hidden,
               static_cast<float>(atrex_param_float(launch, "eps", 1e-5))};
  parallel_rows(n, hidden, THREADS, int64_t{MIN_KELEMS} * 1024,
                [&](int64_t b, int64_t e) { rows(a, b, e); });
  return 0;
}
