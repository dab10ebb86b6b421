// atrex-template: column_blocks
// atrex-description: the value columns are independent through the whole recurrence, so the work is split into (v head, COLS-column block) units (more units than heads: two heads still fill the threads): each unit copies its [dk, COLS] state slice into a contiguous local buffer, runs every chunk on it (bf16 slice to h, v = u - w bf16(slice), decayed bf16 v', slice = slice exp(g_last) + k^T v') with the slice resident in L1, and writes it back once; units split over up to THREADS std::threads
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: COLS = 32 | 16, 32, 64
#ifndef THREADS
#define THREADS 2
#endif
#ifndef COLS
#define COLS 32
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

// Units [begin, end) of (head, column block), the block fastest, for every batch entry.
void units(const Params& p, int64_t begin, int64_t end) {
  const int64_t dk = p.dk, dv = p.dv, cs = p.cs, blocks = (dv + COLS - 1) / COLS;
  std::vector<float> sl(static_cast<size_t>(dk * COLS)), hb(static_cast<size_t>(dk * COLS)),
      vblk(static_cast<size_t>(cs * COLS));
  for (int64_t bi = 0; bi < p.batch; ++bi)
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t head = unit / blocks, j0 = (unit % blocks) * COLS;
      const int64_t nc = dv - j0 < COLS ? dv - j0 : COLS;
      const int64_t kh = head / p.per < p.hk - 1 ? head / p.per : p.hk - 1;
      float* st = p.state + (static_cast<int64_t>(p.idx[bi]) * p.hv + head) * dk * dv;
      for (int64_t d = 0; d < dk; ++d)
        for (int64_t j = 0; j < nc; ++j) sl[static_cast<size_t>(d * COLS + j)] = st[d * dv + j0 + j];
      for (int64_t c = 0; c < p.chunks; ++c) {
        const int64_t t0 = c * cs, t1 = t0 + cs < p.tokens ? t0 + cs : p.tokens;
        uint16_t* hc = p.h + ((bi * p.chunks + c) * p.hv + head) * dk * dv;
        for (int64_t d = 0; d < dk; ++d)
          for (int64_t j = 0; j < nc; ++j) {
            const uint16_t b = float_to_bf16(sl[static_cast<size_t>(d * COLS + j)]);
            hc[d * dv + j0 + j] = b;
            hb[static_cast<size_t>(d * COLS + j)] = bf16_to_float(b);
          }
        const float g_last = p.g[(bi * p.tokens + t1 - 1) * p.hv + head];
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t row = (bi * p.tokens + t) * p.hv + head;
          float acc[COLS] = {};
          for (int64_t d = 0; d < dk; ++d) {
            const float wd = bf16_to_float(p.w[row * dk + d]);
            const float* hr = hb.data() + d * COLS;
            for (int j = 0; j < COLS; ++j) acc[j] += wd * hr[j];
          }
          const float gd = g_last - p.g[row];
          const float f = gd <= 0 ? std::exp(gd) : 0.0f;
          float* vr = vblk.data() + (t - t0) * COLS;
          for (int64_t j = 0; j < nc; ++j) {
            const float v = bf16_to_float(p.u[row * dv + j0 + j]) - acc[j];
            p.v_new[row * dv + j0 + j] = float_to_bf16(v);
            vr[j] = round_bf16(v * f);
          }
          for (int64_t j = nc; j < COLS; ++j) vr[j] = 0.f;
        }
        const float decay = std::exp(g_last);
        for (size_t e = 0; e < sl.size(); ++e) sl[e] *= decay;
        for (int64_t t = t0; t < t1; ++t) {
          const uint16_t* krow = p.k + ((bi * p.tokens + t) * p.hk + kh) * dk;
          const float* vr = vblk.data() + (t - t0) * COLS;
          for (int64_t d = 0; d < dk; ++d) {
            const float kd = bf16_to_float(krow[d]);
            float* sr = sl.data() + d * COLS;
            for (int j = 0; j < COLS; ++j) sr[j] += kd * vr[j];
          }
        }
      }
      for (int64_t d = 0; d < dk; ++d)
        for (int64_t j = 0; j < nc; ++j) st[d * dv + j0 + j] = sl[static_cast<size_t>(d * COLS + j)];
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
  const int64_t blocks = (p.dv + COLS - 1) / COLS;
  parallel_rows(p.hv * blocks, p.batch * p.tokens * p.dk * COLS, THREADS, int64_t{1} << 20,
                [&](int64_t lo, int64_t hi) { units(p, lo, hi); });
  return 0;
}
