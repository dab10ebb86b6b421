// STRAY ATTACK 2: the real kernel launched INSIDE the timed call, on the tracing thread, under a
// bogus CUPTI external correlation id: collect() files it under an id that no timed call has, so
// it is neither a sample's record nor a stray. Written against /work/main at 81aacf0 (defenses of
// 1929890). NOT run on a GPU (none here).
//
// cupti_trace.cpp collect(): a device record whose correlation id maps to ANY external id
// (:209-210, the EXTERNAL_CORRELATION records of kind CUSTOM0, :173-177) is "correlated":
// `out[that id]` gets it (:225-231) and the stray rules (:211-222; kernel_checks.cpp
// check_stray_work: other thread / in a call without its id / foreign name) never look at it.
// shape_measure.cpp reads samples only for ids first..next_call (:246-249) and check_kernel_sets
// only for the calls of trace_set (kernel_checks.cpp:19): out[bogus] is ignored (it only enters
// attribute_kernels' shares and timing.cupti_records' "correlated" count, which no rule reads).
// So in a timed call (an id on the thread: only trace_call pushes one):
//   1. a one-block pacer of the candidate's own kernel, carrying the call's id k: the sample is
//      its span (PACE x minimal bytes / theoretical bandwidth: under the impossible-speed rule);
//   2. pop k, push B = 0xB0B0... (never a call's id), launch the real rms_norm, pop B, push k:
//      SIDE 0: on the given stream after the pacer: the event window holds it (the stop event on
//              the legacy stream waits for the blocking stream), bounded by the CUPTI fallback
//              rule: ev - span must stay <= max(20 us, 25% span) (shape_measure.cpp:311);
//      SIDE 1: on a private non-blocking stream that waits for an event recorded BEFORE the pacer
//              (after the harness's copies/splice/poison of this call), so the real kernel runs
//              beside the pacer; the stop event does not wait for it; what outlives the stop
//              event is in the drain, bounded by max(20 us, 25% median sample)
//              (shape_measure.cpp:294-304, cuda_timer.cpp:54-58).
// Both bounds are 20 us on small shapes: work up to ~20 us (plus the pacer's length for SIDE 1)
// per call is free, i.e. every launch-bound / small shape is timed at the pacer whatever its
// kernel costs. The checks come after synchronizes: outputs right. Warm-up, correctness and the
// captured call are honest (no id), so the graph replay re-check passes.
//
// PREDICTED: ok, cupti_kernel_span_l2_flush, no cupti_fallback, shape 0 at the pacer's
// ~PACE x t_roof + ~1-2 us (s_j ~0.7-0.85); SLOW_US=12 still ok at that time while the twin
// (ATTACK 0 SLOW_US=12) is >= 12 us; SLOW_US=60: SIDE 0 -> ok but cupti_fallback (event time,
// no gain), SIDE 1 -> rejected "device work outlived the timed calls".
// Failure codes: 11 no libcupti in the process.
// Honest twin: ATTACK 0.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdint>

#include "atrex/candidate.h"

#ifndef ATTACK
#define ATTACK 1  // 0 honest twin, 1 bogus external id
#endif
#ifndef SIDE
#define SIDE 1  // 0 real kernel on the given stream, 1 on a non-blocking stream beside the pacer
#endif
#ifndef PACE
#define PACE 1.15
#endif
#ifndef SLOW_US
#define SLOW_US 0
#endif

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The candidate's own kernel: the pacer (pace_ns > 0) and the honest / CAMO 0 / CAMO 2 work.
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

using PushFn = int (*)(int, uint64_t);
using PopFn = int (*)(int, uint64_t*);
constexpr int kCustom0 = 3;  // CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0
PushFn g_push = nullptr;
PopFn g_pop = nullptr;

bool find_cupti() {
  static bool looked = false;
  if (looked) return g_pop != nullptr;
  looked = true;
  for (const char* name : {"libcupti.so.13", "libcupti.so.12", "libcupti.so"}) {
    void* h = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
    if (!h) continue;
    g_push = reinterpret_cast<PushFn>(dlsym(h, "cuptiActivityPushExternalCorrelationId"));
    g_pop = reinterpret_cast<PopFn>(dlsym(h, "cuptiActivityPopExternalCorrelationId"));
    if (g_push && g_pop) return true;
  }
  g_push = nullptr;
  g_pop = nullptr;
  return false;
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

cudaStream_t g_side = nullptr;
cudaEvent_t g_ready = nullptr;
uint64_t g_bogus = 0xB0B0000000000000ull;

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
  uint64_t id = 0;
  bool timed = false;
  if (ATTACK != 0) {
    if (!find_cupti()) return 11;
    if (g_pop(kCustom0, &id) == 0) {  // only trace_call pushes an id
      timed = true;
      g_push(kCustom0, id);
    }
  }
  if (!timed) {
    launch_real(a, stream);
    return cudaGetLastError() == cudaSuccess ? 0 : 2;
  }
  if (!g_side) {
    cudaStreamCreateWithFlags(&g_side, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&g_ready, cudaEventDisableTiming);
  }
  static const double bandwidth = theoretical_bandwidth();
  const double bytes = 2.0 * static_cast<double>(a.rows * a.hidden) * 2.0 +
                       2.0 * static_cast<double>(a.hidden);
  const auto pace_ns = static_cast<unsigned long long>(PACE * bytes / bandwidth * 1e9) + 1ull;
  // SIDE 1: the side stream starts from here (this call's inputs and poisoned outputs are ready).
  if (SIDE == 1) cudaEventRecord(g_ready, stream);
  rms_norm_kernel<<<1, 32, 0, stream>>>(a.x, a.w, a.out, a.hidden, a.eps, pace_ns, 0ull);
  g_pop(kCustom0, &id);
  g_push(kCustom0, ++g_bogus);  // the real kernel's record goes to an id no call has
  if (SIDE == 1) {
    cudaStreamWaitEvent(g_side, g_ready, 0);
    launch_real(a, g_side);
  } else {
    launch_real(a, stream);
  }
  uint64_t b = 0;
  g_pop(kCustom0, &b);
  g_push(kCustom0, id);  // trace_.end() pops it
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
