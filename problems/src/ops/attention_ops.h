// Attention references of group "attention" (alibaba/atrex-bench data/<op>/reference.py, read
// 2026-11-30): the shared softmax-attention row and the prefill operators attention_forward and
// unified_attention. Decode operators are in attention_decode_ops.h, the KV-cache write in
// attention_cache_ops.h.
//
// Every reference computes F.scaled_dot_product_attention on `.float()` copies of bf16/fp16
// tensors: scores q·k scaled by 1/sqrt(E) (E = q's last dim), softmax and the weighted sum of
// values in fp32, rounded once to the output dtype. One thread computes one (query row, head):
// a single pass over the keys in tiles with a running max (flash attention's online softmax).
// The thread index puts the query token fastest, so the threads of a warp read the same key
// row (a broadcast) and the CUDA reference of the largest released shape (attention_forward
// with 65,556 tokens, ~2e13 FLOPs) stays in seconds on an H200.
#pragma once

#include <cmath>
#include <cstdint>

#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"

#if defined(__CUDA_ARCH__)
#define ATREX_ATTN_UNROLL _Pragma("unroll")
#else
#define ATREX_ATTN_UNROLL
#endif

namespace atrex::problems::ops {

// Largest head dims the references hold in per-thread arrays (resolve hooks enforce them).
inline constexpr int kAttnMaxHeadDim = 256;
inline constexpr int kMlaMaxQkDim = 576;  // kv_lora_rank 512 + rope 64 (DeepSeek-V3)
inline constexpr int kMlaMaxVDim = 512;

ATREX_HD float load_half(const uint16_t* p, int64_t i, bool fp16) {
  return fp16 ? num::fp16_to_float(p[i]) : num::bf16_to_float(p[i]);
}
ATREX_HD uint16_t store_half(float f, bool fp16) {
  return fp16 ? num::float_to_fp16(f) : num::float_to_bf16(f);
}

// o[0, dv) = softmax(scale * q·K^T) V over keys j < n_keys of `src` (fp32 throughout, like
// torch's fp32 SDPA). Src: row(j) locates key j; key(row, i) / value(row, i) read element i as
// float. n_keys == 0 gives zeros (torch's matmul over an empty key dim).
template <class Src>
ATREX_HD void attend_row(const Src& src, const float* q, int dk, int dv, int64_t n_keys,
                         float scale, float* o) {
  constexpr int kTile = 16;
  using Row = decltype(src.row(0));
  for (int i = 0; i < dv; ++i) o[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t j0 = 0; j0 < n_keys; j0 += kTile) {
    const int nt = n_keys - j0 < kTile ? static_cast<int>(n_keys - j0) : kTile;
    float p[kTile] = {};
    Row rows[kTile] = {};
    ATREX_ATTN_UNROLL
    for (int t = 0; t < kTile; ++t) {
      if (t < nt) rows[t] = src.row(j0 + t);
    }
    // Element-outer so q[i] is read once per tile; each dot product still sums i in order.
    for (int i = 0; i < dk; ++i) {
      const float qi = q[i];
      ATREX_ATTN_UNROLL
      for (int t = 0; t < kTile; ++t) {
        if (t < nt) p[t] += qi * src.key(rows[t], i);
      }
    }
    float tile_max = -INFINITY;
    ATREX_ATTN_UNROLL
    for (int t = 0; t < kTile; ++t) {
      if (t < nt) {
        p[t] *= scale;
        tile_max = fmaxf(tile_max, p[t]);
      }
    }
    const float m_new = fmaxf(m, tile_max);
    const float alpha = expf(m - m_new);  // 0 on the first tile (m = -inf)
    l *= alpha;
    ATREX_ATTN_UNROLL
    for (int t = 0; t < kTile; ++t) {
      if (t < nt) {
        p[t] = expf(p[t] - m_new);
        l += p[t];
      }
    }
    for (int i = 0; i < dv; ++i) {
      float a = o[i] * alpha;
      ATREX_ATTN_UNROLL
      for (int t = 0; t < kTile; ++t) {
        if (t < nt) a += p[t] * src.value(rows[t], i);
      }
      o[i] = a;
    }
    m = m_new;
  }
  if (n_keys > 0) {
    for (int i = 0; i < dv; ++i) o[i] /= l;
  }
}

// Index s of the segment [cu[s], cu[s+1]) holding token t (largest s with cu[s] <= t, so empty
// segments are skipped), or -1 when t lies outside [cu[0], cu[n]).
ATREX_HD int64_t find_segment(const int32_t* cu, int64_t n, int64_t t) {
  if (n <= 0 || t < cu[0] || t >= cu[n]) return -1;
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (cu[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Rows of a [tokens, heads, dim] tensor pair (k, v), or of a flattened paged cache: row r is
// the element offset of (token, head, 0).
struct RowMajorKv {
  const uint16_t* k;
  const uint16_t* v;
  ATREX_HD float key(int64_t r, int i) const { return num::bf16_to_float(k[r + i]); }
  ATREX_HD float value(int64_t r, int i) const { return num::bf16_to_float(v[r + i]); }
};

// attention_forward: keys start..start+n of k/v [T, H, d], head h.
struct VarlenKv : RowMajorKv {
  int64_t start, heads, dim, head;
  ATREX_HD int64_t row(int64_t j) const { return ((start + j) * heads + head) * dim; }
};

// unified_attention: key j of sequence s sits at slot block_table[s, j / bs] * bs + j % bs of
// the cache [num_blocks, bs, Hkv, d].
struct BlockTableKv : RowMajorKv {
  const int32_t* table_row;
  int64_t block_size, kv_heads, dim, kv_head;
  ATREX_HD int64_t row(int64_t j) const {
    const int64_t slot =
        static_cast<int64_t>(table_row[j / block_size]) * block_size + j % block_size;
    return (slot * kv_heads + kv_head) * dim;
  }
};

// q, k, v: [T, H, d] bf16 packed by cu_seqlens; out[t, h] = bf16(SDPA over the keys of t's
// sequence, not causal). Thread index = h * T + t.
struct AttentionForwardRow {
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  const int32_t* cu_q;
  const int32_t* cu_k;
  uint16_t* out;
  int64_t tokens, num_seqs, heads, dim;
  ATREX_HD void operator()(int64_t idx) const {
    const int64_t h = idx / tokens, t = idx % tokens;
    const int64_t s = find_segment(cu_q, num_seqs, t);
    if (s < 0) return;  // outside every sequence: torch.empty_like leaves it undefined
    float qf[kAttnMaxHeadDim], o[kAttnMaxHeadDim];
    const int64_t base = (t * heads + h) * dim;
    for (int64_t i = 0; i < dim; ++i) qf[i] = num::bf16_to_float(q[base + i]);
    VarlenKv src{{k, v}, cu_k[s], heads, dim, h};
    const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(dim)));
    attend_row(src, qf, static_cast<int>(dim), static_cast<int>(dim), cu_k[s + 1] - cu_k[s], scale,
               o);
    for (int64_t i = 0; i < dim; ++i) out[base + i] = num::float_to_bf16(o[i]);
  }
};

// q: [T, Hq, d]; caches [num_blocks, bs, Hkv, d]; query head h reads kv head h / (Hq / Hkv)
// (repeat_interleave). Causal (key j <= query position) exactly when the sequence's q_len
// equals its kv_len, as the reference's `is_causal = (q_len == kv_len)`. Thread = h * T + t.
struct UnifiedAttentionRow {
  const uint16_t* q;
  const uint16_t* k_cache;
  const uint16_t* v_cache;
  const int32_t* cu_q;
  const int32_t* seqused_k;
  const int32_t* block_table;
  uint16_t* out;
  int64_t tokens, num_seqs, q_heads, kv_heads, dim, block_size, max_blocks;
  ATREX_HD void operator()(int64_t idx) const {
    const int64_t h = idx / tokens, t = idx % tokens;
    const int64_t s = find_segment(cu_q, num_seqs, t);
    if (s < 0) return;  // outside every sequence: torch.empty leaves it undefined
    const int64_t q_len = cu_q[s + 1] - cu_q[s], kv_len = seqused_k[s];
    const int64_t n_keys = q_len == kv_len ? t - cu_q[s] + 1 : kv_len;
    float qf[kAttnMaxHeadDim], o[kAttnMaxHeadDim];
    const int64_t base = (t * q_heads + h) * dim;
    for (int64_t i = 0; i < dim; ++i) qf[i] = num::bf16_to_float(q[base + i]);
    BlockTableKv src{
        {k_cache, v_cache},      block_table + s * max_blocks, block_size, kv_heads, dim,
        h / (q_heads / kv_heads)};
    const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(dim)));
    attend_row(src, qf, static_cast<int>(dim), static_cast<int>(dim), n_keys, scale, o);
    for (int64_t i = 0; i < dim; ++i) out[base + i] = num::float_to_bf16(o[i]);
  }
};

