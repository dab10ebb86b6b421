// atrex-template: group_loop
// atrex-description: loop over quantisation groups, split into contiguous chunks over up to THREADS std::threads (1: serial; more only when the work reaches MIN_KELEMS thousand elements per thread); per group amax over UNROLL independent accumulators (vectorisable), then a branch-light bitwise round-to-nearest-even onto the e4m3 grid for each clamped x / scale
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

constexpr float kFp8Max = 448.0f;

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

// Groups [begin, end) of `group` values each (row-major: rows are whole groups).
void quant_groups(const uint16_t* x, uint8_t* q, float* scales, int64_t group, int64_t begin,
                  int64_t end) {
  for (int64_t g = begin; g < end; ++g) {
    const uint16_t* xg = x + g * group;
    uint8_t* qg = q + g * group;
    float acc[UNROLL] = {};
    int64_t h = 0;
    for (; h + UNROLL <= group; h += UNROLL)
      for (int u = 0; u < UNROLL; ++u) acc[u] = std::fmax(acc[u], std::fabs(bf16_to_float(xg[h + u])));
    float amax = 0.f;
    for (int u = 0; u < UNROLL; ++u) amax = std::fmax(amax, acc[u]);
    for (; h < group; ++h) amax = std::fmax(amax, std::fabs(bf16_to_float(xg[h])));
    const float s = std::fmax(amax * (1.0f / kFp8Max), 1e-10f);
    for (h = 0; h < group; ++h)
      qg[h] = to_e4m3(std::fmin(std::fmax(bf16_to_float(xg[h]) / s, -kFp8Max), kFp8Max));
    scales[g] = s;
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// x [T, H] bf16 -> quantized [T, H] e4m3, scales [T, H / group_size] fp32.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "per_token_group_quant_fp8");
  const DLTensor* x = ts.input("x", kBF16, 2);
  const DLTensor* q = ts.output("quantized", kFP8E4M3, 2);
  const DLTensor* sc = ts.output("scales", kF32, 2);
  ts.same_dims(x, q);
  if (!ts.ok()) return ts.failed();
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const int64_t group = atrex_param_int(launch, "group_size", 0);
  if (group <= 0 || hidden % group != 0 || sc->shape[0] != rows || sc->shape[1] != hidden / group)
    return fail("per_token_group_quant_fp8: group_size must divide hidden_size; scales [T, H / group_size]");
  const int64_t groups = rows * (hidden / group);
  const auto* xp = static_cast<const uint16_t*>(x->data);
  auto* qp = static_cast<uint8_t*>(q->data);
  auto* sp = static_cast<float*>(sc->data);
  parallel_rows(groups, group, THREADS, int64_t{MIN_KELEMS} * 1024,
                [&](int64_t begin, int64_t end) { quant_groups(xp, qp, sp, group, begin, end); });
  return 0;
}
