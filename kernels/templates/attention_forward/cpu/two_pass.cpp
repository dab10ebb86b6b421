// atrex-template: two_pass
// atrex-description: exact (not online) softmax with the score row materialised: work items (query token, head) on up to THREADS std::threads, interleaved over the tokens; pass 1 converts KEY_CHUNK keys of the sequence (cu_seqlens_k) at a time to fp32 and scores them, pass 2 exponentiates against the row max and sums, pass 3 accumulates the values chunk by chunk; vectorisable dot and axpy loops
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
  const int32_t *cu_q, *cu_k;
  uint16_t* out;
  int64_t seqs, heads, dim;
};

// Token t of sequence s, head h: softmax over every key of the sequence (no mask).
void run_row(const Problem& p, int64_t s, int64_t t, int64_t h, std::vector<float>& buf) {
  const int64_t d = p.dim, hs = p.heads, k0 = p.cu_k[s];
  const int64_t n = p.cu_k[s + 1] - k0 > 0 ? p.cu_k[s + 1] - k0 : 0;
  buf.resize(static_cast<size_t>(d * 2 + n + KEY_CHUNK * d));
  float* q = buf.data();
  float* acc = q + d;
  float* sc = acc + d;      // [n]
  float* rows = sc + n;     // [KEY_CHUNK, d]
  for (int64_t e = 0; e < d; ++e) {
    q[e] = bf16_to_float(p.q[(t * hs + h) * d + e]);
    acc[e] = 0.f;
  }
  auto gather = [&](const uint16_t* x, int64_t j0, int64_t nc) {
    for (int64_t c = 0; c < nc; ++c) {
      const uint16_t* src = x + ((k0 + j0 + c) * hs + h) * d;
      for (int64_t e = 0; e < d; ++e) rows[c * d + e] = bf16_to_float(src[e]);
    }
  };
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  for (int64_t j0 = 0; j0 < n; j0 += KEY_CHUNK) {
    const int64_t nc = n - j0 < KEY_CHUNK ? n - j0 : KEY_CHUNK;
    gather(p.k, j0, nc);
    for (int64_t c = 0; c < nc; ++c) sc[j0 + c] = dot8(q, rows + c * d, d) * scale;
  }
  float mx = -INFINITY, sum = 0.f;
  for (int64_t j = 0; j < n; ++j) mx = std::fmax(mx, sc[j]);
  for (int64_t j = 0; j < n; ++j) {
    sc[j] = std::exp(sc[j] - mx);
    sum += sc[j];
  }
  const float inv = sum > 0.f ? 1.f / sum : 0.f;  // no keys: zeros, as the reference
  for (int64_t j0 = 0; j0 < n; j0 += KEY_CHUNK) {
    const int64_t nc = n - j0 < KEY_CHUNK ? n - j0 : KEY_CHUNK;
    gather(p.v, j0, nc);
    for (int64_t c = 0; c < nc; ++c) {
      const float w = sc[j0 + c];
      const float* vr = rows + c * d;
      for (int64_t e = 0; e < d; ++e) acc[e] += w * vr[e];
    }
  }
  uint16_t* dst = p.out + (t * hs + h) * d;
  for (int64_t e = 0; e < d; ++e) dst[e] = float_to_bf16(acc[e] * inv);
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
  struct Row {
    int64_t seq, token;
  };
  std::vector<Row> rows;
  for (int64_t s = 0; s < p.seqs; ++s)
    for (int64_t t = p.cu_q[s]; t < p.cu_q[s + 1]; ++t) rows.push_back({s, t});
  const int64_t n_items = static_cast<int64_t>(rows.size()) * p.heads;
  // Thread w takes items w, w + n, w + 2n, ...
  const int64_t work = p.dim * 256;
  const int64_t threads = n_items < THREADS ? (n_items > 0 ? n_items : 1) : THREADS;
  parallel_rows(threads, n_items / threads * work, static_cast<int>(threads), 256 * 1024,
                [&](int64_t b, int64_t e) {
                  std::vector<float> buf;
                  for (int64_t w = b; w < e; ++w)
                    for (int64_t i = w; i < n_items; i += threads)
                      run_row(p, rows[i / p.heads].seq, rows[i / p.heads].token, i % p.heads, buf);
                });
  return 0;
}