template <class Exec>
void attention_forward_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                                 void* const* out) {
  const auto& q = s.inputs[0];
  AttentionForwardRow f{static_cast<const uint16_t*>(in[0]),
                        static_cast<const uint16_t*>(in[1]),
                        static_cast<const uint16_t*>(in[2]),
                        static_cast<const int32_t*>(in[3]),
                        static_cast<const int32_t*>(in[4]),
                        static_cast<uint16_t*>(out[0]),
                        q.dims[0],
                        s.inputs[3].dims[0] - 1,
                        q.dims[1],
                        q.dims[2]};
  ex.for_each(q.dims[0] * q.dims[1], f);
}

template <class Exec>
void unified_attention_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                                 void* const* out) {
  const auto& q = s.inputs[0];
  const auto& cache = s.inputs[1];
  UnifiedAttentionRow f{static_cast<const uint16_t*>(in[0]),
                        static_cast<const uint16_t*>(in[1]),
                        static_cast<const uint16_t*>(in[2]),
                        static_cast<const int32_t*>(in[3]),
                        static_cast<const int32_t*>(in[4]),
                        static_cast<const int32_t*>(in[5]),
                        static_cast<uint16_t*>(out[0]),
                        q.dims[0],
                        s.inputs[4].dims[0],
                        q.dims[1],
                        cache.dims[2],
                        q.dims[2],
                        cache.dims[1],
                        s.inputs[5].dims[1]};
  ex.for_each(q.dims[0] * q.dims[1], f);
}

}  // namespace atrex::problems::ops
