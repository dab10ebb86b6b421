// atrex-template: threaded
// atrex-description: (sequence, run of HEAD_CHUNK query heads) items over up to THREADS std::threads; the latent rows of a KEY_TILE-key tile are converted to fp32 once per item and serve as keys (whole row) and values (first kv_lora_rank elements) for every head of the run; online softmax per tile, vectorisable dot and axpy loops
// atrex-param: THREADS = 2 | 1, 2, 3, 4
// atrex-param: HEAD_CHUNK = 16 | 1, 4, 16, 64
// atrex-param: KEY_TILE = 32 | 8, 32, 128
#ifndef THREADS
#define THREADS 2
#endif
#ifndef HEAD_CHUNK
#define HEAD_CHUNK 16
#endif
#ifndef KEY_TILE
#define KEY_TILE 32
#endif

#include <cmath>
#include <cstdint>
#include <vector>

#include "atrex/candidate_util.h"

static_assert(THREADS >= 1 && THREADS <= 4, "THREADS");
static_assert(HEAD_CHUNK >= 1 && KEY_TILE >= 1, "HEAD_CHUNK, KEY_TILE");

namespace {

using atrex::cand::Tensors;
using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::kI32;
using atrex::cand::bf16_to_float;
using atrex::cand::float_to_bf16;
using atrex::cand::parallel_rows;

// a . b over n floats with 8 independent partial sums: without -ffast-math a single running sum
// is one serial chain the compiler may not reorder; 8 lanes let it use one vector FMA per step.
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
  const uint16_t* q;   // [B, H, dk]
  const uint16_t* kv;  // [rows, 1, dk]: keys are whole rows, values their first dv elements
  uint16_t* out;       // [B, H, dv]
  int64_t batch, heads, dk, dv;
};

// Query heads [h0, h1) of sequence b over its n latent rows starting at row `start`.
void heads(const Problem& p, int64_t b, int64_t h0, int64_t h1, int64_t start, int64_t n,
           std::vector<float>& buf) {
  const int64_t hn = h1 - h0, dk = p.dk, dv = p.dv;
  buf.assign(static_cast<size_t>(hn * dk + hn * dv + KEY_TILE * dk + KEY_TILE + 2 * hn), 0.f);
  float* q = buf.data();            // [hn, dk]
  float* acc = q + hn * dk;         // [hn, dv]
  float* rows = acc + hn * dv;      // [KEY_TILE, dk]
  float* sc = rows + KEY_TILE * dk; // [KEY_TILE]
  float* m = sc + KEY_TILE;         // [hn]
  float* l = m + hn;                // [hn]
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk)));
  const uint16_t* qs = p.q + (b * p.heads + h0) * dk;
  for (int64_t i = 0; i < hn * dk; ++i) q[i] = bf16_to_float(qs[i]);
  for (int64_t h = 0; h < hn; ++h) m[h] = -INFINITY;
  for (int64_t j0 = 0; j0 < n; j0 += KEY_TILE) {
    const int64_t nt = n - j0 < KEY_TILE ? n - j0 : KEY_TILE;
    const uint16_t* src = p.kv + (start + j0) * dk;
    for (int64_t i = 0; i < nt * dk; ++i) rows[i] = bf16_to_float(src[i]);
    for (int64_t h = 0; h < hn; ++h) {
      float tile_max = -INFINITY;
      for (int64_t t = 0; t < nt; ++t) {
        const float dot = dot8(q + h * dk, rows + t * dk, dk);
        sc[t] = dot * scale;
        tile_max = std::fmax(tile_max, sc[t]);
      }
      const float m_new = std::fmax(m[h], tile_max);
      const float alpha = std::exp(m[h] - m_new);  // 0 on the first tile (m = -inf)
      float sum = 0.f;
      for (int64_t t = 0; t < nt; ++t) {
        sc[t] = std::exp(sc[t] - m_new);
        sum += sc[t];
      }
      l[h] = l[h] * alpha + sum;
      m[h] = m_new;
      float* a = acc + h * dv;
      for (int64_t i = 0; i < dv; ++i) a[i] *= alpha;
      for (int64_t t = 0; t < nt; ++t) {
        const float w = sc[t];
        const float* vr = rows + t * dk;
        for (int64_t i = 0; i < dv; ++i) a[i] += w * vr[i];
      }
    }
  }
  uint16_t* o = p.out + (b * p.heads + h0) * dv;
  for (int64_t h = 0; h < hn; ++h)
    for (int64_t i = 0; i < dv; ++i) o[h * dv + i] = float_to_bf16(n > 0 ? acc[h * dv + i] / l[h] : 0.f);
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  Tensors ts(launch, "mla_decode_attention");
  const DLTensor* q = ts.input("q", kBF16, 3);                // [B, H, r + rope]
  const DLTensor* kv = ts.input("kv_cache", kBF16, 3);        // [sum(seq_lens), 1, r + rope]
  const DLTensor* lens = ts.input("seq_lens", kI32, 1);       // [B]
  const DLTensor* out = ts.output("out", kBF16, 3);           // [B, H, r]
  if (!ts.ok() || !ts.dim_is(kv, 2, q->shape[2]) || !ts.dim_is(kv, 1, 1) ||
      !ts.dim_is(lens, 0, q->shape[0]) || !ts.dim_is(out, 0, q->shape[0]) ||
      !ts.dim_is(out, 1, q->shape[1]))
    return ts.failed();
  Problem p{static_cast<const uint16_t*>(q->data), static_cast<const uint16_t*>(kv->data),
            static_cast<uint16_t*>(out->data), q->shape[0], q->shape[1], q->shape[2],
            out->shape[2]};
  if (p.dv > p.dk) return fail("mla_decode_attention: value dim %lld exceeds key dim %lld",
                               static_cast<long long>(p.dv), static_cast<long long>(p.dk));
  const auto* sl = static_cast<const int32_t*>(lens->data);
  std::vector<int64_t> start(static_cast<size_t>(p.batch) + 1, 0);
  for (int64_t b = 0; b < p.batch; ++b) start[b + 1] = start[b] + sl[b];
  const int64_t chunks = (p.heads + HEAD_CHUNK - 1) / HEAD_CHUNK;
  const int64_t per_item = HEAD_CHUNK * (p.dk + p.dv) * (start[p.batch] / (p.batch ? p.batch : 1));
  parallel_rows(p.batch * chunks, per_item, THREADS, 256 * 1024, [&](int64_t b0, int64_t e0) {
    std::vector<float> buf;
    for (int64_t item = b0; item < e0; ++item) {
      const int64_t b = item / chunks, h0 = (item % chunks) * HEAD_CHUNK;
      const int64_t h1 = h0 + HEAD_CHUNK < p.heads ? h0 + HEAD_CHUNK : p.heads;
      heads(p, b, h0, h1, start[b], sl[b] > 0 ? sl[b] : 0, buf);
    }
  });
  return 0;
}
