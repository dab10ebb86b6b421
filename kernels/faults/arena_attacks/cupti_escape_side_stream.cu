// ATTACK A: "work outside the timed span" (fake-fast). NOT specific to the device arena: works
// the same with ATREX_DEVICE_ARENA=0.
//
// What it attacks: the cuda timing of timed calls (CUPTI spans, timing_mode auto) and the fact
// that the judge observes outputs only at checks made after a device-wide synchronize.
//   * A timed call is traced as "the CUPTI kernel/memcpy/memset records whose launch carried the
//     external correlation id the harness pushed on the calling thread" (cupti_trace.cpp
//     CuptiTrace::begin/collect: records without that id are counted and skipped).
//   * The eager event window ends with an event on cudaStreamLegacy (cuda_timer.cpp time_eager),
//     which does not wait for a cudaStreamNonBlocking stream.
//   * Every check (seeds, range probe, edge case, re-checks of timed calls, the checks after
//     timing) runs after cudaDeviceSynchronize (shape_checks.cpp call_and_check,
//     shape_measure.cpp recheck_timed_call / measure), which DOES wait for every stream.
// So in a timed call the candidate:
//   1. launches a one-block "pacer" of the SAME __global__ function on the given stream that spins
//      on %globaltimer for PACE x (minimal bytes / theoretical HBM bandwidth, from the device's
//      memory clock and bus width): the only correlated record, so the sample is the pacer's
//      span, chosen just slower than the roofline so that the impossible-speed rule
//      (T_roofline/T_p75 > 1.25, problems/roofline.h) does not fire;
//   2. records an event on the given stream after the pacer (so after the harness's input copy,
//      splice and poisoning of this call);
//   3. ATTACK 1: pops the harness's CUPTI external correlation id off its own thread
//      (cuptiActivityPopExternalCorrelationId; libcupti is already loaded by the harness, found
//      with dlopen RTLD_NOLOAD), launches the real rms_norm on a private cudaStreamNonBlocking
//      stream that waits for that event, and pushes the id back: an uncorrelated record.
//      ATTACK 2 (no CUPTI API at all): in every call not under stream capture, a spinning worker
//      thread makes the same launch (its API calls never carry an external id) and the call waits
//      until it is enqueued (also fools --timing-mode eager: the stop event is on the legacy
//      stream).
// The real kernel is enqueued before the call returns, so every synchronize of the harness waits
// for it: every check sees correct outputs. The kernel-name multiset of each timed call is
// {rms_norm_kernel} (check_kernel_sets passes; no ghost-kernel flag: the same function is
// launched), the host work after the pacer overlaps it so the event window stays within 20 us of
// the span (no cupti_fallback), the judge's brackets hold no real work (and are under its 5 ms
// floor anyway). ATTACK 1 outside timed calls, and both under stream capture (the graph captured
// for the replay re-check after timing), launch the honest kernel on the given stream.
// SLOW_US > 0 makes the real kernel last at least SLOW_US (one block spins after its row): the
// claimed time does not move.
//
// Expected verdict (my prediction under the current code): 'ok' on every shape, timing.method
// cupti_kernel_span_l2_flush, no cupti_fallback, shape 0 timed at ~PACE x 3.06 us + the kernel's
// ~1 us floor (~4-4.5 us on an H100, s_j ~0.7-0.8) whatever the real kernel costs; with
// SLOW_US=20000 still 'ok' at ~4-4.5 us while the honest twin (ATTACK 0, SLOW_US=20000) is timed
// at >= 20000 us (its brackets then also exceed the judge's 5 ms floor; the attack's brackets hold
// no real work, so the judge's clock cannot refute it). Shapes 15 and 28 are launch-bound: no
// visible gain there. If CUPTI is not available (graph-replay timing) the attack is inert and it is
// timed honestly (the captured call is the honest one). Risk to the attack: if the host work of
// the call exceeds the pacer by more than ~20 us (a very loaded host), the samples switch to event
// times ("cupti_fallback") and the attack loses its gain, without any failure.
// Honest twin: ATTACK 0 (the same kernel launched normally on the given stream), or
// kernels/faults/rms_norm_correct.cu.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <thread>

#include "atrex/candidate.h"

#ifndef ATTACK
#define ATTACK 1  // 0 honest twin, 1 CUPTI pop/push, 2 worker thread
#endif
#ifndef PACE
#define PACE 1.15  // pacer = PACE x minimal-bytes / theoretical bandwidth
#endif
#ifndef SLOW_US
#define SLOW_US 0  // >0: the real kernel lasts at least this long
#endif

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One function for the pacer (pace_ns > 0) and the real work, so both carry the same name.
__global__ void rms_norm_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* out,
                                int64_t hidden, float eps, unsigned long long pace_ns,
                                unsigned long long slow_ns) {
  if (pace_ns > 0) {
    if (threadIdx.x == 0) {
      const unsigned long long t0 = global_ns();
      while (global_ns() - t0 < pace_ns) {
      }
    }
    return;
  }
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
  if (slow_ns > 0 && row == 0 && threadIdx.x == 0) {
    const unsigned long long t0 = global_ns();
    while (global_ns() - t0 < slow_ns) {
    }
  }
}

