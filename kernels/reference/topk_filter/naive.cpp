// Reference re-expressed as a cpu candidate: topk_filter.
// logits [S, V] fp32 -> out = logits where logits >= the row's k-th largest value (k =
// min(top_k, V)), else -inf.
#include <algorithm>
#include <cmath>
#include <functional>
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
  std::vector<float> row(static_cast<size_t>(vocab));
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * vocab;
    row.assign(xr, xr + vocab);
    std::nth_element(row.begin(), row.begin() + (k - 1), row.end(), std::greater<float>());
    const float threshold = row[static_cast<size_t>(k - 1)];
    for (int64_t i = 0; i < vocab; ++i) o[r * vocab + i] = xr[i] < threshold ? -INFINITY : xr[i];
  }
  return 0;
}
