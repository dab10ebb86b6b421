// atrex-template: panel_dot
// atrex-description: the weight is widened to fp32 once per call; tokens are taken TOK_BLOCK at a time against 4 weight rows, so each widened weight row streamed from cache feeds TOK_BLOCK dot products held in 8-lane fp32 accumulators (vectorisable), then the bias, bf16 gate rounding, sigmoid and post_mul_mat product; weight rows split over up to THREADS std::threads
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: TOK_BLOCK = 4 | 1, 4
#ifndef THREADS
#define THREADS 2
#endif
#ifndef TOK_BLOCK
#define TOK_BLOCK 4
#endif
#define LANES 8
#define COLS 4

#include <cmath>
#include <cstdint>
#include <vector>

#include "atrex/candidate_util.h"

namespace {

using atrex::cand::bf16_to_float;
using atrex::cand::fail;
using atrex::cand::float_to_bf16;
using atrex::cand::kBF16;
using atrex::cand::parallel_rows;

struct Args {
  const float *x, *w;  // widened [T, H], [N, H]
  const uint16_t *bias, *post;
  uint16_t* out;
  int64_t t, n, k;
};

inline float gate_mul(float acc, float bias, float post) {
  const float g = bf16_to_float(float_to_bf16(acc + bias));
  return (1.0f / (1.0f + std::exp(-g))) * post;
}

// Weight rows (output columns) [c_begin, c_end) for every token.
void columns(const Args& a, int64_t c_begin, int64_t c_end) {
  const int64_t k = a.k, main = k / LANES * LANES;
  for (int64_t t0 = 0; t0 < a.t; t0 += TOK_BLOCK) {
    const int tb = static_cast<int>(a.t - t0 < TOK_BLOCK ? a.t - t0 : TOK_BLOCK);
    for (int64_t c0 = c_begin; c0 < c_end; c0 += COLS) {
      const int cb = static_cast<int>(c_end - c0 < COLS ? c_end - c0 : COLS);
      float acc[TOK_BLOCK][COLS][LANES] = {};
      for (int64_t h = 0; h < main; h += LANES)
        for (int c = 0; c < cb; ++c) {
          const float* wr = a.w + (c0 + c) * k + h;
          for (int r = 0; r < tb; ++r) {
            const float* xr = a.x + (t0 + r) * k + h;
            for (int l = 0; l < LANES; ++l) acc[r][c][l] += xr[l] * wr[l];
          }
        }
      for (int r = 0; r < tb; ++r)
        for (int c = 0; c < cb; ++c) {
          float s = 0.f;
          for (int l = 0; l < LANES; ++l) s += acc[r][c][l];
          for (int64_t h = main; h < k; ++h) s += a.x[(t0 + r) * k + h] * a.w[(c0 + c) * k + h];
          const int64_t off = (t0 + r) * a.n + c0 + c;
          a.out[off] = float_to_bf16(gate_mul(s, bf16_to_float(a.bias[c0 + c]), bf16_to_float(a.post[off])));
        }
    }
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// hidden_states [T, H], weight [N, H], bias [N], post_mul_mat [T, N] (bf16) -> out [T, N] bf16.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "linear_sigmoid_mul");
  const DLTensor* x = ts.input("hidden_states", kBF16, 2);
  const DLTensor* w = ts.input("weight", kBF16, 2);
  const DLTensor* b = ts.input("bias", kBF16, 1);
  const DLTensor* p = ts.input("post_mul_mat", kBF16, 2);
  const DLTensor* o = ts.output("out", kBF16, 2);
  ts.same_dims(p, o);
  if (!ts.ok() || !ts.dim_is(w, 1, x->shape[1]) || !ts.dim_is(b, 0, w->shape[0]) ||
      !ts.dim_is(o, 0, x->shape[0]) || !ts.dim_is(o, 1, w->shape[0]))
    return ts.failed();
  const int64_t t = x->shape[0], k = x->shape[1], n = w->shape[0];
  std::vector<float> xf(static_cast<size_t>(t * k)), wf(static_cast<size_t>(n * k));
  const auto* xs = static_cast<const uint16_t*>(x->data);
  const auto* ws = static_cast<const uint16_t*>(w->data);
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = bf16_to_float(xs[i]);
  for (size_t i = 0; i < wf.size(); ++i) wf[i] = bf16_to_float(ws[i]);
  const Args a{xf.data(), wf.data(), static_cast<const uint16_t*>(b->data),
               static_cast<const uint16_t*>(p->data), static_cast<uint16_t*>(o->data), t, n, k};
  parallel_rows(n, t * k, THREADS, int64_t{1} << 20, [&](int64_t lo, int64_t hi) { columns(a, lo, hi); });
  return 0;
}
