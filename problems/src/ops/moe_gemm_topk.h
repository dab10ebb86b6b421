// References of moe_topk_gating_softmax and topk_filter (alibaba/atrex-bench
// data/<op>/reference.py, read 2026-12-01). One thread per row; no per-row arrays, so both run
// unchanged on the host and the device (selection re-scans the row instead of sorting it).
#pragma once

#include <cmath>
#include <cstdint>

#include "atrex/problems/operator.h"
#include "moe_gemm_common.h"

namespace atrex::problems::ops {

// Softmax scores of one gating row, with the optional group-limited masking of the reference:
// groups ranked by their best score, the top `topk_group` kept, every other expert scored 0.
struct GatingScores {
  const float* x;  // [E] logits
  int64_t experts;
  int64_t groups;      // num_expert_groups (0: no grouping)
  int64_t topk_group;  // groups kept
  float max = 0;
  float sum = 0;
  uint64_t kept = ~0ull;  // bit g: group g survives (groups <= 64, checked by resolve)

  // torch.softmax on fp32: exp(x - max) / sum, exps summed in fp64 here, result rounded to fp32.
  ATREX_HD void init() {
    max = x[0];
    for (int64_t e = 1; e < experts; ++e) max = x[e] > max ? x[e] : max;
    double s = 0;
    for (int64_t e = 0; e < experts; ++e) s += expf(x[e] - max);
    sum = static_cast<float>(s);
    if (groups > 0 && topk_group > 0) {
      kept = 0;
      for (int64_t g = 0; g < groups; ++g) {
        const float mine = group_score(g);
        int64_t rank = 0;  // groups ahead of g: larger score, or equal score and lower index
        for (int64_t h = 0; h < groups; ++h) {
          const float other = group_score(h);
          rank += other > mine || (other == mine && h < g);
        }
        if (rank < topk_group) kept |= 1ull << g;
      }
    }
  }
  ATREX_HD float softmax(int64_t e) const { return expf(x[e] - max) / sum; }
  ATREX_HD float group_score(int64_t g) const {
    const int64_t size = experts / groups;
    float best = softmax(g * size);
    for (int64_t e = g * size + 1; e < (g + 1) * size; ++e)
      best = softmax(e) > best ? softmax(e) : best;
    return best;
  }
  ATREX_HD float score(int64_t e) const {
    if (groups > 0 && topk_group > 0 && !((kept >> (e / (experts / groups))) & 1ull)) return 0.0f;
    return softmax(e);
  }
};

// torch.topk(scores, k): descending scores; equal scores in ascending expert index (torch leaves
// that order unspecified; the comparison of topk_ids accepts any order among near-ties).
struct TopkGatingRow {
  const float* gating;
  float* weights;
  int32_t* ids;
  int64_t experts;
  int64_t top_k;
  int64_t groups;
  int64_t topk_group;
  ATREX_HD void operator()(int64_t row) const {
    GatingScores sc{gating + row * experts, experts, groups, topk_group};
    sc.init();
    float prev = INFINITY;
    int64_t prev_e = -1;
    for (int64_t j = 0; j < top_k; ++j) {
      int64_t best = -1;
      float best_v = 0;
      for (int64_t e = 0; e < experts; ++e) {
        const float v = sc.score(e);
        const bool after_prev = v < prev || (v == prev && e > prev_e);
        if (after_prev && (best < 0 || v > best_v)) {
          best = e;
          best_v = v;
        }
      }
      weights[row * top_k + j] = best_v;
      ids[row * top_k + j] = static_cast<int32_t>(best);
      prev = best_v;
      prev_e = best;
    }
  }
};

template <class Exec>
void moe_topk_gating_softmax_reference(const Exec& ex, const ResolvedShape& s,
                                       const void* const* in, void* const* out) {
  TopkGatingRow f{static_cast<const float*>(in[0]),
                  static_cast<float*>(out[0]),
                  static_cast<int32_t*>(out[1]),
                  s.int_param("num_experts"),
                  s.int_param("top_k"),
                  s.int_param("num_expert_groups"),
                  s.int_param("topk_group")};
  ex.for_each(s.int_param("token_count"), f);
}

// A float's bits mapped so that unsigned order is float order (-0 just below +0; no NaN here).
ATREX_HD uint32_t ordered_key(float f) {
  const uint32_t u = num::float_bits(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// out = logits where logits >= (k-th largest of the row) else -inf; k = min(top_k, V). The
// threshold is found bit by bit: the largest key t with at least k elements >= t (32 scans).
// Elements equal to the threshold are all kept, as `logits < threshold` keeps them.
struct TopkFilterRow {
  const float* logits;
  float* out;
  int64_t vocab;
  int64_t k;
  ATREX_HD void operator()(int64_t row) const {
    const float* x = logits + row * vocab;
    uint32_t t = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = t | (1u << bit);
      int64_t n = 0;
      for (int64_t i = 0; i < vocab; ++i) n += ordered_key(x[i]) >= cand;
      if (n >= k) t = cand;
    }
    const float threshold = num::bits_float((t & 0x80000000u) ? (t & 0x7fffffffu) : ~t);
    for (int64_t i = 0; i < vocab; ++i) out[row * vocab + i] = x[i] < threshold ? -INFINITY : x[i];
  }
};

template <class Exec>
void topk_filter_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                           void* const* out) {
  const int64_t vocab = s.int_param("hidden_size");
  const int64_t k = s.int_param("top_k") < vocab ? s.int_param("top_k") : vocab;
  ex.for_each(s.int_param("seq_len"), TopkFilterRow{static_cast<const float*>(in[0]),
                                                    static_cast<float*>(out[0]), vocab, k});
}

}  // namespace atrex::problems::ops
