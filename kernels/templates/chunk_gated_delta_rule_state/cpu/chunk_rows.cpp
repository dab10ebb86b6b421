// atrex-template: chunk_rows
// atrex-description: per (batch, v head) the fp32 state runs over the chunks in place: its bf16 copy is written as h[c] and kept widened, v = u - w bf16(state) is one row-major pass per token (vectorised over the value columns, UNROLL key rows at a time), the decayed bf16 v rows are kept for the chunk, then state = state exp(g_last) + k^T v' as one rank-chunk update sweep; heads split over up to THREADS std::threads
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: UNROLL = 4 | 1, 4
#ifndef THREADS
#define THREADS 2
#endif
#ifndef UNROLL
#define UNROLL 4
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
using atrex::cand::kI32;
using atrex::cand::parallel_rows;

inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

struct Params {
  const uint16_t *k, *w, *u;
  const float* g;
  const int32_t* idx;
  uint16_t *h, *v_new;
  float* state;
  int64_t batch, tokens, hk, hv, dk, dv, chunks, cs, per;
};

// Heads [begin, end) of every batch entry.
void heads(const Params& p, int64_t begin, int64_t end) {
  const int64_t dk = p.dk, dv = p.dv, cs = p.cs;
  std::vector<float> hb(static_cast<size_t>(dk * dv)), vblk(static_cast<size_t>(cs * dv)),
      wf(static_cast<size_t>(dk));
  for (int64_t bi = 0; bi < p.batch; ++bi)
    for (int64_t head = begin; head < end; ++head) {
      const int64_t kh = head / p.per < p.hk - 1 ? head / p.per : p.hk - 1;
      float* st = p.state + (static_cast<int64_t>(p.idx[bi]) * p.hv + head) * dk * dv;
      for (int64_t c = 0; c < p.chunks; ++c) {
        const int64_t t0 = c * cs, t1 = t0 + cs < p.tokens ? t0 + cs : p.tokens;
        uint16_t* hc = p.h + ((bi * p.chunks + c) * p.hv + head) * dk * dv;
        for (int64_t e = 0; e < dk * dv; ++e) {
          hc[e] = float_to_bf16(st[e]);
          hb[static_cast<size_t>(e)] = bf16_to_float(hc[e]);
        }
        const float g_last = p.g[(bi * p.tokens + t1 - 1) * p.hv + head];
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t row = (bi * p.tokens + t) * p.hv + head;
          for (int64_t d = 0; d < dk; ++d) wf[static_cast<size_t>(d)] = bf16_to_float(p.w[row * dk + d]);
          float* vr = vblk.data() + (t - t0) * dv;
          for (int64_t j = 0; j < dv; ++j) vr[j] = 0.f;
          int64_t d = 0;
          for (; d + UNROLL <= dk; d += UNROLL)
            for (int x = 0; x < UNROLL; ++x) {
              const float wd = wf[static_cast<size_t>(d + x)];
              const float* hr = hb.data() + (d + x) * dv;
              for (int64_t j = 0; j < dv; ++j) vr[j] += wd * hr[j];
            }
          for (; d < dk; ++d) {
            const float wd = wf[static_cast<size_t>(d)];
            const float* hr = hb.data() + d * dv;
            for (int64_t j = 0; j < dv; ++j) vr[j] += wd * hr[j];
          }
          const float gd = g_last - p.g[row];
          const float f = gd <= 0 ? std::exp(gd) : 0.0f;
          for (int64_t j = 0; j < dv; ++j) {
            const float v = bf16_to_float(p.u[row * dv + j]) - vr[j];
            p.v_new[row * dv + j] = float_to_bf16(v);
            vr[j] = round_bf16(v * f);
          }
        }
        const float decay = std::exp(g_last);
        for (int64_t e = 0; e < dk * dv; ++e) st[e] *= decay;
        for (int64_t t = t0; t < t1; ++t) {
          const uint16_t* krow = p.k + ((bi * p.tokens + t) * p.hk + kh) * dk;
          const float* vr = vblk.data() + (t - t0) * dv;
          for (int64_t dd = 0; dd < dk; ++dd) {
            const float kd = bf16_to_float(krow[dd]);
            float* sr = st + dd * dv;
            for (int64_t j = 0; j < dv; ++j) sr[j] += kd * vr[j];
          }
        }
      }
    }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// k [B, T, Hk, dk], w [B, T, Hv, dk], u [B, T, Hv, dv] (bf16), g [B, T, Hv] f32,
// initial_state_indices [B] i32 -> h [B, C, Hv, dk, dv] bf16, v_new [B, T, Hv, dv] bf16,
// final_state [S, Hv, dk, dv] f32 (holding initial_state on entry; the batch's slots advance).
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "chunk_gated_delta_rule_state");
  const DLTensor* k = ts.input("k", kBF16, 4);
  const DLTensor* w = ts.input("w", kBF16, 4);
  const DLTensor* u = ts.input("u", kBF16, 4);
  const DLTensor* g = ts.input("g", kF32, 3);
  const DLTensor* idx = ts.input("initial_state_indices", kI32, 1);
  const DLTensor* h = ts.output("h", kBF16, 5);
  const DLTensor* vn = ts.output("v_new", kBF16, 4);
  const DLTensor* fin = ts.output("final_state", kF32, 4);
  ts.same_dims(u, vn);
  if (!ts.ok()) return ts.failed();
  Params p{};
  p.batch = k->shape[0];
  p.tokens = k->shape[1];
  p.hk = k->shape[2];
  p.dk = k->shape[3];
  p.hv = u->shape[2];
  p.dv = u->shape[3];
  p.chunks = h->shape[1];
  p.cs = atrex_param_int(launch, "chunk_size", 64);
  const int64_t slots = fin->shape[0];
  if (p.cs < 1 || p.cs > 256) return fail("chunk_gated_delta_rule_state: chunk_size %lld is not in 1..256", (long long)p.cs);
  if (p.chunks != (p.tokens + p.cs - 1) / p.cs || h->shape[2] != p.hv || h->shape[3] != p.dk || h->shape[4] != p.dv)
    return fail("chunk_gated_delta_rule_state: h must be [B, ceil(T / chunk_size), Hv, dk, dv]");
  if (fin->shape[1] != p.hv || fin->shape[2] != p.dk || fin->shape[3] != p.dv || w->shape[3] != p.dk)
    return fail("chunk_gated_delta_rule_state: final_state must be [S, Hv, dk, dv], w [B, T, Hv, dk]");
  if (p.hk < 1) return fail("chunk_gated_delta_rule_state: no k heads");
  p.per = p.hv / p.hk > 1 ? p.hv / p.hk : 1;
  p.idx = static_cast<const int32_t*>(idx->data);
  for (int64_t b = 0; b < p.batch; ++b)
    if (p.idx[b] < 0 || p.idx[b] >= slots)
      return fail("chunk_gated_delta_rule_state: initial_state_indices[%lld] = %d is not a slot", (long long)b, p.idx[b]);
  p.k = static_cast<const uint16_t*>(k->data);
  p.w = static_cast<const uint16_t*>(w->data);
  p.u = static_cast<const uint16_t*>(u->data);
  p.g = static_cast<const float*>(g->data);
  p.h = static_cast<uint16_t*>(h->data);
  p.v_new = static_cast<uint16_t*>(vn->data);
  p.state = static_cast<float*>(fin->data);
  parallel_rows(p.hv, p.batch * p.tokens * p.dk * p.dv, THREADS, int64_t{1} << 20,
                [&](int64_t lo, int64_t hi) { heads(p, lo, hi); });
  return 0;
}
