// chunk_gated_delta_rule_state reference re-expressed as a cpu candidate (atrex candidate ABI
// v1): FLA chunk_gated_delta_rule_fwd_h. The fp32 state of slot initial_state_indices[b] runs
// over the chunks; final_state arrives holding initial_state (in-place semantics), so only the
// batch's slots are written.
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

float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* k = atrex_input(launch, "k");
  const DLTensor* w = atrex_input(launch, "w");
  const DLTensor* u = atrex_input(launch, "u");
  const DLTensor* g = atrex_input(launch, "g");
  const DLTensor* idx = atrex_input(launch, "initial_state_indices");
  const DLTensor* h_out = atrex_output(launch, "h");
  const DLTensor* v_out = atrex_output(launch, "v_new");
  const DLTensor* fin = atrex_output(launch, "final_state");
  if (!k || !w || !u || !g || !idx || !h_out || !v_out || !fin) return 1;
  const int64_t batch = k->shape[0], tokens = k->shape[1], hk = k->shape[2], dk = k->shape[3];
  const int64_t hv = u->shape[2], dv = u->shape[3], chunks = h_out->shape[1], slots = fin->shape[0];
  const int64_t cs = atrex_param_int(launch, "chunk_size", 64);
  const int64_t per = hv / hk > 1 ? hv / hk : 1;
  const auto* ks = static_cast<const uint16_t*>(k->data);
  const auto* ws = static_cast<const uint16_t*>(w->data);
  const auto* us = static_cast<const uint16_t*>(u->data);
  const auto* gs = static_cast<const float*>(g->data);
  const auto* is = static_cast<const int32_t*>(idx->data);
  auto* hs = static_cast<uint16_t*>(h_out->data);
  auto* vn = static_cast<uint16_t*>(v_out->data);
  auto* fs = static_cast<float*>(fin->data);
  std::vector<float> vblk(static_cast<size_t>(cs * dv));
  for (int64_t b = 0; b < batch; ++b) {
    if (is[b] < 0 || is[b] >= slots) return 2;
    for (int64_t head = 0; head < hv; ++head) {
      const int64_t kh = head / per < hk - 1 ? head / per : hk - 1;
      float* state = fs + (is[b] * hv + head) * dk * dv;  // starts as initial_state
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t start = c * cs, end = start + cs < tokens ? start + cs : tokens;
        uint16_t* hc = hs + ((b * chunks + c) * hv + head) * dk * dv;
        for (int64_t e = 0; e < dk * dv; ++e) hc[e] = float_to_bf16(state[e]);
        for (int64_t t = start; t < end; ++t) {  // v = u - w bf16(h)
          const int64_t row = (b * tokens + t) * hv + head;
          float* vr = vblk.data() + (t - start) * dv;
          for (int64_t j = 0; j < dv; ++j) vr[j] = 0;
          for (int64_t d = 0; d < dk; ++d) {
            const float wd = bf16_to_float(ws[row * dk + d]);
            for (int64_t j = 0; j < dv; ++j) vr[j] += wd * bf16_to_float(hc[d * dv + j]);
          }
          for (int64_t j = 0; j < dv; ++j) {
            vr[j] = bf16_to_float(us[row * dv + j]) - vr[j];
            vn[row * dv + j] = float_to_bf16(vr[j]);
          }
        }
        const float g_last = gs[(b * tokens + end - 1) * hv + head];
        const float decay = std::exp(g_last);
        for (int64_t e = 0; e < dk * dv; ++e) state[e] *= decay;
        for (int64_t t = start; t < end; ++t) {  // state += k^T bf16(v * exp(g_last - g_t))
          const float gd = g_last - gs[(b * tokens + t) * hv + head];
          const float f = gd <= 0 ? std::exp(gd) : 0.0f;
          const uint16_t* krow = ks + ((b * tokens + t) * hk + kh) * dk;
          const float* vr = vblk.data() + (t - start) * dv;
          for (int64_t d = 0; d < dk; ++d) {
            const float kd = bf16_to_float(krow[d]);
            for (int64_t j = 0; j < dv; ++j) state[d * dv + j] += kd * round_bf16(vr[j] * f);
          }
        }
      }
    }
  }
  return 0;
}
