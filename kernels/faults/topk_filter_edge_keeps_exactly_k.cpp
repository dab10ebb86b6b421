// Fault candidate (docs/evaluation.md "Edge-case inputs"; issue 14, attack 10): topk_filter that
// keeps exactly k values per row, the first k of a descending sort, instead of every value at
// least the k-th largest. Identical on rows without a tie at the k-th value, which is every row
// random draws give (0 of 4650 rows checked); on the edge-case set (logits rounded to multiples
// of 0.25: ties at the threshold in every row) it drops tied values the reference keeps, so it
// must be `wrong_result` there. Its honest twin is kernels/reference/topk_filter/naive.cpp.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "atrex/candidate.h"

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* logits = atrex_input(launch, "logits");
  const DLTensor* out = atrex_output(launch, "out");
  if (!logits || !out || logits->ndim != 2) return 1;
  const int64_t rows = logits->shape[0], vocab = logits->shape[1];
  const int64_t k = std::min<int64_t>(atrex_param_int(launch, "top_k", 50), vocab);
  if (k < 1) return 2;
  const auto* x = static_cast<const float*>(logits->data);
  auto* o = static_cast<float*>(out->data);
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * vocab;
    std::iota(order.begin(), order.end(), int64_t{0});
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
      return xr[a] > xr[b] || (xr[a] == xr[b] && a < b);
    });
    for (int64_t i = 0; i < vocab; ++i) o[r * vocab + i] = -INFINITY;
    for (int64_t j = 0; j < k; ++j) o[r * vocab + order[j]] = xr[order[j]];
  }
  return 0;
}
