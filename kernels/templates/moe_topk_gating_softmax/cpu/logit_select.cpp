// atrex-template: logit_select
// atrex-description: top_k chosen on the logits (softmax is monotone) in one pass with the row maximum, a sorted list of k rejecting most entries with one compare; the fp64 sum of exps a separate branch-free pass (vectorised polynomial exp when FAST_EXP=1, 8 fp64 partial sums); only the k winners exponentiated and divided, no probability buffer; group maxima compared as reference-computed probabilities; rows split over up to THREADS std::threads (1: serial; more from 64 thousand scores per thread)
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: FAST_EXP = 1 | 0, 1
#ifndef THREADS
#define THREADS 2
#endif
#ifndef FAST_EXP
#define FAST_EXP 1
#endif
#define MIN_KELEMS 64

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

// exp(x) without libm (vectorisable): x = n ln2 + r, |r| <= ln2 / 2, degree-7 Taylor for e^r
// (relative error below 3e-9), 2^n through the exponent bits; x <= 0 here, clamped at -87
// (e^-87 is below every sum's rounding).
inline float exp_poly(float x) {
  x = x < -87.f ? -87.f : x;
  const float n = __builtin_nearbyintf(x * 1.44269504088896341f);
  const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;
  const float p =
      1.f + r * (1.f + r * (0.5f + r * (1.f / 6 + r * (1.f / 24 + r * (1.f / 120 + r * (1.f / 720 +
                                                                                    r * (1.f / 5040)))))));
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

inline bool better(float a, int32_t ia, float b, int32_t ib) {
  return a > b || (a == b && ia < ib);
}

// Rows [begin, end). Softmax is monotone, so the top_k is chosen on the logits themselves in the
// same pass that finds the row maximum (a sorted list of k; an entry not above the current k-th
// key is rejected with one compare), and only the k winners are exponentiated and divided: no
// probability buffer. The fp64 sum of exps is a second, branch-free pass (polynomial exp when
// FAST_EXP=1, 64 exps at a time into a buffer, 8 fp64 partial sums). Group-limited routing compares the group maxima as probabilities computed the
// reference's way (so equal-scored groups tie-break as it does); experts of dropped groups get
// the key -inf and, if they are needed to fill k, the weight 0, smallest ids first.
void do_rows(const Args& a, int64_t begin, int64_t end) {
  const int64_t e = a.experts, k = a.k;
  constexpr float kNegInf = -__builtin_inff();
  std::vector<float> key(static_cast<size_t>(k));
  std::vector<float> gmax(static_cast<size_t>(a.groups > 0 ? a.groups : 1));
  for (int64_t r = begin; r < end; ++r) {
    const float* x = a.g + r * e;
    float* w = a.w + r * k;
    int32_t* id = a.ids + r * k;
    float mx = kNegInf;
    for (int64_t i = 0; i < e; ++i) mx = x[i] > mx ? x[i] : mx;
    // Exps of 64 scores at a time into a stack buffer (a vectorised loop with FAST_EXP=1), then
    // summed into 8 independent fp64 partial sums (fp64 keeps the order's effect below 1e-15).
    double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float ex[64];
    for (int64_t i0 = 0; i0 < e; i0 += 64) {
      const int64_t m = e - i0 < 64 ? e - i0 : 64;
      if (FAST_EXP) {
        for (int64_t i = 0; i < m; ++i) ex[i] = exp_poly(x[i0 + i] - mx);
      } else {
        for (int64_t i = 0; i < m; ++i) ex[i] = std::exp(x[i0 + i] - mx);
      }
      for (int64_t i = m; i < 64; ++i) ex[i] = 0.0f;
      for (int64_t i = 0; i < 64; i += 8)
        for (int u = 0; u < 8; ++u) part[u] += static_cast<double>(ex[i + u]);
    }
    const double sum = ((part[0] + part[1]) + (part[2] + part[3])) +
                       ((part[4] + part[5]) + (part[6] + part[7]));
    const float fs = static_cast<float>(sum);
    uint64_t keep = ~uint64_t{0};
    int64_t size = e;
    if (a.groups > 0) {
      size = e / a.groups;
      for (int64_t q = 0; q < a.groups; ++q) {
        float m = kNegInf;
        for (int64_t i = q * size; i < (q + 1) * size; ++i) m = x[i] > m ? x[i] : m;
        gmax[static_cast<size_t>(q)] = std::exp(m - mx) / fs;
      }
      keep = 0;
      for (int64_t t = 0; t < a.topk_group; ++t) {
        int64_t bq = -1;
        for (int64_t q = 0; q < a.groups; ++q)
          if (!(keep >> q & 1u) &&
              (bq < 0 || gmax[static_cast<size_t>(q)] > gmax[static_cast<size_t>(bq)]))
            bq = q;
        keep |= uint64_t{1} << bq;
      }
    }
    int64_t n = 0;
    for (int32_t i = 0; i < static_cast<int32_t>(e); ++i) {
      const float v = (a.groups == 0 || (keep >> (i / size) & 1u)) ? x[i] : kNegInf;
      if (n == k && !better(v, i, key[static_cast<size_t>(k - 1)], id[k - 1])) continue;
      int64_t j = n < k ? n++ : k - 1;
      for (; j > 0 && better(v, i, key[static_cast<size_t>(j - 1)], id[j - 1]); --j) {
        key[static_cast<size_t>(j)] = key[static_cast<size_t>(j - 1)];
        id[j] = id[j - 1];
      }
      key[static_cast<size_t>(j)] = v;
      id[j] = i;
    }
    for (int64_t j = 0; j < k; ++j) {
      const float v = key[static_cast<size_t>(j)];
      w[j] = v == kNegInf ? 0.0f : std::exp(v - mx) / fs;
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
