// silu_and_mul and moe_sum_reduce references (alibaba/atrex-bench data/<op>/reference.py).
#pragma once

#include <cstdint>

#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"

namespace atrex::problems::ops {

// x: [N, 2d] -> out: [N, d]; act = bf16(silu(float(x[:, :d]))); out = bf16(float(act) * float(x[:,
// d:2d])). silu(z) = z / (1 + exp(-z)) in fp32. An odd last dim uses d = floor(cols / 2) as torch
// does.
struct SiluAndMulRow {
  const uint16_t* x;
  uint16_t* out;
  int64_t cols;  // input row length
  int64_t d;     // output row length
  ATREX_HD void operator()(int64_t row) const {
    const uint16_t* xr = x + row * cols;
    for (int64_t j = 0; j < d; ++j) {
      const float g = num::bf16_to_float(xr[j]);
      const float act = num::round_bf16(g / (1.0f + expf(-g)));
      out[row * d + j] = num::float_to_bf16(act * num::bf16_to_float(xr[d + j]));
    }
  }
};

// expert_outputs: [T, K, H] -> out: [T, H] = bf16(float(sum_k x[t, k, :]) * routed_scaling_factor).
struct MoeSumReduceRow {
  const uint16_t* x;
  uint16_t* out;
  int64_t top_k;
  int64_t hidden;
  float scale;
  ATREX_HD void operator()(int64_t token) const {
    const uint16_t* xt = x + token * top_k * hidden;
    for (int64_t h = 0; h < hidden; ++h) {
      double acc = 0;
      for (int64_t k = 0; k < top_k; ++k) acc += num::bf16_to_float(xt[k * hidden + h]);
      out[token * hidden + h] = num::float_to_bf16(static_cast<float>(acc) * scale);
    }
  }
};

template <class Exec>
void silu_and_mul_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                            void* const* out) {
  const auto& xin = s.inputs[0];
  const int64_t cols = xin.dims.back();
  const int64_t rows = xin.numel() / cols;
  SiluAndMulRow f{static_cast<const uint16_t*>(in[0]), static_cast<uint16_t*>(out[0]), cols,
                  cols / 2};
  ex.for_each(rows, f);
}

template <class Exec>
void moe_sum_reduce_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                              void* const* out) {
  MoeSumReduceRow f{static_cast<const uint16_t*>(in[0]), static_cast<uint16_t*>(out[0]),
                    s.int_param("top_k"), s.int_param("hidden_size"),
                    static_cast<float>(s.float_param("routed_scaling_factor"))};
  ex.for_each(s.int_param("token_count"), f);
}

}  // namespace atrex::problems::ops
