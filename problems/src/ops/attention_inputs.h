// Structured inputs and shape resolution of group "attention": what the Atrex input.py files
// build deterministically (cu_seqlens, block tables, sequence lengths, slot mappings, zeroed
// caches), and the dims that are formulas over the parameters. Host-only (defs side).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "atrex/problems/operator.h"
#include "generate.h"

namespace atrex::problems::ops::attention_inputs {

// seq_lens of a shape: each entry >= 0, at least one token in all.
struct SeqLens {
  int64_t count = 0, sum = 0, max = 0;
};
inline Result<SeqLens> seq_lens_of(const ResolvedShape& s) {
  const Json& lens = s.params.at("seq_lens");
  SeqLens r;
  for (const Json& v : lens) {
    const int64_t l = v.get<int64_t>();
    if (l < 0) return invalid_input(fmt::format("parameter \"seq_lens\": entry {} is negative", l));
    r.count += 1;
    r.sum += l;
    r.max = l > r.max ? l : r.max;
  }
  if (r.sum < 1) return invalid_input("parameter \"seq_lens\": needs at least one token");
  return r;
}
inline int64_t seq_len(const ResolvedShape& s, size_t i) {
  return s.params.at("seq_lens")[i].get<int64_t>();
}
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// [0, l0, l0 + l1, ...]: input.py's cu_seqlens (both q and k for attention_forward).
inline void cu_seqlens(const ResolvedShape& s, size_t index, uint64_t /*seed*/, void* data) {
  auto* out = static_cast<int32_t*>(data);
  out[0] = 0;
  for (int64_t i = 0; i + 1 < s.inputs[index].dims[0]; ++i)
    out[i + 1] = out[i] + static_cast<int32_t>(seq_len(s, i));
}

// seqused_k = seq_lens (every query sequence attends its own tokens: q_len == kv_len).
inline void seq_lens_copy(const ResolvedShape& s, size_t index, uint64_t /*seed*/, void* data) {
  auto* out = static_cast<int32_t*>(data);
  for (int64_t i = 0; i < s.inputs[index].dims[0]; ++i)
    out[i] = static_cast<int32_t>(seq_len(s, i));
}

// seq_lens = ctx_len for every sequence (paged_attention_decode, mla_decode_attention).
inline void seq_lens_ctx_len(const ResolvedShape& s, size_t index, uint64_t /*seed*/, void* data) {
  auto* out = static_cast<int32_t*>(data);
  for (int64_t i = 0; i < s.inputs[index].dims[0]; ++i)
    out[i] = static_cast<int32_t>(s.int_param("ctx_len"));
}

// unified_attention block_table [num_seqs, max_num_blocks]: sequence i owns blocks
// i * max_num_blocks + b for the ceil(len / bs) blocks it needs; the rest of the row is 0.
inline void unified_block_table(const ResolvedShape& s, size_t index, uint64_t /*seed*/,
                                void* data) {
  auto* out = static_cast<int32_t*>(data);
  const int64_t rows = s.inputs[index].dims[0], cols = s.inputs[index].dims[1];
  const int64_t bs = s.int_param("block_size");
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t needed = ceil_div(seq_len(s, i), bs);
    for (int64_t b = 0; b < cols; ++b)
      out[i * cols + b] = b < needed ? static_cast<int32_t>(i * cols + b) : 0;
  }
}

// paged_attention_decode block_tables [num_seqs, max_blocks]: block_tables[i, j] = i * max_blocks +
// j.
inline void paged_block_tables(const ResolvedShape& s, size_t index, uint64_t /*seed*/,
                               void* data) {
  auto* out = static_cast<int32_t*>(data);
  const int64_t n = s.inputs[index].numel();
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(i);
}

// slot_mapping = arange(num_tokens) (int64).
inline void arange_i64(const ResolvedShape& s, size_t index, uint64_t /*seed*/, void* data) {
  auto* out = static_cast<int64_t*>(data);
  for (int64_t i = 0; i < s.inputs[index].numel(); ++i) out[i] = i;
}

// torch.zeros: +0.0 everywhere.
inline void zeros(const ResolvedShape& s, size_t index, uint64_t /*seed*/, void* data) {
  std::memset(data, 0, s.inputs[index].bytes());
}

// randn in the dtype the shape resolved to (paged_attention_decode's `dtype` parameter picks
// bf16 or fp16; TensorSpec::distribution would draw in the spec's fixed dtype).
inline void randn_resolved_dtype(const ResolvedShape& s, size_t index, uint64_t seed, void* data) {
  GenerateFn f{
      Distribution::kNormal, 1.0f, 0.0f, 0.0, 1.0, gen_dtype(s.inputs[index].dtype), data, seed,
      input_stream_id(index)};
  parallel_for_cpu(s.inputs[index].numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i);
  });
}

}  // namespace atrex::problems::ops::attention_inputs
