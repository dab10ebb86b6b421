// gated_delta_rule_update reference re-expressed as a cpu candidate (atrex candidate ABI v1):
// the recurrent gated delta rule token by token on the fp32 state of slot
// initial_state_indices[b]; final_state arrives holding initial_state (in-place semantics).
#include <cmath>
#include <cstring>
#include <vector>

#include "atrex/candidate.h"

namespace {

float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// x / max(||x||, 1e-6) into out (or a plain copy without normalisation).
void load_row(const uint16_t* x, int64_t n, bool l2, float* out) {
  float ss = 0;
  for (int64_t d = 0; d < n; ++d) {
    out[d] = bf16_to_float(x[d]);
    ss += out[d] * out[d];
  }
  if (!l2) return;
  const float norm = std::fmax(std::sqrt(ss), 1e-6f);
  for (int64_t d = 0; d < n; ++d) out[d] /= norm;
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* a_log = atrex_input(launch, "A_log");
  const DLTensor* a = atrex_input(launch, "a");
  const DLTensor* dt = atrex_input(launch, "dt_bias");
  const DLTensor* q = atrex_input(launch, "q");
  const DLTensor* k = atrex_input(launch, "k");
  const DLTensor* v = atrex_input(launch, "v");
  const DLTensor* bg = atrex_input(launch, "b");
  const DLTensor* idx = atrex_input(launch, "initial_state_indices");
  const DLTensor* out = atrex_output(launch, "out");
  const DLTensor* fin = atrex_output(launch, "final_state");
  if (!a_log || !a || !dt || !q || !k || !v || !bg || !idx || !out || !fin) return 1;
  const int64_t batch = q->shape[0], tokens = q->shape[1], hq = q->shape[2], dk = q->shape[3];
  const int64_t hv = v->shape[2], dv = v->shape[3], slots = fin->shape[0];
  const float scale = static_cast<float>(
      atrex_param_float(launch, "scale", 1.0 / std::sqrt(static_cast<double>(dk))));
  const float sp_beta = static_cast<float>(atrex_param_float(launch, "softplus_beta", 1.0));
  const float sp_threshold =
      static_cast<float>(atrex_param_float(launch, "softplus_threshold", 20.0));
  const bool l2 = atrex_param_int(launch, "use_qk_l2norm", 1) != 0;
  const int64_t per = hv / hq > 1 ? hv / hq : 1;
  const auto* is = static_cast<const int32_t*>(idx->data);
  std::vector<float> qn(static_cast<size_t>(dk)), kn(static_cast<size_t>(dk)),
      hk(static_cast<size_t>(dv));
  for (int64_t b = 0; b < batch; ++b) {
    if (is[b] < 0 || is[b] >= slots) return 2;
    for (int64_t head = 0; head < hv; ++head) {
      const int64_t qh = head / per < hq - 1 ? head / per : hq - 1;
      float* h = static_cast<float*>(fin->data) +
                 (is[b] * hv + head) * dk * dv;  // starts as initial_state
      const float rate = -std::exp(static_cast<const float*>(a_log->data)[head]);
      const float bias = bf16_to_float(static_cast<const uint16_t*>(dt->data)[head]);
      for (int64_t t = 0; t < tokens; ++t) {
        const int64_t row = (b * tokens + t) * hv + head;
        load_row(static_cast<const uint16_t*>(q->data) + ((b * tokens + t) * hq + qh) * dk, dk, l2,
                 qn.data());
        load_row(static_cast<const uint16_t*>(k->data) + ((b * tokens + t) * hq + qh) * dk, dk, l2,
                 kn.data());
        const float x = bf16_to_float(static_cast<const uint16_t*>(a->data)[row]) + bias;
        const float sp =
            x * sp_beta > sp_threshold ? x : std::log1p(std::exp(x * sp_beta)) / sp_beta;
        const float decay = std::exp(sp * rate);
        const float beta =
            1.0f / (1.0f + std::exp(-bf16_to_float(static_cast<const uint16_t*>(bg->data)[row])));
        for (int64_t j = 0; j < dv; ++j) hk[j] = 0;
        for (int64_t d = 0; d < dk; ++d) {
          for (int64_t j = 0; j < dv; ++j) {
            h[d * dv + j] *= decay;
            hk[j] += h[d * dv + j] * kn[d];
          }
        }
        const uint16_t* vrow = static_cast<const uint16_t*>(v->data) + row * dv;
        for (int64_t j = 0; j < dv; ++j) hk[j] = (bf16_to_float(vrow[j]) - hk[j]) * beta;  // v'
        std::vector<float> o(static_cast<size_t>(dv), 0.0f);
        for (int64_t d = 0; d < dk; ++d) {
          for (int64_t j = 0; j < dv; ++j) {
            h[d * dv + j] += kn[d] * hk[j];
            o[j] += h[d * dv + j] * (qn[d] * scale);
          }
        }
        uint16_t* orow = static_cast<uint16_t*>(out->data) + row * dv;
        for (int64_t j = 0; j < dv; ++j) orow[j] = float_to_bf16(o[j]);
      }
    }
  }
  return 0;
}
