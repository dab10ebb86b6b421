// atrex-template: tiled
// atrex-description: the CPU form of the flash design: work items (sequence, block of Q_BLOCK query tokens, kv head) on up to THREADS std::threads; a KEY_TILE-key tile of the paged cache is gathered through the block table and converted to fp32 once per item and serves every (token, query head) row of the block and the GQA group; online softmax per row (running max, sum, unnormalised accumulator), causal when q_len == seqused_k as the reference, tiles past a block's last position skipped; vectorisable dot and axpy loops over the head dim
// atrex-param: Q_BLOCK = 16 | 1, 4, 16, 64
// atrex-param: KEY_TILE = 32 | 8, 32, 128
// atrex-param: THREADS = 2 | 1, 2, 3, 4
#ifndef Q_BLOCK
#define Q_BLOCK 16
#endif
#ifndef KEY_TILE
#define KEY_TILE 32
#endif
#ifndef THREADS
#define THREADS 2
#endif

#include <cmath>
#include <cstdint>
#include <vector>

#include "atrex/candidate_util.h"

static_assert(Q_BLOCK >= 1 && KEY_TILE >= 1, "Q_BLOCK, KEY_TILE");
static_assert(THREADS >= 1 && THREADS <= 4, "THREADS");

namespace {

using atrex::cand::Tensors;
using atrex::cand::bf16_to_float;
using atrex::cand::fail;
using atrex::cand::float_to_bf16;
using atrex::cand::kBF16;
using atrex::cand::kI32;
using atrex::cand::parallel_rows;

// a . b over n floats with 8 independent partial sums (a single running sum is one serial
// chain the compiler may not reorder without -ffast-math).
float dot8(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int u = 0; u < 8; ++u) acc[u] += a[i + u] * b[i + u];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

struct Problem {
  const uint16_t *q, *k, *v;
  const int32_t *cu_q, *used_k, *table;
  uint16_t* out;
  int64_t seqs, hq, hkv, dim, bs, max_blocks;
};

struct Item {
  int64_t seq, p0, kvh;
};

// Rows (token p0 + i, head kvh * G + g) for i < n_q, as row i * G + g: q, m, l and acc. The
// keys of sequence s: causal (key j <= position) when q_len == seqused_k, else all of them.
void run_item(const Problem& p, const Item& it, std::vector<float>& buf) {
  const int64_t g_n = p.hq / p.hkv, d = p.dim, s = it.seq;
  const int64_t q0 = p.cu_q[s], q_len = p.cu_q[s + 1] - q0, used = p.used_k[s];
  const int64_t n_q = q_len - it.p0 < Q_BLOCK ? q_len - it.p0 : Q_BLOCK;
  int64_t n_kv = used > 0 ? used : 0;
  if (n_kv > p.max_blocks * p.bs) n_kv = p.max_blocks * p.bs;  // stay inside the table row
  const bool causal = q_len == used;
  const int64_t key_end = causal && it.p0 + n_q < n_kv ? it.p0 + n_q : n_kv;
  const int64_t rows = n_q * g_n;
  buf.resize(static_cast<size_t>(rows * d * 2 + rows * 2 + 2 * KEY_TILE * d + KEY_TILE));
  float* q = buf.data();
  float* acc = q + rows * d;
  float* m = acc + rows * d;
  float* l = m + rows;
  float* kt = l + rows;
  float* vt = kt + KEY_TILE * d;
  float* sc = vt + KEY_TILE * d;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  for (int64_t i = 0; i < n_q; ++i)
    for (int64_t g = 0; g < g_n; ++g) {
      const uint16_t* src = p.q + ((q0 + it.p0 + i) * p.hq + it.kvh * g_n + g) * d;
      float* dst = q + (i * g_n + g) * d;
      for (int64_t e = 0; e < d; ++e) dst[e] = bf16_to_float(src[e]);
    }
  for (int64_t r = 0; r < rows; ++r) m[r] = -INFINITY, l[r] = 0.f;
  for (int64_t e = 0; e < rows * d; ++e) acc[e] = 0.f;
  const int32_t* table = p.table + s * p.max_blocks;
  for (int64_t j0 = 0; j0 < key_end; j0 += KEY_TILE) {
    const int64_t nt = key_end - j0 < KEY_TILE ? key_end - j0 : KEY_TILE;
    for (int64_t t = 0; t < nt; ++t) {
      const int64_t j = j0 + t;
      const int64_t slot = static_cast<int64_t>(table[j / p.bs]) * p.bs + j % p.bs;
      const int64_t off = (slot * p.hkv + it.kvh) * d;
      for (int64_t e = 0; e < d; ++e) {
        kt[t * d + e] = bf16_to_float(p.k[off + e]);
        vt[t * d + e] = bf16_to_float(p.v[off + e]);
      }
    }
    for (int64_t i = 0; i < n_q; ++i) {
      // Keys this token sees in the tile: all, or (causal) those up to its position.
      const int64_t pos = it.p0 + i;
      int64_t n_see = nt;
      if (causal) n_see = pos + 1 - j0 < nt ? pos + 1 - j0 : nt;
      if (n_see <= 0) continue;
      for (int64_t g = 0; g < g_n; ++g) {
        const int64_t r = i * g_n + g;
        float mx = -INFINITY;
        for (int64_t t = 0; t < n_see; ++t) {
          sc[t] = dot8(q + r * d, kt + t * d, d) * scale;
          mx = std::fmax(mx, sc[t]);
        }
        const float m_new = std::fmax(m[r], mx);
        const float alpha = std::exp(m[r] - m_new);  // 0 on the first tile (m = -inf)
        float sum = 0.f;
        for (int64_t t = 0; t < n_see; ++t) {
          sc[t] = std::exp(sc[t] - m_new);
          sum += sc[t];
        }
        l[r] = l[r] * alpha + sum;
        m[r] = m_new;
        float* a = acc + r * d;
        for (int64_t e = 0; e < d; ++e) a[e] *= alpha;
        for (int64_t t = 0; t < n_see; ++t) {
          const float w = sc[t];
          const float* vr = vt + t * d;
          for (int64_t e = 0; e < d; ++e) a[e] += w * vr[e];
        }
      }
    }
  }
  for (int64_t i = 0; i < n_q; ++i)
    for (int64_t g = 0; g < g_n; ++g) {
      const int64_t r = i * g_n + g;
      const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;  // no keys: zeros, as the reference
      uint16_t* dst = p.out + ((q0 + it.p0 + i) * p.hq + it.kvh * g_n + g) * d;
      for (int64_t e = 0; e < d; ++e) dst[e] = float_to_bf16(acc[r * d + e] * inv);
    }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  Tensors ts(launch, "unified_attention");
  const DLTensor* q = ts.input("q", kBF16, 3);               // [T, Hq, d]
  const DLTensor* kc = ts.input("k_cache", kBF16, 4);        // [blocks, bs, Hkv, d]
  const DLTensor* vc = ts.input("v_cache", kBF16, 4);        // [blocks, bs, Hkv, d]
  const DLTensor* cu = ts.input("cu_seqlens_q", kI32, 1);    // [num_seqs + 1]
  const DLTensor* used = ts.input("seqused_k", kI32, 1);     // [num_seqs]
  const DLTensor* table = ts.input("block_table", kI32, 2);  // [num_seqs, max_blocks]
  const DLTensor* out = ts.output("out", kBF16, 3);          // [T, Hq, d]
  if (!ts.ok() || !ts.same_dims(q, out) || !ts.same_dims(kc, vc) ||
      !ts.dim_is(kc, 3, q->shape[2]) || !ts.dim_is(used, 0, cu->shape[0] - 1) ||
      !ts.dim_is(table, 0, cu->shape[0] - 1))
    return ts.failed();
  Problem p{static_cast<const uint16_t*>(q->data),    static_cast<const uint16_t*>(kc->data),
            static_cast<const uint16_t*>(vc->data),   static_cast<const int32_t*>(cu->data),
            static_cast<const int32_t*>(used->data),  static_cast<const int32_t*>(table->data),
            static_cast<uint16_t*>(out->data),        cu->shape[0] - 1,
            q->shape[1],                              kc->shape[2],
            q->shape[2],                              kc->shape[1],
            table->shape[1]};
  if (p.hkv < 1 || p.hq % p.hkv != 0)
    return fail("unified_attention: %lld query heads over %lld kv heads",
                static_cast<long long>(p.hq), static_cast<long long>(p.hkv));
  std::vector<Item> items;
  for (int64_t s = 0; s < p.seqs; ++s)
    for (int64_t p0 = 0; p0 < p.cu_q[s + 1] - p.cu_q[s]; p0 += Q_BLOCK)
      for (int64_t kvh = 0; kvh < p.hkv; ++kvh) items.push_back({s, p0, kvh});
  // Work per item ~ Q_BLOCK * G rows x (the longest context) keys x d; a rough figure for the
  // thread-start threshold only.
  const int64_t work = Q_BLOCK * (p.hq / p.hkv) * p.dim * 64;
  parallel_rows(static_cast<int64_t>(items.size()), work, THREADS, 256 * 1024,
                [&](int64_t b, int64_t e) {
                  std::vector<float> buf;
                  for (int64_t i = b; i < e; ++i) run_item(p, items[i], buf);
                });
  return 0;
}