struct Args {
  const __nv_bfloat16* x;
  const __nv_bfloat16* w;
  __nv_bfloat16* out;
  int64_t rows, hidden;
  float eps;
};

void launch_real(const Args& a, cudaStream_t s) {
  rms_norm_kernel<<<static_cast<unsigned>(a.rows), kThreads, 0, s>>>(
      a.x, a.w, a.out, a.hidden, a.eps, 0ull, static_cast<unsigned long long>(SLOW_US) * 1000ull);
}

// --- the harness's CUPTI, reached in place (it is loaded RTLD_LOCAL by the child) -------------
using PushFn = int (*)(int, uint64_t);
using PopFn = int (*)(int, uint64_t*);
constexpr int kCustom0 = 3;  // CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0
PushFn g_push = nullptr;
PopFn g_pop = nullptr;
bool g_cupti_looked = false;

void find_cupti() {
  if (g_cupti_looked) return;
  g_cupti_looked = true;
  for (const char* name : {"libcupti.so.13", "libcupti.so.12", "libcupti.so"}) {
    void* h = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
    if (!h) continue;
    g_push = reinterpret_cast<PushFn>(dlsym(h, "cuptiActivityPushExternalCorrelationId"));
    g_pop = reinterpret_cast<PopFn>(dlsym(h, "cuptiActivityPopExternalCorrelationId"));
    if (g_push && g_pop) return;
    g_push = nullptr;
    g_pop = nullptr;
  }
}

// --- the worker thread of ATTACK 2 -----------------------------------------------------------
std::atomic<int> g_state{0};  // 0 idle, 1 job posted, 2 enqueued
Args g_job;
int g_device = 0;
cudaEvent_t g_ready = nullptr;
cudaStream_t g_side = nullptr;

void worker() {
  cudaSetDevice(g_device);
  for (;;) {
    while (g_state.load(std::memory_order_acquire) != 1) {
    }
    cudaStreamWaitEvent(g_side, g_ready, 0);
    launch_real(g_job, g_side);
    g_state.store(2, std::memory_order_release);
  }
}

double theoretical_bandwidth() {
  int dev = 0, khz = 0, bits = 0;
  cudaGetDevice(&dev);
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess ||
      khz <= 0 || bits <= 0) {
    cudaGetLastError();
    return 3.35e12;
  }
  return 2.0 * khz * 1e3 * bits / 8.0;  // DDR
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  auto stream = static_cast<cudaStream_t>(launch->stream);
  Args a{static_cast<const __nv_bfloat16*>(x->data), static_cast<const __nv_bfloat16*>(w->data),
         static_cast<__nv_bfloat16*>(out->data), x->shape[0], x->shape[1],
         static_cast<float>(atrex_param_float(launch, "eps", 1e-6))};
  // Which calls take the attack path:
  //   ATTACK 1: the timed ones only, i.e. those with an external correlation id on this thread
  //             (trace_call pushes one around the call; no other call has one, and a captured
  //             call never does);
  //   ATTACK 2: every call not under stream capture (no CUPTI API used at all).
  bool attack = false;
  uint64_t id = 0;
  if (ATTACK == 1) {
    find_cupti();
    if (g_pop && g_pop(kCustom0, &id) == 0) {
      attack = true;
      g_push(kCustom0, id);  // the pacer below must carry it
    }
  } else if (ATTACK == 2) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(stream, &capturing);
    attack = capturing == cudaStreamCaptureStatusNone;
  }
  if (!attack) {
    launch_real(a, stream);
    return cudaGetLastError() == cudaSuccess ? 0 : 2;
  }
  static const double bandwidth = theoretical_bandwidth();
  if (!g_side) {
    cudaStreamCreateWithFlags(&g_side, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&g_ready, cudaEventDisableTiming);
  }
  // The pacer first: the host work below overlaps it, so the event window (start event ... call
  // ... stop event on the legacy stream) stays within 20 us of the span (shape_measure.cpp: a
  // larger gap would switch the samples to the event times).
  const double bytes = 2.0 * static_cast<double>(a.rows * a.hidden) * 2.0 +
                       2.0 * static_cast<double>(a.hidden);
  const auto pace_ns = static_cast<unsigned long long>(PACE * bytes / bandwidth * 1e9) + 1ull;
  rms_norm_kernel<<<1, 32, 0, stream>>>(a.x, a.w, a.out, a.hidden, a.eps, pace_ns, 0ull);
  // After the pacer in stream order, so after this call's input copy, splice and poisoning.
  cudaEventRecord(g_ready, stream);
  if (ATTACK == 1) {
    g_pop(kCustom0, &id);  // launched while this thread carries no id: an uncorrelated record
    cudaStreamWaitEvent(g_side, g_ready, 0);
    launch_real(a, g_side);
    g_push(kCustom0, id);
  } else {
    static bool started = false;
    if (!started) {
      cudaGetDevice(&g_device);
      std::thread(worker).detach();
      started = true;
    }
    g_job = a;
    g_state.store(1, std::memory_order_release);
    // Enqueued before the return, so any later synchronize of the harness waits for it.
    while (g_state.load(std::memory_order_acquire) != 2) {
    }
    g_state.store(0, std::memory_order_release);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
