// atrex-template: decoded_panels
// atrex-description: b decoded once from e4m3 to an fp32 [N, K] panel, a decoded RB rows at a time; each RB x 4 register block runs the K group's dot over contiguous fp32 (vectorisable), then scales and adds; rows split over THREADS std::threads
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: RB = 2 | 1, 2
#ifndef THREADS
#define THREADS 2
#endif
#ifndef RB
#define RB 2
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "atrex/candidate_util.h"

// out[m, n] = sum_kb (dot_kb(a[m], b[n]) * a_scales[m, kb]) * b_scales[n / gn, kb]: fp8 e4m3
// a [M, K], b [N, K], fp32 scales, out [M, N] fp32.
namespace {

using atrex::cand::fail;
using atrex::cand::kF32;
using atrex::cand::kFP8E4M3;
using atrex::cand::parallel_rows;

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "block_scaled_mm");
  const DLTensor* a = ts.input("a", kFP8E4M3, 2);
  const DLTensor* b = ts.input("b", kFP8E4M3, 2);
  const DLTensor* as = ts.input("a_scales", kF32, 2);
  const DLTensor* bs = ts.input("b_scales", kF32, 2);
  const DLTensor* o = ts.output("out", kF32, 2);
  if (!ts.ok() || !ts.dim_is(b, 1, a->shape[1]) || !ts.dim_is(o, 0, a->shape[0]) ||
      !ts.dim_is(o, 1, b->shape[0]))
    return ts.failed();
  const int64_t gn = atrex_param_int(launch, "group_n", 128), gk = atrex_param_int(launch, "group_k", 128);
  const int64_t m = a->shape[0], k = a->shape[1], n = b->shape[0];
  if (gn < 1 || gk < 1 || k % gk != 0)
    return fail("block_scaled_mm: group_n %lld, group_k %lld do not tile K %lld", (long long)gn,
                (long long)gk, (long long)k);
  if (m == 0 || n == 0) return 0;
  const auto* ap = static_cast<const uint8_t*>(a->data);
  const auto* bp = static_cast<const uint8_t*>(b->data);
  const auto* asp = static_cast<const float*>(as->data);
  const auto* bsp = static_cast<const float*>(bs->data);
  auto* op = static_cast<float*>(o->data);
  const int64_t groups = k / gk;
  float table[256];
  for (int v = 0; v < 256; ++v) table[v] = atrex::cand::fp8_e4m3_to_float(static_cast<uint8_t>(v));
  std::vector<float> bf(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < n * k; ++i) bf[i] = table[bp[i]];
  parallel_rows((m + RB - 1) / RB, n * k, THREADS, 1 << 20, [&](int64_t blk0, int64_t blk1) {
    std::vector<float> af(static_cast<size_t>(RB * k));
    for (int64_t blk = blk0; blk < blk1; ++blk) {
      const int64_t r0 = blk * RB, rows = std::min<int64_t>(RB, m - r0);
      for (int64_t i = 0; i < rows * k; ++i) af[i] = table[ap[r0 * k + i]];
      for (int64_t i = rows * k; i < RB * k; ++i) af[i] = 0.f;
      for (int64_t c0 = 0; c0 < n; c0 += 4) {
        const int64_t cols = std::min<int64_t>(4, n - c0);
        float sum[RB][4] = {};
        for (int64_t q = 0; q < groups; ++q) {
          float dot[RB][4] = {};
          for (int64_t x = q * gk; x < (q + 1) * gk; ++x) {
            float bv[4];
            for (int j = 0; j < 4; ++j) bv[j] = j < cols ? bf[(c0 + j) * k + x] : 0.f;
            for (int i = 0; i < RB; ++i)
              for (int j = 0; j < 4; ++j) dot[i][j] += af[i * k + x] * bv[j];
          }
          for (int i = 0; i < rows; ++i)
            for (int j = 0; j < cols; ++j)
              sum[i][j] += (dot[i][j] * asp[(r0 + i) * groups + q]) * bsp[((c0 + j) / gn) * groups + q];
        }
        for (int i = 0; i < rows; ++i)
          for (int j = 0; j < cols; ++j) op[(r0 + i) * n + c0 + j] = sum[i][j];
      }
    }
  });
  return 0;
}
