// Decode attention references: paged_attention_decode and mla_decode_attention
// (alibaba/atrex-bench data/<op>/reference.py, read 2026-11-30). One query row per sequence;
// one thread per (sequence, head), the head fastest so the heads sharing a KV row (GQA, MLA's
// single latent head) read it together.
#pragma once

#include <cmath>
#include <cstdint>

#include "attention_ops.h"

namespace atrex::problems::ops {

// The legacy vLLM/ROCm paged layout: k_cache [num_blocks, Hkv, d/x, bs, x] with x = 8
// (16 bytes of a 2-byte dtype), v_cache [num_blocks, Hkv, d, bs]. Key j of a sequence sits at
// position j % bs of block table_row[j / bs]. Both caches hold d * bs elements per (block, head).
struct PagedKv {
  struct Row {
    int64_t k;  // offset of (block, head, 0, pos, 0) in k_cache
    int64_t v;  // offset of (block, head, 0, pos) in v_cache
  };
  const uint16_t* k;
  const uint16_t* v;
  const int32_t* table_row;
  int64_t block_size, kv_heads, dim, kv_head;
  bool fp16;
  ATREX_HD Row row(int64_t j) const {
    const int64_t block = table_row[j / block_size], pos = j % block_size;
    const int64_t base = (block * kv_heads + kv_head) * dim * block_size;
    return Row{base + pos * 8, base + pos};
  }
  ATREX_HD float key(const Row& r, int i) const {
    return load_half(k, r.k + (i / 8) * block_size * 8 + i % 8, fp16);
  }
  ATREX_HD float value(const Row& r, int i) const {
    return load_half(v, r.v + static_cast<int64_t>(i) * block_size, fp16);
  }
};

// query: [B, Hq, d]; out[s, h] = SDPA of query[s, h] over the seq_lens[s] keys of sequence s
// (not causal), rounded to the query dtype (bf16 or fp16); zeros where seq_lens[s] <= 0
// (torch.zeros_like). Query head h reads kv head h / (Hq / Hkv).
struct PagedAttentionDecodeRow {
  const uint16_t* query;
  const uint16_t* k_cache;
  const uint16_t* v_cache;
  const int32_t* block_tables;
  const int32_t* seq_lens;
  uint16_t* out;
  int64_t q_heads, kv_heads, dim, block_size, max_blocks;
  bool fp16;
  ATREX_HD void operator()(int64_t idx) const {
    const int64_t s = idx / q_heads, h = idx % q_heads;
    const int64_t base = idx * dim;
    int64_t n_keys = seq_lens[s] > 0 ? seq_lens[s] : 0;
    // Longer than the block table row: torch would raise; the reference stays in bounds.
    if (n_keys > max_blocks * block_size) n_keys = max_blocks * block_size;
    float qf[kAttnMaxHeadDim], o[kAttnMaxHeadDim];
    for (int64_t i = 0; i < dim; ++i) qf[i] = load_half(query, base + i, fp16);
    PagedKv src{k_cache,  v_cache, block_tables + s * max_blocks, block_size,
                kv_heads, dim,     h / (q_heads / kv_heads),      fp16};
    const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(dim)));
    attend_row(src, qf, static_cast<int>(dim), static_cast<int>(dim), n_keys, scale, o);
    for (int64_t i = 0; i < dim; ++i) out[base + i] = store_half(o[i], fp16);
  }
};

// Latent rows [total_kv, 1, kv_lora_rank + rope]: keys are whole rows, values their first
// kv_lora_rank elements.
struct LatentKv {
  const uint16_t* kv;
  int64_t start, qk_dim;
  ATREX_HD int64_t row(int64_t j) const { return (start + j) * qk_dim; }
  ATREX_HD float key(int64_t r, int i) const { return num::bf16_to_float(kv[r + i]); }
  ATREX_HD float value(int64_t r, int i) const { return num::bf16_to_float(kv[r + i]); }
};

// q: [B, H, r + rope]; sequence b owns kv rows [sum(seq_lens[:b]), + seq_lens[b]) shared by all
// heads; out[b, h] = bf16(SDPA with scale 1/sqrt(r + rope), values = the rows' first r dims).
struct MlaDecodeRow {
  const uint16_t* q;
  const uint16_t* kv_cache;
  const int32_t* seq_lens;
  uint16_t* out;
  int64_t heads, qk_dim, v_dim;
  ATREX_HD void operator()(int64_t idx) const {
    const int64_t b = idx / heads;
    int64_t start = 0;
    for (int64_t i = 0; i < b; ++i) start += seq_lens[i];
    float qf[kMlaMaxQkDim], o[kMlaMaxVDim];
    for (int64_t i = 0; i < qk_dim; ++i) qf[i] = num::bf16_to_float(q[idx * qk_dim + i]);
    LatentKv src{kv_cache, start, qk_dim};
    const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(qk_dim)));
    const int64_t n_keys = seq_lens[b] > 0 ? seq_lens[b] : 0;
    attend_row(src, qf, static_cast<int>(qk_dim), static_cast<int>(v_dim), n_keys, scale, o);
    for (int64_t i = 0; i < v_dim; ++i) out[idx * v_dim + i] = num::float_to_bf16(o[i]);
  }
};

template <class Exec>
void paged_attention_decode_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                                      void* const* out) {
  const auto& query = s.inputs[0];
  const auto& v_cache = s.inputs[2];
  PagedAttentionDecodeRow f{static_cast<const uint16_t*>(in[0]),
                            static_cast<const uint16_t*>(in[1]),
                            static_cast<const uint16_t*>(in[2]),
                            static_cast<const int32_t*>(in[3]),
                            static_cast<const int32_t*>(in[4]),
                            static_cast<uint16_t*>(out[0]),
                            query.dims[1],
                            v_cache.dims[1],
                            query.dims[2],
                            v_cache.dims[3],
                            s.inputs[3].dims[1],
                            query.dtype == DType::kF16};
  ex.for_each(query.dims[0] * query.dims[1], f);
}

template <class Exec>
void mla_decode_attention_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                                    void* const* out) {
  const auto& q = s.inputs[0];
  MlaDecodeRow f{static_cast<const uint16_t*>(in[0]),
                 static_cast<const uint16_t*>(in[1]),
                 static_cast<const int32_t*>(in[2]),
                 static_cast<uint16_t*>(out[0]),
                 q.dims[1],
                 q.dims[2],
                 s.outputs[0].dims[2]};
  ex.for_each(q.dims[0] * q.dims[1], f);
}

}  // namespace atrex::problems::ops
