// atrex-template: chunk_gemm
// atrex-description: one (batch, chunk, v head) unit at a time as three small matrix products on fp32 copies: Q h_c (rows of h streamed once per chunk, vectorised over the value columns), the masked, decayed and bf16-rounded Q K^T block, then its product with V; exp(g) computed once per token; units split over up to THREADS std::threads
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: KBLOCK = 32 | 16, 32, 64
#ifndef THREADS
#define THREADS 2
#endif
#ifndef KBLOCK
#define KBLOCK 32
#endif

#include <cmath>
#include <cstdint>
#include <vector>

#include "atrex/candidate_util.h"

namespace {

using atrex::cand::bf16_to_float;
using atrex::cand::fail;
using atrex::cand::float_to_bf16;
using atrex::cand::kBF16;
using atrex::cand::kF32;
using atrex::cand::parallel_rows;

struct Params {
  const uint16_t *q, *k, *v, *h;
  const float* g;
  uint16_t* out;
  int64_t tokens, hq, hv, dk, dv, chunks, cs, per;
  float scale;
};

// Units [begin, end) of (batch, chunk, head), head fastest.
void units(const Params& p, int64_t begin, int64_t end) {
  const int64_t dk = p.dk, dv = p.dv, cs = p.cs;
  std::vector<float> qf(static_cast<size_t>(cs * dk)), kf(static_cast<size_t>(cs * dk)),
      acc(static_cast<size_t>(cs * dv)), att(static_cast<size_t>(cs * cs)), gt(static_cast<size_t>(cs));
  for (int64_t u = begin; u < end; ++u) {
    const int64_t head = u % p.hv, c = (u / p.hv) % p.chunks, b = u / (p.hv * p.chunks);
    const int64_t qh = head / p.per < p.hq - 1 ? head / p.per : p.hq - 1;
    const int64_t t0 = c * cs, n = p.tokens - t0 < cs ? p.tokens - t0 : cs;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t off = ((b * p.tokens + t0 + r) * p.hq + qh) * dk;
      for (int64_t d = 0; d < dk; ++d) {
        qf[static_cast<size_t>(r * dk + d)] = bf16_to_float(p.q[off + d]);
        kf[static_cast<size_t>(r * dk + d)] = bf16_to_float(p.k[off + d]);
      }
      gt[static_cast<size_t>(r)] = p.g[(b * p.tokens + t0 + r) * p.hv + head];
    }
    // acc = Q h_c, K blocked so KBLOCK rows of h stay in cache across the chunk's tokens.
    for (size_t i = 0; i < static_cast<size_t>(n * dv); ++i) acc[i] = 0.f;
    const uint16_t* hc = p.h + ((b * p.chunks + c) * p.hv + head) * dk * dv;
    std::vector<float> hrow(static_cast<size_t>(KBLOCK * dv));
    for (int64_t d0 = 0; d0 < dk; d0 += KBLOCK) {
      const int64_t db = dk - d0 < KBLOCK ? dk - d0 : KBLOCK;
      for (int64_t i = 0; i < db * dv; ++i) hrow[static_cast<size_t>(i)] = bf16_to_float(hc[d0 * dv + i]);
      for (int64_t r = 0; r < n; ++r) {
        float* ar = acc.data() + r * dv;
        for (int64_t d = 0; d < db; ++d) {
          const float qd = qf[static_cast<size_t>(r * dk + d0 + d)];
          const float* hr = hrow.data() + d * dv;
          for (int64_t j = 0; j < dv; ++j) ar[j] += qd * hr[j];
        }
      }
    }
    // The masked, decayed attention block, rounded to bf16 as the reference's matmul output is.
    for (int64_t r = 0; r < n; ++r) {
      const float eg = std::exp(gt[static_cast<size_t>(r)]);
      float* ar = acc.data() + r * dv;
      for (int64_t j = 0; j < dv; ++j) ar[j] *= eg;
      for (int64_t s = 0; s <= r; ++s) {
        float dot = 0.f;
        const float* qr = qf.data() + r * dk;
        const float* kr = kf.data() + s * dk;
        for (int64_t d = 0; d < dk; ++d) dot += qr[d] * kr[d];
        const float gd = gt[static_cast<size_t>(r)] - gt[static_cast<size_t>(s)];
        att[static_cast<size_t>(r * cs + s)] = gd <= 0 ? bf16_to_float(float_to_bf16(dot * std::exp(gd))) : 0.f;
      }
    }
    for (int64_t s = 0; s < n; ++s) {
      const uint16_t* vr = p.v + ((b * p.tokens + t0 + s) * p.hv + head) * dv;
      float vf[512];
      for (int64_t j0 = 0; j0 < dv; j0 += 512) {
        const int64_t jb = dv - j0 < 512 ? dv - j0 : 512;
        for (int64_t j = 0; j < jb; ++j) vf[j] = bf16_to_float(vr[j0 + j]);
        for (int64_t r = s; r < n; ++r) {
          const float a = att[static_cast<size_t>(r * cs + s)];
          float* ar = acc.data() + r * dv + j0;
          for (int64_t j = 0; j < jb; ++j) ar[j] += a * vf[j];
        }
      }
    }
    for (int64_t r = 0; r < n; ++r) {
      uint16_t* orow = p.out + ((b * p.tokens + t0 + r) * p.hv + head) * dv;
      for (int64_t j = 0; j < dv; ++j) orow[j] = float_to_bf16(acc[static_cast<size_t>(r * dv + j)] * p.scale);
    }
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// q, k [B, T, Hq, dk], v [B, T, Hv, dv], h [B, C, Hv, dk, dv] (bf16), g [B, T, Hv] f32 ->
// out [B, T, Hv, dv] bf16 with C = ceil(T / chunk_size).
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "chunk_delta_rule_output");
  const DLTensor* q = ts.input("q", kBF16, 4);
  const DLTensor* k = ts.input("k", kBF16, 4);
  const DLTensor* v = ts.input("v", kBF16, 4);
  const DLTensor* h = ts.input("h", kBF16, 5);
  const DLTensor* g = ts.input("g", kF32, 3);
  const DLTensor* out = ts.output("out", kBF16, 4);
  ts.same_dims(q, k);
  ts.same_dims(v, out);
  if (!ts.ok()) return ts.failed();
  Params p{};
  const int64_t batch = q->shape[0];
  p.tokens = q->shape[1];
  p.hq = q->shape[2];
  p.dk = q->shape[3];
  p.hv = v->shape[2];
  p.dv = v->shape[3];
  p.chunks = h->shape[1];
  p.cs = atrex_param_int(launch, "chunk_size", 64);
  if (p.cs < 1 || p.cs > 256) return fail("chunk_delta_rule_output: chunk_size %lld is not in 1..256", (long long)p.cs);
  if (p.chunks != (p.tokens + p.cs - 1) / p.cs || h->shape[2] != p.hv || h->shape[3] != p.dk || h->shape[4] != p.dv)
    return fail("chunk_delta_rule_output: h must be [B, ceil(T / chunk_size), Hv, dk, dv]");
  if (p.hq < 1) return fail("chunk_delta_rule_output: no q heads");
  p.per = p.hv / p.hq > 1 ? p.hv / p.hq : 1;
  p.q = static_cast<const uint16_t*>(q->data);
  p.k = static_cast<const uint16_t*>(k->data);
  p.v = static_cast<const uint16_t*>(v->data);
  p.h = static_cast<const uint16_t*>(h->data);
  p.g = static_cast<const float*>(g->data);
  p.out = static_cast<uint16_t*>(out->data);
  p.scale = static_cast<float>(atrex_param_float(launch, "scale", 1.0 / std::sqrt(static_cast<double>(p.dk))));
  parallel_rows(batch * p.chunks * p.hv, p.cs * p.dk * p.dv, THREADS, int64_t{1} << 20,
                [&](int64_t lo, int64_t hi) { units(p, lo, hi); });
  return 0;
}
