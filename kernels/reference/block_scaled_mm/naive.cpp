// Reference re-expressed as a cpu candidate: block_scaled_mm.
// a [M, K] fp8 e4m3, b [N, K] fp8 e4m3, a_scales [M, K/gk] fp32, b_scales [N/gn, K/gk] fp32 ->
// out [M, N] fp32 = sum_kb (dot_kb(a[m], b[n]) * a_scales[m, kb]) * b_scales[n/gn, kb], every
// step in fp32 as the reference's bmm and elementwise ops.
#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "atrex/candidate.h"

// fp8 e4m3fn (bias 7, no infinities) to float; NaN is not expected in the inputs.
static float fp8_to_float(uint8_t v) {
  const int e = (v >> 3) & 15, m = v & 7;
  const float mag = e ? std::ldexp(1.0f + m / 8.0f, e - 7) : std::ldexp(static_cast<float>(m), -9);
  return (v & 0x80) ? -mag : mag;
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* a = atrex_input(launch, "a");
  const DLTensor* b = atrex_input(launch, "b");
  const DLTensor* as = atrex_input(launch, "a_scales");
  const DLTensor* bs = atrex_input(launch, "b_scales");
  const DLTensor* out = atrex_output(launch, "out");
  const int64_t gn = atrex_param_int(launch, "group_n", 128),
                gk = atrex_param_int(launch, "group_k", 128);
  if (!a || !b || !as || !bs || !out || a->ndim != 2 || b->ndim != 2 || gn < 1 || gk < 1) return 1;
  const int64_t m = a->shape[0], k = a->shape[1], n = b->shape[0], groups = k / gk;
  float table[256];
  for (int v = 0; v < 256; ++v) table[v] = fp8_to_float(static_cast<uint8_t>(v));
  const auto* ap = static_cast<const uint8_t*>(a->data);
  const auto* bp = static_cast<const uint8_t*>(b->data);
  const auto* asp = static_cast<const float*>(as->data);
  const auto* bsp = static_cast<const float*>(bs->data);
  auto* o = static_cast<float*>(out->data);
  auto work = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < n; ++c) {
        float acc = 0;
        for (int64_t kb = 0; kb < groups; ++kb) {
          float dot = 0;
          for (int64_t i = kb * gk; i < (kb + 1) * gk; ++i)
            dot += table[ap[r * k + i]] * table[bp[c * k + i]];
          acc += (dot * asp[r * groups + kb]) * bsp[(c / gn) * groups + kb];
        }
        o[r * n + c] = acc;
      }
    }
  };
  const int64_t threads =
      std::max<int64_t>(1, std::min<int64_t>(std::thread::hardware_concurrency(), m));
  std::vector<std::thread> pool;
  for (int64_t i = 0; i < threads; ++i)
    pool.emplace_back(work, m * i / threads, m * (i + 1) / threads);
  for (auto& th : pool) th.join();
  return 0;
}
