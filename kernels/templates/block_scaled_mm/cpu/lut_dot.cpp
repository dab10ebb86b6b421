// atrex-template: lut_dot
// atrex-description: no decoded copies: each K group's dot reads the e4m3 bytes through a 256-entry fp32 table, CT columns of b per pass over one row of a (the row stays in L1), UNROLL partial sums per dot; rows split over THREADS std::threads
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: CT = 16 | 4, 16
// atrex-param: UNROLL = 4 | 1, 4
#ifndef THREADS
#define THREADS 2
#endif
#ifndef CT
#define CT 16
#endif
#ifndef UNROLL
#define UNROLL 4
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>

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
  parallel_rows(m, n * k, THREADS, 1 << 20, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* ar = ap + r * k;
      for (int64_t c0 = 0; c0 < n; c0 += CT) {
        const int64_t c1 = std::min<int64_t>(n, c0 + CT);
        for (int64_t c = c0; c < c1; ++c) {
          const uint8_t* br = bp + c * k;
          float total = 0.f;
          for (int64_t q = 0; q < groups; ++q) {
            float part[UNROLL] = {};
            int64_t x = q * gk;
            const int64_t end = (q + 1) * gk;
            for (; x + UNROLL <= end; x += UNROLL)
              for (int u = 0; u < UNROLL; ++u) part[u] += table[ar[x + u]] * table[br[x + u]];
            for (; x < end; ++x) part[0] += table[ar[x]] * table[br[x]];
            float dot = 0.f;
            for (int u = 0; u < UNROLL; ++u) dot += part[u];
            total += (dot * asp[r * groups + q]) * bsp[(c / gn) * groups + q];
          }
          op[r * n + c] = total;
        }
      }
    }
  });
  return 0;
}
