// atrex-template: row_loop
// atrex-description: row loop, rows split into contiguous chunks over up to THREADS std::threads (1: serial; more only from 64 thousand elements per thread); per row the activations of TILE columns go to a float buffer first (a vectorisable pass when EXP_POLY=1), then are multiplied by up
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: TILE = 64 | 16, 64, 256, 1024
// atrex-param: EXP_POLY = 0 | 0, 1
#ifndef THREADS
#define THREADS 2
#endif
#ifndef TILE
#define TILE 64
#endif
#ifndef EXP_POLY
#define EXP_POLY 0
#endif
#define MIN_KELEMS 64

#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>

#include "atrex/candidate_util.h"

#if EXP_POLY && defined(__GNUC__) && !defined(__clang__)
// Lets GCC if-convert the clamps instead of threading them into branches, so the activation loop
// vectorises. It changes no result: nothing here observes floating-point exception flags.
#pragma GCC optimize("no-trapping-math")
#endif

namespace {

using atrex::cand::fail;
using atrex::cand::is;
using atrex::cand::kBF16;
using atrex::cand::bf16_to_float;
using atrex::cand::float_to_bf16;
using atrex::cand::parallel_rows;

#if EXP_POLY
// Cephes-style expf (Moshier): x = n*ln2 + r with n = round(x*log2 e) (1.5*2^23 shifter trick, no
// float->int conversion), degree-5 polynomial, 2^n put in the exponent bits. Within 1 float ulp of
// glibc expf on [-86, 89]; no bf16 activation differs from the expf one over all 65536 gate values.
// Clamping keeps n in [-124, 128]: below -86, 1 + e^x rounds to 1 anyway; above ~88.72, y * 2^128
// overflows to inf just as expf does.
inline float exp_f(float x) {
  const float xc = x < -86.0f ? -86.0f : (x > 89.0f ? 89.0f : x);
  const float shifter = 12582912.0f;
  const float t = xc * 1.44269504088896341f + shifter;
  const float nf = t - shifter;
  uint32_t tb, sb;
  std::memcpy(&tb, &t, sizeof tb);
  std::memcpy(&sb, &shifter, sizeof sb);
  const int32_t n = static_cast<int32_t>(tb - sb);
  const float r = (xc - nf * 0.693359375f) + nf * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * (r * r) + r + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(n + 126) << 23;  // 2^(n-1), finite for n = 128
  float half_scale;
  std::memcpy(&half_scale, &bits, sizeof half_scale);
  return y * half_scale * 2.0f;
}
#else
inline float exp_f(float x) { return std::exp(x); }  // the reference's expf
#endif
// act = bf16(silu(g)) in fp32, as the reference rounds the activation tensor to bf16.
inline float silu_bf16(float g) { return bf16_to_float(float_to_bf16(g / (1.0f + exp_f(-g)))); }

void row(const uint16_t* x, uint16_t* out, int64_t d) {
  float act[TILE];
  for (int64_t j0 = 0; j0 < d; j0 += TILE) {
    const int n = d - j0 < TILE ? static_cast<int>(d - j0) : TILE;
    for (int j = 0; j < n; ++j) act[j] = silu_bf16(bf16_to_float(x[j0 + j]));
    for (int j = 0; j < n; ++j) out[j0 + j] = float_to_bf16(act[j] * bf16_to_float(x[d + j0 + j]));
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// x: [..., cols] -> out: [..., d], d = cols / 2 (rounded down, as the reference does for odd cols).
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
  parallel_rows(rows, d, THREADS, int64_t{MIN_KELEMS} * 1024, [=](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) row(xp + r * cols, op + r * d, d);
  });
  return 0;
}
