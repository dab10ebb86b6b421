// atrex-template: row_sweep
// atrex-description: per (batch, head), token by token on the state in place: one sweep over the old state's rows builds h^T k and h^T q together (vectorised over the value columns, UNROLL rows at a time), o = decay h^T q + v' (k.q) needs no sweep of its own, then one fused decay-and-rank-1 update sweep; q and k are L2-normalised through three per-token scalars rather than rescaled copies; heads split over up to THREADS std::threads
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

struct Params {
  const float* a_log;
  const uint16_t *a, *dt_bias, *q, *k, *v, *b;
  const int32_t* idx;
  uint16_t* out;
  float* state;
  int64_t batch, tokens, hq, hv, dk, dv, per;
  float scale, sp_beta, sp_threshold;
  bool l2;
};

// Per-token scalars: decay, beta, the q and k scales (1/||.|| or 1) and q_n . k_n * scale.
struct TokenScalars {
  float decay, beta, iq, ik, qk;
};

TokenScalars scalars(const Params& p, int64_t row, const float* qf, const float* kf, float rate,
                     float bias) {
  float sq = 0.f, sk = 0.f, qk = 0.f;
  for (int64_t d = 0; d < p.dk; ++d) {
    sq += qf[d] * qf[d];
    sk += kf[d] * kf[d];
    qk += qf[d] * kf[d];
  }
  const float x = bf16_to_float(p.a[row]) + bias;
  const float sp = x * p.sp_beta > p.sp_threshold ? x : std::log1p(std::exp(x * p.sp_beta)) / p.sp_beta;
  TokenScalars s;
  s.decay = std::exp(sp * rate);
  s.beta = 1.0f / (1.0f + std::exp(-bf16_to_float(p.b[row])));
  const float iq = p.l2 ? 1.0f / std::fmax(std::sqrt(sq), 1e-6f) : 1.0f;
  s.ik = p.l2 ? 1.0f / std::fmax(std::sqrt(sk), 1e-6f) : 1.0f;
  s.iq = iq * p.scale;
  s.qk = qk * iq * s.ik * p.scale;
  return s;
}

