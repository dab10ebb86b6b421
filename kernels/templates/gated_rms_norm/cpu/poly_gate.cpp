// atrex-template: poly_gate
// atrex-description: the activation (silu or sigmoid) and the gate's place fixed at compile time so no loop selects per element; pass 1 computes the gate with a vectorisable polynomial exp (FAST_EXP=1; libm expf with 0), stores the gated input and the gate as fp32 and sums squares over 8 accumulators in the same loop; pass 2 scales by rstd and the weight decoded to fp32 once per call; rows split over up to THREADS std::threads (1: serial; more from 64 thousand elements per thread)
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: FAST_EXP = 1 | 0, 1
#ifndef THREADS
#define THREADS 2
#endif
#ifndef FAST_EXP
#define FAST_EXP 1
#endif
#define MIN_KELEMS 64

#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "atrex/candidate_util.h"

namespace {

using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::bf16_to_float;
using atrex::cand::float_to_bf16;
using atrex::cand::parallel_rows;

struct Args {
  const uint16_t* x;
  const float* w;  // decoded to fp32 once per call
  const uint16_t* z;
  uint16_t* out;
  int64_t hidden;
  float eps;
  bool norm_before_gate, sigmoid;
};

// exp(x) without libm (vectorisable): x = n ln2 + r with |r| <= ln2 / 2 (two-part ln2), a
// degree-7 Taylor polynomial for e^r (relative error below 3e-9), 2^n through the exponent bits.
// x is clamped to [-87, 88]: beyond, the gate is 0 or 1 (sigmoid) / 0 or v (silu) to fp32 anyway.
inline float exp_poly(float x) {
  x = x < -87.f ? -87.f : (x > 88.f ? 88.f : x);
  const float n = __builtin_nearbyintf(x * 1.44269504088896341f);
  const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;
  const float p =
      1.f + r * (1.f + r * (0.5f + r * (1.f / 6 + r * (1.f / 24 + r * (1.f / 120 + r * (1.f / 720 +
                                                                                    r * (1.f / 5040)))))));
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

inline float exp_f(float x) { return FAST_EXP ? exp_poly(x) : std::exp(x); }

// Rows [begin, end) with the activation and the gate's place fixed at compile time, so no loop
// selects per element: pass 1 writes the gate and the normalised input (x or x * gate) to fp32
// row buffers and sums squares over 8 accumulators in the same loop; pass 2 scales by rstd and
// the call's fp32 weight (and the gate when it comes after the norm).
template <bool kSigmoid, bool kNormFirst>
void rows_t(const Args& a, int64_t begin, int64_t end) {
  const int64_t hd = a.hidden;
  std::vector<float> in(static_cast<size_t>(hd)), gate(static_cast<size_t>(hd));
  float* ip = in.data();
  float* gp = gate.data();
  for (int64_t r = begin; r < end; ++r) {
    const uint16_t* xr = a.x + r * hd;
    const uint16_t* zr = a.z + r * hd;
    uint16_t* orow = a.out + r * hd;
    float acc[8] = {};
    int64_t h = 0;
    for (; h + 8 <= hd; h += 8)
      for (int u = 0; u < 8; ++u) {
        const float v = bf16_to_float(zr[h + u]);
        const float e = exp_f(-v);
        const float act = kSigmoid ? 1.0f / (1.0f + e) : v / (1.0f + e);
        const float xv = bf16_to_float(xr[h + u]);
        const float in_v = kNormFirst ? xv : xv * act;
        ip[h + u] = in_v;
        gp[h + u] = act;
        acc[u] += in_v * in_v;
      }
    float ss = 0.f;
    for (int u = 0; u < 8; ++u) ss += acc[u];
    for (; h < hd; ++h) {
      const float v = bf16_to_float(zr[h]);
      const float e = exp_f(-v);
      const float act = kSigmoid ? 1.0f / (1.0f + e) : v / (1.0f + e);
      const float xv = bf16_to_float(xr[h]);
      ip[h] = kNormFirst ? xv : xv * act;
      gp[h] = act;
      ss += ip[h] * ip[h];
    }
    const float rstd = 1.0f / std::sqrt(ss / static_cast<float>(hd) + a.eps);
    for (h = 0; h < hd; ++h) {
      const float o = (ip[h] * rstd) * a.w[h];
      orow[h] = float_to_bf16(kNormFirst ? o * gp[h] : o);
    }
  }
}

void rows(const Args& a, int64_t begin, int64_t end) {
  if (a.sigmoid)
    a.norm_before_gate ? rows_t<true, true>(a, begin, end) : rows_t<true, false>(a, begin, end);
  else
    a.norm_before_gate ? rows_t<false, true>(a, begin, end) : rows_t<false, false>(a, begin, end);
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// x, z [rows, H], weight [H] (bf16) -> out [rows, H] bf16.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "gated_rms_norm");
  const DLTensor* x = ts.input("x", kBF16, 2);
  const DLTensor* w = ts.input("weight", kBF16, 1);
  const DLTensor* z = ts.input("z", kBF16, 2);
  const DLTensor* o = ts.output("out", kBF16, 2);
  ts.same_dims(x, z);
  ts.same_dims(x, o);
  if (!ts.ok()) return ts.failed();
  if (w->shape[0] != x->shape[1]) return fail("gated_rms_norm: weight must be [hidden_size]");
  const AtrexParam* ap = atrex_param(launch, "activation");
  const char* act_name = ap && ap->string_value ? ap->string_value : "silu";
  const bool sigmoid = std::strcmp(act_name, "sigmoid") == 0;
  if (!sigmoid && std::strcmp(act_name, "silu") != 0 && std::strcmp(act_name, "swish") != 0)
    return fail("gated_rms_norm: activation \"%s\" is not silu, swish or sigmoid", act_name);
  std::vector<float> wf(static_cast<size_t>(x->shape[1]));
  const auto* wp = static_cast<const uint16_t*>(w->data);
  for (int64_t h = 0; h < x->shape[1]; ++h) wf[static_cast<size_t>(h)] = bf16_to_float(wp[h]);
  const Args a{static_cast<const uint16_t*>(x->data), wf.data(),
               static_cast<const uint16_t*>(z->data), static_cast<uint16_t*>(o->data), x->shape[1],
               static_cast<float>(atrex_param_float(launch, "eps", 1e-6)),
               atrex_param_int(launch, "norm_before_gate", 1) != 0, sigmoid};
  parallel_rows(x->shape[0], a.hidden, THREADS, int64_t{MIN_KELEMS} * 1024,
                [&](int64_t begin, int64_t end) { rows(a, begin, end); });
  return 0;
}
