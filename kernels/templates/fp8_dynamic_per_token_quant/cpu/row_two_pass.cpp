// atrex-template: row_two_pass
// atrex-description: row loop, rows split into contiguous chunks over up to THREADS std::threads (1: serial; more only when the work reaches MIN_KELEMS thousand elements per thread); per row amax over UNROLL independent accumulators (vectorisable), then a branch-light bitwise round-to-nearest-even onto the e4m3 grid for each clamped x * (1/scale)
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
using atrex::cand::kBF16;
using atrex::cand::kF32;
using atrex::cand::kFP8E4M3;
using atrex::cand::bf16_to_float;
using atrex::cand::parallel_rows;

// The float8_e4m3fnuz range of the reference (stored as e4m3fn).
constexpr float kFp8Max = 240.0f;

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

// Rows [begin, end).
void quant_rows(const uint16_t* x, uint8_t* q, float* scale, int64_t hidden, int64_t begin,
                int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const uint16_t* xr = x + r * hidden;
    uint8_t* qr = q + r * hidden;
    float acc[UNROLL] = {};
    int64_t h = 0;
    for (; h + UNROLL <= hidden; h += UNROLL)
      for (int u = 0; u < UNROLL; ++u) acc[u] = std::fmax(acc[u], std::fabs(bf16_to_float(xr[h + u])));
    float amax = 0.f;
    for (int u = 0; u < UNROLL; ++u) amax = std::fmax(amax, acc[u]);
    for (; h < hidden; ++h) amax = std::fmax(amax, std::fabs(bf16_to_float(xr[h])));
    const float s = std::fmax(amax, 1e-12f) * (1.0f / kFp8Max);
    const float inv = 1.0f / s;
    for (h = 0; h < hidden; ++h)
      qr[h] = to_e4m3(std::fmin(std::fmax(bf16_to_float(xr[h]) * inv, -kFp8Max), kFp8Max));
    scale[r] = s;
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// x [T, H] bf16 -> q [T, H] e4m3, scale [T] fp32.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "fp8_dynamic_per_token_quant");
  const DLTensor* x = ts.input("x", kBF16, 2);
  const DLTensor* q = ts.output("q", kFP8E4M3, 2);
  const DLTensor* sc = ts.output("scale", kF32, 1);
  ts.same_dims(x, q);
  if (!ts.ok()) return ts.failed();
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  if (sc->shape[0] != rows) return fail("fp8_dynamic_per_token_quant: scale must be [T]");
  const auto* xp = static_cast<const uint16_t*>(x->data);
  auto* qp = static_cast<uint8_t*>(q->data);
  auto* sp = static_cast<float*>(sc->data);
  parallel_rows(rows, hidden, THREADS, int64_t{MIN_KELEMS} * 1024,
                [&](int64_t begin, int64_t end) { quant_rows(xp, qp, sp, hidden, begin, end); });
  return 0;
}
