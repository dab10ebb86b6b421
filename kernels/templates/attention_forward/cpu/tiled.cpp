// atrex-template: tiled
// atrex-description: the CPU form of the flash design: work items (sequence, block of Q_BLOCK query tokens, head) on up to THREADS std::threads; a KEY_TILE-key tile of the sequence's keys and values (cu_seqlens_k) is converted to fp32 once per item and serves every query row of the block; online softmax per row (running max, sum, unnormalised accumulator), no mask; vectorisable dot and axpy loops over the head dim
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
  const int32_t *cu_q, *cu_k;
  uint16_t* out;
  int64_t seqs, heads, dim;
};

struct Item {
  int64_t seq, p0, head;
};

// Rows (token p0 + i, head) for i < n_q: q, m, l and acc; every row sees all keys of its
// sequence (no mask).
void run_item(const Problem& p, const Item& it, std::vector<float>& buf) {
  const int64_t d = p.dim, s = it.seq, hs = p.heads;
  const int64_t q0 = p.cu_q[s], q_len = p.cu_q[s + 1] - q0;
  const int64_t k0 = p.cu_k[s], n_kv = p.cu_k[s + 1] - k0 > 0 ? p.cu_k[s + 1] - k0 : 0;
  const int64_t rows = q_len - it.p0 < Q_BLOCK ? q_len - it.p0 : Q_BLOCK;
  buf.resize(static_cast<size_t>(rows * d * 2 + rows * 2 + 2 * KEY_TILE * d + KEY_TILE));
  float* q = buf.data();
  float* acc = q + rows * d;
  float* m = acc + rows * d;
  float* l = m + rows;
  float* kt = l + rows;
  float* vt = kt + KEY_TILE * d;
  float* sc = vt + KEY_TILE * d;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* src = p.q + ((q0 + it.p0 + r) * hs + it.head) * d;
    for (int64_t e = 0; e < d; ++e) q[r * d + e] = bf16_to_float(src[e]);
    m[r] = -INFINITY;
    l[r] = 0.f;
  }
  for (int64_t e = 0; e < rows * d; ++e) acc[e] = 0.f;
  for (int64_t j0 = 0; j0 < n_kv; j0 += KEY_TILE) {
    const int64_t nt = n_kv - j0 < KEY_TILE ? n_kv - j0 : KEY_TILE;
    for (int64_t t = 0; t < nt; ++t) {
      const int64_t off = ((k0 + j0 + t) * hs + it.head) * d;
      for (int64_t e = 0; e < d; ++e) {
        kt[t * d + e] = bf16_to_float(p.k[off + e]);
        vt[t * d + e] = bf16_to_float(p.v[off + e]);
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      float mx = -INFINITY;
      for (int64_t t = 0; t < nt; ++t) {
        sc[t] = dot8(q + r * d, kt + t * d, d) * scale;
        mx = std::fmax(mx, sc[t]);
      }
      const float m_new = std::fmax(m[r], mx);
      const float alpha = std::exp(m[r] - m_new);  // 0 on the first tile (m = -inf)
      float sum = 0.f;
      for (int64_t t = 0; t < nt; ++t) {
        sc[t] = std::exp(sc[t] - m_new);
        sum += sc[t];
      }
      l[r] = l[r] * alpha + sum;
      m[r] = m_new;
      float* a = acc + r * d;
      for (int64_t e = 0; e < d; ++e) a[e] *= alpha;
      for (int64_t t = 0; t < nt; ++t) {
        const float w = sc[t];
        const float* vr = vt + t * d;
        for (int64_t e = 0; e < d; ++e) a[e] += w * vr[e];
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;  // no keys: zeros, as the reference
    uint16_t* dst = p.out + ((q0 + it.p0 + r) * hs + it.head) * d;
    for (int64_t e = 0; e < d; ++e) dst[e] = float_to_bf16(acc[r * d + e] * inv);
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  Tensors ts(launch, "attention_forward");
  const DLTensor* q = ts.input("q", kBF16, 3);               // [T, H, d]
  const DLTensor* k = ts.input("k", kBF16, 3);               // [T, H, d]
  const DLTensor* v = ts.input("v", kBF16, 3);               // [T, H, d]
  const DLTensor* cu_q = ts.input("cu_seqlens_q", kI32, 1);  // [num_seqs + 1]
  const DLTensor* cu_k = ts.input("cu_seqlens_k", kI32, 1);  // [num_seqs + 1]
  const DLTensor* out = ts.output("out", kBF16, 3);          // [T, H, d]
  if (!ts.ok() || !ts.same_dims(q, out) || !ts.same_dims(k, v) || !ts.same_dims(cu_q, cu_k) ||
      !ts.dim_is(k, 1, q->shape[1]) || !ts.dim_is(k, 2, q->shape[2]))
    return ts.failed();
  Problem p{static_cast<const uint16_t*>(q->data),    static_cast<const uint16_t*>(k->data),
            static_cast<const uint16_t*>(v->data),    static_cast<const int32_t*>(cu_q->data),
            static_cast<const int32_t*>(cu_k->data),  static_cast<uint16_t*>(out->data),
            cu_q->shape[0] - 1,                       q->shape[1],
            q->shape[2]};
  std::vector<Item> items;
  for (int64_t s = 0; s < p.seqs; ++s)
    for (int64_t p0 = 0; p0 < p.cu_q[s + 1] - p.cu_q[s]; p0 += Q_BLOCK)
      for (int64_t h = 0; h < p.heads; ++h) items.push_back({s, p0, h});
  // Work per item ~ Q_BLOCK rows x d x (a typical sequence); for the thread-start threshold only.
  const int64_t work = Q_BLOCK * p.dim * 64;
  parallel_rows(static_cast<int64_t>(items.size()), work, THREADS, 256 * 1024,
                [&](int64_t b, int64_t e) {
                  std::vector<float> buf;
                  for (int64_t i = b; i < e; ++i) run_item(p, items[i], buf);
                });
  return 0;
}
