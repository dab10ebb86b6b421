// ATTACK D (control for "the judge compares the inputs on every check"): a correct rms_norm that,
// from its second call on, flips one bit of the last element of x AFTER computing its output
// (stream order: the output is right for the original x, the input is left modified).
//
// Before the arena the judge looked at the inputs of a non-first checked call only with
// probability 1/kInputCheckOdds = 1/4 (judge_checks.cpp Judge::check: `if (!inputs && rng_() %
// kInputCheckOdds == 0)`), so with --no-perf a candidate that leaves its inputs modified after the
// first check escaped with probability (3/4)^k over the k later checks of that shape (rms_norm:
// the range probe and seeds 2-5, k = 5, ~24%). A later shape's FIRST check always carries the
// inputs (inputs_due_), so only the first shape evaluated discriminates. With the arena the judge forces `inputs = true` at every check
// (judge_checks.cpp Judge::check, `if (device_arena_) { inputs = true; }`) and compares
// cand_in_ (the arena) with its own draw (Judge::compare, first_difference).
//
// Expected verdict (run with --no-perf --unseen-shapes 0): with the arena, wrong_result on EVERY
// shape, the first one at its second check (the range probe), message "range probe (...): the
// candidate modified its input x ...; inputs are read-only", deterministically. With
// ATREX_DEVICE_ARENA=0: shapes 2 and 3 wrong_result (their first check carries the inputs), the
// first shape wrong_result in ~76% of runs and 'ok' otherwise. With timing on it is caught in both
// modes (the first check after timing and every re-check carry the inputs).
// Honest twin: kernels/faults/rms_norm_correct.cu (or MUTATE 0).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

#ifndef MUTATE
#define MUTATE 1
#endif

namespace {

constexpr int kThreads = 256;

__global__ void rms_norm_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* out,
                                int64_t hidden, float eps) {
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * hidden;
  float ss = 0.f;
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    const float v = __bfloat162float(xr[h]);
    ss += v * v;
  }
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = ss;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = rsqrtf(partial[0] / static_cast<float>(hidden) + eps);
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    out[row * hidden + h] =
        __float2bfloat16_rn(__bfloat162float(xr[h]) * inv * __bfloat162float(w[h]));
  }
}

__global__ void flip_last_bit(unsigned short* x, int64_t n) { x[n - 1] ^= 1u; }

int g_calls = 0;

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  auto stream = static_cast<cudaStream_t>(launch->stream);
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(x->data), static_cast<const __nv_bfloat16*>(w->data),
      static_cast<__nv_bfloat16*>(out->data), hidden, eps);
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(stream, &capturing);
  if (MUTATE && ++g_calls >= 2 && capturing == cudaStreamCaptureStatusNone)
    flip_last_bit<<<1, 1, 0, stream>>>(static_cast<unsigned short*>(x->data), rows * hidden);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
