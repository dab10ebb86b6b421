// atrex-template: outer_k
// atrex-description: outer-product order: the weight is transposed and widened once per call into [H, N] fp32, then for each token the gate row is built as sum over k of x[t, k] * wT[k, :] in an N_BLOCK-wide fp32 row buffer (contiguous axpy, vectorisable over N), then the bias, bf16 gate rounding, sigmoid and post_mul_mat product over the row; tokens split over up to THREADS std::threads
// atrex-param: THREADS = 2 | 1, 2
// atrex-param: N_BLOCK = 512 | 256, 512, 1024
#ifndef THREADS
#define THREADS 2
#endif
#ifndef N_BLOCK
#define N_BLOCK 512
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
using atrex::cand::parallel_rows;

struct Args {
  const uint16_t* x;
  const float* wt;  // [H, N]
  const uint16_t *bias, *post;
  uint16_t* out;
  int64_t t, n, k;
};

inline float gate_mul(float acc, float bias, float post) {
  const float g = bf16_to_float(float_to_bf16(acc + bias));
  return (1.0f / (1.0f + std::exp(-g))) * post;
}

// Tokens [begin, end).
void tokens(const Args& a, int64_t begin, int64_t end) {
  float acc[N_BLOCK];
  for (int64_t r = begin; r < end; ++r) {
    const uint16_t* xr = a.x + r * a.k;
    for (int64_t c0 = 0; c0 < a.n; c0 += N_BLOCK) {
      const int64_t cb = a.n - c0 < N_BLOCK ? a.n - c0 : N_BLOCK;
      for (int64_t c = 0; c < cb; ++c) acc[c] = 0.f;
      for (int64_t h = 0; h < a.k; ++h) {
        const float xv = bf16_to_float(xr[h]);
        const float* wr = a.wt + h * a.n + c0;
        for (int64_t c = 0; c < cb; ++c) acc[c] += xv * wr[c];
      }
      for (int64_t c = 0; c < cb; ++c) {
        const int64_t off = r * a.n + c0 + c;
        a.out[off] = float_to_bf16(gate_mul(acc[c], bf16_to_float(a.bias[c0 + c]), bf16_to_float(a.post[off])));
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
  std::vector<float> wt(static_cast<size_t>(n * k));
  const auto* ws = static_cast<const uint16_t*>(w->data);
  // Transpose in 64 x 64 tiles so both sides stay in cache.
  for (int64_t c0 = 0; c0 < n; c0 += 64)
    for (int64_t h0 = 0; h0 < k; h0 += 64)
      for (int64_t c = c0; c < (c0 + 64 < n ? c0 + 64 : n); ++c)
        for (int64_t h = h0; h < (h0 + 64 < k ? h0 + 64 : k); ++h)
          wt[static_cast<size_t>(h * n + c)] = bf16_to_float(ws[c * k + h]);
  const Args a{static_cast<const uint16_t*>(x->data), wt.data(), static_cast<const uint16_t*>(b->data),
               static_cast<const uint16_t*>(p->data), static_cast<uint16_t*>(o->data), t, n, k};
  parallel_rows(t, n * k, THREADS, int64_t{1} << 22, [&](int64_t lo, int64_t hi) { tokens(a, lo, hi); });
  return 0;
}
