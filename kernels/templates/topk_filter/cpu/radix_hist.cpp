// atrex-template: radix_hist
// atrex-description: per row a histogram of the top RADIX_BITS bits of each value's order-preserving key, a walk down from the highest bucket to the one holding the k-th largest, then std::nth_element over only that bucket's values gives the exact threshold; a second pass writes value or -inf
// atrex-param: RADIX_BITS = 8 | 8, 11
#ifndef RADIX_BITS
#define RADIX_BITS 8
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "atrex/candidate_util.h"

static_assert(RADIX_BITS >= 4 && RADIX_BITS <= 16, "RADIX_BITS");

namespace {

using atrex::cand::fail;
using atrex::cand::kF32;

// Order-preserving key (no NaN in the inputs); -0 takes +0's key.
inline uint32_t key_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (u == 0x80000000u) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// logits [S, V] fp32 -> out [S, V] fp32: logits where >= the row's k-th largest (k =
// min(top_k, V), default 50), else -inf.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "topk_filter");
  const DLTensor* x = ts.input("logits", kF32, 2);
  const DLTensor* o = ts.output("out", kF32, 2);
  ts.same_dims(x, o);
  if (!ts.ok()) return ts.failed();
  const int64_t rows = x->shape[0], cols = x->shape[1];
  const int64_t k = std::min<int64_t>(atrex_param_int(launch, "top_k", 50), cols);
  if (k < 1) return fail("topk_filter: top_k must be >= 1 (got %lld)", static_cast<long long>(k));
  const auto* xp = static_cast<const float*>(x->data);
  auto* op = static_cast<float*>(o->data);
  constexpr int kShift = 32 - RADIX_BITS;
  std::vector<int32_t> hist(size_t{1} << RADIX_BITS);
  std::vector<float> bucket;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = xp + r * cols;
    std::fill(hist.begin(), hist.end(), 0);
    for (int64_t i = 0; i < cols; ++i) ++hist[key_of(xr[i]) >> kShift];
    int32_t above = 0;
    uint32_t b = static_cast<uint32_t>(hist.size() - 1);
    while (above + hist[b] < k) above += hist[b--];
    bucket.clear();
    for (int64_t i = 0; i < cols; ++i)
      if (key_of(xr[i]) >> kShift == b) bucket.push_back(xr[i]);
    const auto nth = bucket.begin() + (k - above - 1);
    std::nth_element(bucket.begin(), nth, bucket.end(), std::greater<float>());
    const float thr = *nth;
    float* orow = op + r * cols;
    for (int64_t i = 0; i < cols; ++i) orow[i] = xr[i] < thr ? -INFINITY : xr[i];
  }
  return 0;
}
