// References of the integer routing operators moe_align_block_size and moe_count_and_sort
// (alibaba/atrex-bench data/<op>/reference.py, read 2026-12-01). Both group the flattened
// top-k expert ids by expert, ascending expert, and within an expert by ascending flat index
// (torch.nonzero order). Work is split per expert; the prefix over experts is one thread.
#pragma once

#include <cstdint>

#include "atrex/problems/operator.h"
#include "moe_gemm_common.h"

namespace atrex::problems::ops {

// moe_align_block_size, pass 1: padded[e + 1] = count of e rounded up to block_size (0 stays 0:
// an expert without tokens gets no block).
struct AlignCount {
  const int32_t* ids;
  int64_t pairs;
  int64_t block;
  int64_t* padded;
  ATREX_HD void operator()(int64_t e) const {
    int64_t c = 0;
    for (int64_t i = 0; i < pairs; ++i) c += ids[i] == e;
    padded[e + 1] = (c + block - 1) / block * block;
  }
};

// Pass 2 (one thread): exclusive offsets of the padded segments and their total.
struct AlignPrefix {
  int64_t experts;
  int64_t* padded;
  int32_t* num_tokens_post_pad;
  ATREX_HD void operator()(int64_t) const {
    padded[0] = 0;
    for (int64_t e = 0; e < experts; ++e) padded[e + 1] += padded[e];
    num_tokens_post_pad[0] = static_cast<int32_t>(padded[experts]);
  }
};

// Pass 3, per expert: its flat indices ascending, then the padding value `pairs` (= T*k, an
// index past every real pair) up to the segment end, and one expert_ids entry per block.
struct AlignFill {
  const int32_t* ids;
  int64_t pairs;
  int64_t block;
  const int64_t* padded;
  int32_t* sorted_token_ids;
  int32_t* expert_ids;
  ATREX_HD void operator()(int64_t e) const {
    int64_t s = padded[e];
    for (int64_t i = 0; i < pairs; ++i) {
      if (ids[i] == e) sorted_token_ids[s++] = static_cast<int32_t>(i);
    }
    for (; s < padded[e + 1]; ++s) sorted_token_ids[s] = static_cast<int32_t>(pairs);
    for (int64_t b = padded[e] / block; b < padded[e + 1] / block; ++b)
      expert_ids[b] = static_cast<int32_t>(e);
  }
};

// Pass 4, per element past the valid prefix: sorted_token_ids = pairs, expert_ids = -1. These
// tails are not compared (their length is data-dependent); they are written so the reference's
// buffers hold no poison.
struct AlignTail {
  int64_t pairs;
  int64_t block;
  int64_t sorted_len;
  int64_t blocks_len;
  const int32_t* num_tokens_post_pad;
  int32_t* sorted_token_ids;
  int32_t* expert_ids;
  ATREX_HD void operator()(int64_t i) const {
    const int64_t valid = num_tokens_post_pad[0];
    if (i >= valid && i < sorted_len) sorted_token_ids[i] = static_cast<int32_t>(pairs);
    if (i >= valid / block && i < blocks_len) expert_ids[i] = -1;
  }
};

// topk_ids [T, k] int32 -> sorted_token_ids [T*k + E*(block_size-1)], expert_ids
// [ceil(that / block_size)], num_tokens_post_pad [1] (vLLM's allocation sizes).
template <class Exec>
void moe_align_block_size_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                                    void* const* out) {
  const auto* ids = static_cast<const int32_t*>(in[0]);
  const int64_t pairs = s.inputs[0].numel(), experts = s.int_param("num_experts"),
                block = s.int_param("block_size");
  auto* sorted = static_cast<int32_t*>(out[0]);
  auto* expert_ids = static_cast<int32_t*>(out[1]);
  auto* post_pad = static_cast<int32_t*>(out[2]);
  ScratchBuffer<Exec> padded(ex, static_cast<size_t>(experts + 1) * sizeof(int64_t));
  if (!padded) return;
  ex.for_each(experts, AlignCount{ids, pairs, block, padded.template as<int64_t>()});
  ex.for_each(1, AlignPrefix{experts, padded.template as<int64_t>(), post_pad});
  ex.for_each(experts,
              AlignFill{ids, pairs, block, padded.template as<int64_t>(), sorted, expert_ids});
  const int64_t sorted_len = s.outputs[0].numel(), blocks_len = s.outputs[1].numel();
  ex.for_each(sorted_len,
              AlignTail{pairs, block, sorted_len, blocks_len, post_pad, sorted, expert_ids});
}

// moe_count_and_sort, pass 1 per expert: expert_token_counts[e].
struct CountExperts {
  const int32_t* ids;
  int64_t pairs;
  int32_t* counts;
  ATREX_HD void operator()(int64_t e) const {
    int64_t c = 0;
    for (int64_t i = 0; i < pairs; ++i) c += ids[i] == e;
    counts[e] = static_cast<int32_t>(c);
  }
};
// Pass 2 (one thread): cumsum [E + 1] with cumsum[0] = 0.
struct CountPrefix {
  int64_t experts;
  const int32_t* counts;
  int32_t* cumsum;
  ATREX_HD void operator()(int64_t) const {
    cumsum[0] = 0;
    for (int64_t e = 0; e < experts; ++e) cumsum[e + 1] = cumsum[e] + counts[e];
  }
};
// Pass 3 per expert: its flat indices ascending at [cumsum[e], cumsum[e + 1]).
struct CountFill {
  const int32_t* ids;
  int64_t pairs;
  const int32_t* cumsum;
  int32_t* sorted_token_ids;
  ATREX_HD void operator()(int64_t e) const {
    int64_t s = cumsum[e];
    for (int64_t i = 0; i < pairs; ++i) {
      if (ids[i] == e) sorted_token_ids[s++] = static_cast<int32_t>(i);
    }
  }
};

// topk_ids [T, k] -> sorted_token_ids [T*k], expert_token_counts [E], cumsum [E + 1]. Ids
// outside [0, E) would be dropped by the reference (bincount(...)[:E]); the generator never
// draws them, and sorted_token_ids is sized T*k.
template <class Exec>
void moe_count_and_sort_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                                  void* const* out) {
  const auto* ids = static_cast<const int32_t*>(in[0]);
  const int64_t pairs = s.inputs[0].numel(), experts = s.int_param("num_experts");
  auto* sorted = static_cast<int32_t*>(out[0]);
  auto* counts = static_cast<int32_t*>(out[1]);
  auto* cumsum = static_cast<int32_t*>(out[2]);
  ex.for_each(experts, CountExperts{ids, pairs, counts});
  ex.for_each(1, CountPrefix{experts, counts, cumsum});
  ex.for_each(experts, CountFill{ids, pairs, cumsum, sorted});
}

}  // namespace atrex::problems::ops
