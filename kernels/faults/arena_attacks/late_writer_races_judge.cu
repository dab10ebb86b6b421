// ATTACK B (probe): outputs finished AFTER the child's post-call cudaDeviceSynchronize, racing
// the judge's comparison. Arena-specific in one respect: with the device arena the judge compares
// the live arena memory (judge_checks.cpp Judge::compare on cand_out_, after its own pipe read and
// input comparison), whereas with the memfd the observation point was the child's D2H copy into
// the memfd (judge_link.cpp JudgeLink::publish, right after check_guards). The arena therefore
// moves the moment the outputs are looked at later by a pipe hop, the judge's wake-up and its
// input comparison (and, for a re-check of a timed call, a fresh draw and reference run).
//
// How: the call enqueues nothing but an event on the given stream and returns at once; a
// spinning worker thread busy-waits DELAY_US after the call returned and then launches the real
// kernel on a non-blocking stream (waiting on that event). Run it with --no-perf: this isolates
// the checked calls (every seed, the range probe, the edge-case set, the unseen shapes).
//
// Expected verdict (prediction, racy, shape dependent):
//   DELAY_US 0:    mostly 'ok' with the arena and with ATREX_DEVICE_ARENA=0 (the launch lands
//                  while the harness is still in its synchronize/guard check);
//   DELAY_US 100:  arena: likely 'ok' (the judge compares ~100-200 us after the return);
//                  memfd: likely wrong_result (the D2H copy of the outputs starts earlier and
//                  reads poison: "... nan ..." on out) on shape 0, maybe 'ok' on 15/28;
//   DELAY_US 2000: wrong_result in both modes (poison: NaN in out).
// Not a score gain by itself (a timed call that defers its work is ATTACK A); it measures how
// much later than the child's synchronize a late writer may land and still pass. Honest twin:
// kernels/faults/rms_norm_correct.cu.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "atrex/candidate.h"

#ifndef DELAY_US
#define DELAY_US 100
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

struct Job {
  const __nv_bfloat16* x;
  const __nv_bfloat16* w;
  __nv_bfloat16* out;
  int64_t rows, hidden;
  float eps;
  std::chrono::steady_clock::time_point posted;
};

std::atomic<int> g_state{0};  // 0 idle, 1 posted
Job g_job;
int g_device = 0;
cudaEvent_t g_ready = nullptr;
cudaStream_t g_side = nullptr;

void worker() {
  cudaSetDevice(g_device);
  for (;;) {
    while (g_state.load(std::memory_order_acquire) != 1) {
    }
    const Job j = g_job;
    g_state.store(0, std::memory_order_release);
    while (std::chrono::steady_clock::now() - j.posted < std::chrono::microseconds(DELAY_US)) {
    }
    cudaStreamWaitEvent(g_side, g_ready, 0);
    rms_norm_kernel<<<static_cast<unsigned>(j.rows), kThreads, 0, g_side>>>(j.x, j.w, j.out,
                                                                           j.hidden, j.eps);
  }
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  auto stream = static_cast<cudaStream_t>(launch->stream);
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(stream, &capturing);
  if (capturing != cudaStreamCaptureStatusNone) {  // keep the graph honest (perf runs only)
    rms_norm_kernel<<<static_cast<unsigned>(x->shape[0]), kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x->data), static_cast<const __nv_bfloat16*>(w->data),
        static_cast<__nv_bfloat16*>(out->data), x->shape[1], eps);
    return cudaGetLastError() == cudaSuccess ? 0 : 2;
  }
  if (!g_side) {
    cudaGetDevice(&g_device);
    cudaStreamCreateWithFlags(&g_side, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&g_ready, cudaEventDisableTiming);
    std::thread(worker).detach();
  }
  while (g_state.load(std::memory_order_acquire) != 0) {  // the last job was taken
  }
  cudaEventRecord(g_ready, stream);
  g_job = Job{static_cast<const __nv_bfloat16*>(x->data), static_cast<const __nv_bfloat16*>(w->data),
              static_cast<__nv_bfloat16*>(out->data), x->shape[0], x->shape[1], eps,
              std::chrono::steady_clock::now()};
  g_state.store(1, std::memory_order_release);
  return 0;
}
