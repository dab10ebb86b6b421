// atrex-template: row_select
// atrex-description: row loop, rows split into contiguous chunks over up to THREADS std::threads (1: serial; more only when the work reaches MIN_KELEMS thousand scores per thread); per row max and sum of exps (fp64 sum, as the reference) into a probability buffer, optional group-limited routing over group maxima, then the top_k of the probabilities by a sorted insertion list (SELECT=0) or std::partial_sort of the ids (SELECT=1), larger score first and ties by smaller id
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: SELECT = 0 | 0, 1
// atrex-param: MIN_KELEMS = 64 | 16, 64
#ifndef THREADS
#define THREADS 2
#endif
#ifndef SELECT
#define SELECT 0
#endif
#ifndef MIN_KELEMS
#define MIN_KELEMS 64
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "atrex/candidate_util.h"

namespace {

using atrex::cand::fail;
using atrex::cand::kF32;
using atrex::cand::kI32;
using atrex::cand::parallel_rows;

struct Args {
  const float* g;
  float* w;
  int32_t* ids;
  int64_t experts, k, groups, topk_group;
};

inline bool better(float a, int32_t ia, float b, int32_t ib) {
  return a > b || (a == b && ia < ib);
}

// Rows [begin, end); p and order are scratch of `experts` entries.
void do_rows(const Args& a, int64_t begin, int64_t end) {
  const int64_t e = a.experts, k = a.k;
  std::vector<float> p(static_cast<size_t>(e));
  std::vector<int32_t> order(static_cast<size_t>(e));
  std::vector<float> best(static_cast<size_t>(a.groups > 0 ? a.groups : 1));
  for (int64_t r = begin; r < end; ++r) {
    const float* x = a.g + r * e;
    const float mx = *std::max_element(x, x + e);
    double sum = 0;
    for (int64_t i = 0; i < e; ++i) {
      p[static_cast<size_t>(i)] = std::exp(x[i] - mx);
      sum += p[static_cast<size_t>(i)];
    }
    const float fs = static_cast<float>(sum);
    for (int64_t i = 0; i < e; ++i) p[static_cast<size_t>(i)] /= fs;
    if (a.groups > 0 && a.topk_group > 0) {
      const int64_t size = e / a.groups;
      for (int64_t q = 0; q < a.groups; ++q)
        best[static_cast<size_t>(q)] =
            *std::max_element(p.begin() + q * size, p.begin() + (q + 1) * size);
      uint64_t keep = 0;
      for (int64_t t = 0; t < a.topk_group; ++t) {
        int64_t bq = -1;
        for (int64_t q = 0; q < a.groups; ++q)
          if (!(keep >> q & 1u) && (bq < 0 || best[static_cast<size_t>(q)] > best[static_cast<size_t>(bq)])) bq = q;
        keep |= uint64_t{1} << bq;
      }
      for (int64_t i = 0; i < e; ++i)
        if (!(keep >> (i / size) & 1u)) p[static_cast<size_t>(i)] = 0.0f;
    }
    float* w = a.w + r * k;
    int32_t* id = a.ids + r * k;
    if (SELECT == 0) {
      // Sorted list of the k best so far.
      int64_t n = 0;
      for (int32_t i = 0; i < static_cast<int32_t>(e); ++i) {
        const float v = p[static_cast<size_t>(i)];
        if (n == k && !better(v, i, w[k - 1], id[k - 1])) continue;
        int64_t j = n < k ? n++ : k - 1;
        for (; j > 0 && better(v, i, w[j - 1], id[j - 1]); --j) {
          w[j] = w[j - 1];
          id[j] = id[j - 1];
        }
        w[j] = v;
        id[j] = i;
      }
    } else {
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t l, int32_t m) {
        return better(p[static_cast<size_t>(l)], l, p[static_cast<size_t>(m)], m);
      });
      for (int64_t j = 0; j < k; ++j) {
        w[j] = p[static_cast<size_t>(order[static_cast<size_t>(j)])];
        id[j] = order[static_cast<size_t>(j)];
      }
    }
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// gating_output [T, E] fp32 -> topk_weights [T, k] fp32, topk_ids [T, k] int32.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "moe_topk_gating_softmax");
  const DLTensor* g = ts.input("gating_output", kF32, 2);
  const DLTensor* w = ts.output("topk_weights", kF32, 2);
  const DLTensor* id = ts.output("topk_ids", kI32, 2);
  ts.same_dims(w, id);
  if (!ts.ok()) return ts.failed();
  Args a{static_cast<const float*>(g->data), static_cast<float*>(w->data),
         static_cast<int32_t*>(id->data), g->shape[1], w->shape[1],
         atrex_param_int(launch, "num_expert_groups", 0), atrex_param_int(launch, "topk_group", 0)};
  const int64_t rows = g->shape[0];
  if (w->shape[0] != rows || a.k < 1 || a.k > a.experts || a.experts > 0x7fffffff)
    return fail("moe_topk_gating_softmax: topk_weights must be [T, k], 1 <= k <= num_experts");
  if (a.groups > 0 && a.topk_group > 0 &&
      (a.experts % a.groups != 0 || a.groups > 64 || a.topk_group > a.groups))
    return fail("moe_topk_gating_softmax: grouped routing needs E %% groups == 0, <= 64 groups");
  if (!(a.groups > 0 && a.topk_group > 0)) a.groups = 0;
  parallel_rows(rows, a.experts, THREADS, int64_t{MIN_KELEMS} * 1024,
                [&](int64_t begin, int64_t end) { do_rows(a, begin, end); });
  return 0;
}
