// atrex-template: two_pass
// atrex-description: exact (not online) softmax with the score rows materialised: work items (query token, kv head) on up to THREADS std::threads, interleaved over the tokens so causal rows of every length spread over the threads; pass 1 gathers KEY_CHUNK keys at a time through the block table into fp32 and scores them against the whole GQA group, pass 2 exponentiates against the row max and sums, pass 3 accumulates the values chunk by chunk; vectorisable dot and axpy loops
// atrex-param: KEY_CHUNK = 64 | 16, 64, 256
// atrex-param: THREADS = 2 | 1, 2, 3, 4
#ifndef KEY_CHUNK
#define KEY_CHUNK 64
#endif
#ifndef THREADS
#define THREADS 2
#endif

#include <cmath>
#include <cstdint>
#include <vector>

#include "atrex/candidate_util.h"

static_assert(KEY_CHUNK >= 1, "KEY_CHUNK");
static_assert(THREADS >= 1 && THREADS <= 4, "THREADS");

namespace {

using atrex::cand::Tensors;
using atrex::cand::bf16_to_float;
using atrex::cand::fail;
using atrex::cand::float_to_bf16;
using atrex::cand::kBF16;
using atrex::cand::kI32;
using atrex::cand::parallel_rows;

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
  int64_t seqs, tokens, hq, hkv, dim, bs, max_blocks;
};

// Token t (of sequence s, position pos) and query heads kvh * G .. + G - 1.
void run_row(const Problem& p, int64_t s, int64_t pos, int64_t kvh, std::vector<float>& buf) {
  const int64_t g_n = p.hq / p.hkv, d = p.dim;
  const int64_t q0 = p.cu_q[s], q_len = p.cu_q[s + 1] - q0, used = p.used_k[s];
  int64_t n_kv = used > 0 ? used : 0;
  if (n_kv > p.max_blocks * p.bs) n_kv = p.max_blocks * p.bs;
  // The reference's is_causal = (q_len == kv_len): key j seen when j <= pos.
  const int64_t n = q_len == used && pos + 1 < n_kv ? pos + 1 : n_kv;
  buf.resize(static_cast<size_t>(g_n * d * 2 + g_n * n + KEY_CHUNK * d));
  float* q = buf.data();
  float* acc = q + g_n * d;
  float* sc = acc + g_n * d;  // [G, n]
  float* rows = sc + g_n * n;  // [KEY_CHUNK, d]
  const int64_t t = q0 + pos;
  for (int64_t e = 0; e < g_n * d; ++e) {
    q[e] = bf16_to_float(p.q[(t * p.hq + kvh * g_n) * d + e]);
    acc[e] = 0.f;
  }
  const int32_t* table = p.table + s * p.max_blocks;
  auto gather = [&](const uint16_t* cache, int64_t j0, int64_t nc) {
    for (int64_t c = 0; c < nc; ++c) {
      const int64_t j = j0 + c;
      const int64_t slot = static_cast<int64_t>(table[j / p.bs]) * p.bs + j % p.bs;
      const uint16_t* src = cache + (slot * p.hkv + kvh) * d;
      for (int64_t e = 0; e < d; ++e) rows[c * d + e] = bf16_to_float(src[e]);
    }
  };
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  for (int64_t j0 = 0; j0 < n; j0 += KEY_CHUNK) {
    const int64_t nc = n - j0 < KEY_CHUNK ? n - j0 : KEY_CHUNK;
    gather(p.k, j0, nc);
    for (int64_t g = 0; g < g_n; ++g)
      for (int64_t c = 0; c < nc; ++c) sc[g * n + j0 + c] = dot8(q + g * d, rows + c * d, d) * scale;
  }
  std::vector<float> inv(static_cast<size_t>(g_n));
  for (int64_t g = 0; g < g_n; ++g) {
    float mx = -INFINITY, sum = 0.f;
    for (int64_t j = 0; j < n; ++j) mx = std::fmax(mx, sc[g * n + j]);
    for (int64_t j = 0; j < n; ++j) {
      sc[g * n + j] = std::exp(sc[g * n + j] - mx);
      sum += sc[g * n + j];
    }
    inv[g] = sum > 0.f ? 1.f / sum : 0.f;  // no keys: zeros, as the reference
  }
  for (int64_t j0 = 0; j0 < n; j0 += KEY_CHUNK) {
    const int64_t nc = n - j0 < KEY_CHUNK ? n - j0 : KEY_CHUNK;
    gather(p.v, j0, nc);
    for (int64_t g = 0; g < g_n; ++g)
      for (int64_t c = 0; c < nc; ++c) {
        const float w = sc[g * n + j0 + c];
        const float* vr = rows + c * d;
        float* a = acc + g * d;
        for (int64_t e = 0; e < d; ++e) a[e] += w * vr[e];
      }
  }
  for (int64_t g = 0; g < g_n; ++g) {
    uint16_t* dst = p.out + (t * p.hq + kvh * g_n + g) * d;
    for (int64_t e = 0; e < d; ++e) dst[e] = float_to_bf16(acc[g * d + e] * inv[g]);
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
            q->shape[0],                              q->shape[1],
            kc->shape[2],                             q->shape[2],
            kc->shape[1],                             table->shape[1]};
  if (p.hkv < 1 || p.hq % p.hkv != 0)
    return fail("unified_attention: %lld query heads over %lld kv heads",
                static_cast<long long>(p.hq), static_cast<long long>(p.hkv));
  struct Row {
    int64_t seq, pos;
  };
  std::vector<Row> rows;
  for (int64_t s = 0; s < p.seqs; ++s)
    for (int64_t pos = 0; pos < p.cu_q[s + 1] - p.cu_q[s]; ++pos) rows.push_back({s, pos});
  const int64_t n_items = static_cast<int64_t>(rows.size()) * p.hkv;
  // Thread w takes items w, w + n, w + 2n, ... (interleaved: causal rows grow with the position).
  const int64_t work = (p.hq / p.hkv) * p.dim * 256;
  const int64_t threads = n_items < THREADS ? (n_items > 0 ? n_items : 1) : THREADS;
  parallel_rows(threads, n_items / threads * work, static_cast<int>(threads), 256 * 1024,
                [&](int64_t b, int64_t e) {
                  std::vector<float> buf;
                  for (int64_t w = b; w < e; ++w)
                    for (int64_t i = w; i < n_items; i += threads)
                      run_row(p, rows[i / p.hkv].seq, rows[i / p.hkv].pos, i % p.hkv, buf);
                });
  return 0;
}
