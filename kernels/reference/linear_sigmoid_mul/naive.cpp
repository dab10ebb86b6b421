// Reference re-expressed as a cpu candidate: linear_sigmoid_mul.
// gate = bf16(hidden_states [T, H] @ weight [N, H]^T + bias [N]) with fp32 accumulation;
// out [T, N] = bf16(sigmoid(gate) * post_mul_mat) in fp32.
#include <cmath>
#include <cstring>
#include <vector>

#include "atrex/candidate.h"

static float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even (inputs here are finite).
static uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "hidden_states");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* b = atrex_input(launch, "bias");
  const DLTensor* post = atrex_input(launch, "post_mul_mat");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !b || !post || !out || x->ndim != 2 || w->ndim != 2 || w->shape[1] != x->shape[1])
    return 1;
  const int64_t t_count = x->shape[0], hidden = x->shape[1], n_count = w->shape[0];
  // Widen once so the inner loop is a plain fp32 dot product.
  std::vector<float> xf(static_cast<size_t>(t_count * hidden)),
      wf(static_cast<size_t>(n_count * hidden));
  for (size_t i = 0; i < xf.size(); ++i)
    xf[i] = bf16_to_float(static_cast<const uint16_t*>(x->data)[i]);
  for (size_t i = 0; i < wf.size(); ++i)
    wf[i] = bf16_to_float(static_cast<const uint16_t*>(w->data)[i]);
  const auto* bs = static_cast<const uint16_t*>(b->data);
  const auto* ps = static_cast<const uint16_t*>(post->data);
  auto* os = static_cast<uint16_t*>(out->data);
  for (int64_t t = 0; t < t_count; ++t) {
    for (int64_t n = 0; n < n_count; ++n) {
      const float* xr = xf.data() + t * hidden;
      const float* wr = wf.data() + n * hidden;
      float acc = 0.0f;
      for (int64_t k = 0; k < hidden; ++k) acc += xr[k] * wr[k];
      const float gate = bf16_to_float(float_to_bf16(acc + bf16_to_float(bs[n])));
      const float sig = 1.0f / (1.0f + std::exp(-gate));
      os[t * n_count + n] = float_to_bf16(sig * bf16_to_float(ps[t * n_count + n]));
    }
  }
  return 0;
}
