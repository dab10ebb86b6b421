// atrex-template: heap_scan
// atrex-description: one pass per row keeps the k largest values seen in a binary min-heap (a value enters only when it beats the heap's top, so most of a long row costs one compare), the top is the k-th largest; a second pass writes value or -inf; rows split over THREADS std::threads when the row count allows
// atrex-param: THREADS = 1 | 1, 2
#ifndef THREADS
#define THREADS 1
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "atrex/candidate_util.h"

static_assert(THREADS >= 1 && THREADS <= 4, "THREADS");

namespace {

using atrex::cand::fail;
using atrex::cand::kF32;
using atrex::cand::parallel_rows;

void do_rows(const float* x, float* o, int64_t cols, int64_t k, int64_t r0, int64_t r1) {
  std::vector<float> heap(static_cast<size_t>(k));
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * cols;
    std::copy(xr, xr + k, heap.begin());
    std::make_heap(heap.begin(), heap.end(), std::greater<float>());
    float top = heap.front();
    for (int64_t i = k; i < cols; ++i) {
      if (xr[i] > top) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<float>());
        heap.back() = xr[i];
        std::push_heap(heap.begin(), heap.end(), std::greater<float>());
        top = heap.front();
      }
    }
    float* orow = o + r * cols;
    for (int64_t i = 0; i < cols; ++i) orow[i] = xr[i] < top ? -INFINITY : xr[i];
  }
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
  parallel_rows(rows, cols, THREADS, 1 << 18,
                [&](int64_t r0, int64_t r1) { do_rows(xp, op, cols, k, r0, r1); });
  return 0;
}
