// atrex-template: int_amax
// atrex-description: per row the amax taken on the bf16 bits (sign cleared, unsigned 16-bit maxima over ACC lanes, decoded once), then a branch-free e4m3 encode (subnormal and normal codes both computed, one selected) so the quantise loop vectorises; rows split over up to THREADS std::threads (1: serial; more from 64 thousand elements per thread)
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: ACC = 16 | 8, 16
#ifndef THREADS
#define THREADS 2
#endif
#ifndef ACC
#define ACC 16
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
using atrex::cand::kF32;
using atrex::cand::kFP8E4M3;
using atrex::cand::bf16_to_float;
using atrex::cand::parallel_rows;

// The float8_e4m3fnuz range of the reference (stored as e4m3fn).
constexpr float kFp8Max = 240.0f;

// e4m3fn bits of f, |f| <= 448, round to nearest even, without a branch: the subnormal code
// (|f| < 2^-6: round(|f| * 512)) and the normal one (3 mantissa bits kept by an integer add; a
// carry moves into the exponent) are both computed and one is selected, so the loop vectorises.
inline uint8_t to_e4m3(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 24) & 0x80u;
  u &= 0x7fffffffu;
  float a;
  std::memcpy(&a, &u, 4);
  const uint32_t sub = static_cast<uint32_t>(static_cast<int32_t>(__builtin_nearbyintf(a * 512.0f)));
  const uint32_t r = u + 0x7ffffu + ((u >> 20) & 1u);
  const uint32_t normal = ((((r >> 23) - 120u) << 3) | ((r >> 20) & 7u)) & 0x7fu;
  return static_cast<uint8_t>(sign | (a < 0.015625f ? sub : normal));
}

// Rows [begin, end). amax on the bf16 bits: |x| is the bits without the sign, and for finite
// values those order as unsigned integers, so the max runs over uint16 lanes (ACC independent
// maxima) and is decoded once per row.
void quant_rows(const uint16_t* x, uint8_t* q, float* scale, int64_t hidden, int64_t begin,
                int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const uint16_t* xr = x + r * hidden;
    uint8_t* qr = q + r * hidden;
    uint16_t acc[ACC] = {};
    int64_t h = 0;
    for (; h + ACC <= hidden; h += ACC)
      for (int u = 0; u < ACC; ++u) {
        const uint16_t m = static_cast<uint16_t>(xr[h + u] & 0x7fffu);
        acc[u] = m > acc[u] ? m : acc[u];
      }
    uint16_t mb = 0;
    for (int u = 0; u < ACC; ++u) mb = acc[u] > mb ? acc[u] : mb;
    for (; h < hidden; ++h) {
      const uint16_t m = static_cast<uint16_t>(xr[h] & 0x7fffu);
      mb = m > mb ? m : mb;
    }
    const float amax = bf16_to_float(mb);
    const float s = std::fmax(amax, 1e-12f) * (1.0f / kFp8Max);
    const float inv = 1.0f / s;
    for (h = 0; h < hidden; ++h) {
      float v = bf16_to_float(xr[h]) * inv;
      v = v < -kFp8Max ? -kFp8Max : (v > kFp8Max ? kFp8Max : v);
      qr[h] = to_e4m3(v);
    }
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