// Heads [begin, end) of every batch entry.
void heads(const Params& p, int64_t begin, int64_t end) {
  const int64_t dk = p.dk, dv = p.dv;
  std::vector<float> qf(static_cast<size_t>(dk)), kf(static_cast<size_t>(dk)), hk(static_cast<size_t>(dv)),
      hq(static_cast<size_t>(dv)), kv(static_cast<size_t>(dv));
  for (int64_t bi = 0; bi < p.batch; ++bi)
    for (int64_t head = begin; head < end; ++head) {
      const int64_t qh = head / p.per < p.hq - 1 ? head / p.per : p.hq - 1;
      float* h = p.state + (static_cast<int64_t>(p.idx[bi]) * p.hv + head) * dk * dv;
      const float rate = -std::exp(p.a_log[head]);
      const float bias = bf16_to_float(p.dt_bias[head]);
      for (int64_t t = 0; t < p.tokens; ++t) {
        const int64_t row = (bi * p.tokens + t) * p.hv + head;
        const int64_t qoff = ((bi * p.tokens + t) * p.hq + qh) * dk;
        for (int64_t d = 0; d < dk; ++d) {
          qf[static_cast<size_t>(d)] = bf16_to_float(p.q[qoff + d]);
          kf[static_cast<size_t>(d)] = bf16_to_float(p.k[qoff + d]);
        }
        const TokenScalars s = scalars(p, row, qf.data(), kf.data(), rate, bias);
        for (int64_t j = 0; j < dv; ++j) hk[static_cast<size_t>(j)] = hq[static_cast<size_t>(j)] = 0.f;
        int64_t d = 0;
        for (; d + UNROLL <= dk; d += UNROLL)
          for (int u = 0; u < UNROLL; ++u) {
            const float* hr = h + (d + u) * dv;
            const float kd = kf[static_cast<size_t>(d + u)], qd = qf[static_cast<size_t>(d + u)];
            for (int64_t j = 0; j < dv; ++j) {
              hk[static_cast<size_t>(j)] += hr[j] * kd;
              hq[static_cast<size_t>(j)] += hr[j] * qd;
            }
          }
        for (; d < dk; ++d) {
          const float* hr = h + d * dv;
          for (int64_t j = 0; j < dv; ++j) {
            hk[static_cast<size_t>(j)] += hr[j] * kf[static_cast<size_t>(d)];
            hq[static_cast<size_t>(j)] += hr[j] * qf[static_cast<size_t>(d)];
          }
        }
        const uint16_t* vr = p.v + row * dv;
        uint16_t* orow = p.out + row * dv;
        for (int64_t j = 0; j < dv; ++j) {
          const float vp = (bf16_to_float(vr[j]) - s.decay * hk[static_cast<size_t>(j)] * s.ik) * s.beta;
          orow[j] = float_to_bf16(s.decay * hq[static_cast<size_t>(j)] * s.iq + vp * s.qk);
          kv[static_cast<size_t>(j)] = vp * s.ik;
        }
        for (d = 0; d < dk; ++d) {
          float* hr = h + d * dv;
          const float kd = kf[static_cast<size_t>(d)];
          for (int64_t j = 0; j < dv; ++j) hr[j] = s.decay * hr[j] + kd * kv[static_cast<size_t>(j)];
        }
      }
    }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// A_log [Hv] f32, a, b [B, T, Hv] bf16, dt_bias [Hv] bf16, q, k [B, T, Hq, dk] bf16,
// v [B, T, Hv, dv] bf16, initial_state_indices [B] i32 -> out [B, T, Hv, dv] bf16,
// final_state [S, Hv, dk, dv] f32 (holding initial_state on entry; the batch's slots advance).
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "gated_delta_rule_update");
  const DLTensor* a_log = ts.input("A_log", kF32, 1);
  const DLTensor* a = ts.input("a", kBF16, 3);
  const DLTensor* dt = ts.input("dt_bias", kBF16, 1);
  const DLTensor* q = ts.input("q", kBF16, 4);
  const DLTensor* k = ts.input("k", kBF16, 4);
  const DLTensor* v = ts.input("v", kBF16, 4);
  const DLTensor* bg = ts.input("b", kBF16, 3);
  const DLTensor* idx = ts.input("initial_state_indices", kI32, 1);
  const DLTensor* out = ts.output("out", kBF16, 4);
  const DLTensor* fin = ts.output("final_state", kF32, 4);
  ts.same_dims(q, k);
  ts.same_dims(v, out);
  if (!ts.ok()) return ts.failed();
  Params p{};
  p.batch = q->shape[0];
  p.tokens = q->shape[1];
  p.hq = q->shape[2];
  p.dk = q->shape[3];
  p.hv = v->shape[2];
  p.dv = v->shape[3];
  const int64_t slots = fin->shape[0];
  if (fin->shape[1] != p.hv || fin->shape[2] != p.dk || fin->shape[3] != p.dv)
    return fail("gated_delta_rule_update: final_state must be [S, Hv, dk, dv]");
  if (p.hq < 1) return fail("gated_delta_rule_update: no q heads");
  p.per = p.hv / p.hq > 1 ? p.hv / p.hq : 1;
  p.idx = static_cast<const int32_t*>(idx->data);
  for (int64_t b = 0; b < p.batch; ++b)
    if (p.idx[b] < 0 || p.idx[b] >= slots)
      return fail("gated_delta_rule_update: initial_state_indices[%lld] = %d is not a slot", (long long)b, p.idx[b]);
  p.a_log = static_cast<const float*>(a_log->data);
  p.a = static_cast<const uint16_t*>(a->data);
  p.dt_bias = static_cast<const uint16_t*>(dt->data);
  p.q = static_cast<const uint16_t*>(q->data);
  p.k = static_cast<const uint16_t*>(k->data);
  p.v = static_cast<const uint16_t*>(v->data);
  p.b = static_cast<const uint16_t*>(bg->data);
  p.out = static_cast<uint16_t*>(out->data);
  p.state = static_cast<float*>(fin->data);
  p.scale = static_cast<float>(atrex_param_float(launch, "scale", 1.0 / std::sqrt(static_cast<double>(p.dk))));
  p.sp_beta = static_cast<float>(atrex_param_float(launch, "softplus_beta", 1.0));
  p.sp_threshold = static_cast<float>(atrex_param_float(launch, "softplus_threshold", 20.0));
  p.l2 = atrex_param_int(launch, "use_qk_l2norm", 1) != 0;
  parallel_rows(p.hv, p.batch * p.tokens * p.dk * p.dv, THREADS, int64_t{1} << 18,
                [&](int64_t lo, int64_t hi) { heads(p, lo, hi); });
  return 0;
}
