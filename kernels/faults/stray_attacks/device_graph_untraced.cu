// STRAY ATTACK 3: the real work in a DEVICE-LAUNCHED graph, which CUPTI does not record by
// default: no kernel record at all, so no stray, and no part of the call's span. Written against
// /work/main at 81aacf0 (defenses of 1929890). NOT run on a GPU (none here).
//
// cupti_activity.h (CUDA 13.0) cuptiActivityEnableDeviceGraph: "Controls the collection of
// records for device launched graphs. Default value is 0, i.e. these records are not collected."
// The harness never calls it (cupti_trace.cpp init enables RUNTIME, DRIVER, CONCURRENT_KERNEL,
// MEMCPY, MEMSET, EXTERNAL_CORRELATION only). Device graph launch (cudaGraphLaunch from device
// code, cuda_device_runtime_api.h) compiles in whole-program mode (no -rdc: the driver provides
// the builtin; checked here: the harness's compile line builds it, the cubin has an undefined
// cudaGraphLaunch the driver resolves), unlike <<<>>> from device code (CDP), which needs -rdc.
//
// In a timed call (an id on the thread: only trace_call pushes one; and the stream not capturing)
// the candidate cudaGraphLaunch()es, on the given stream, a small host graph Gl of ONE kernel node,
// `launcher` (its args updated per call with cudaGraphExecKernelNodeSetParams, a host operation
// with no device record). Its kernel record carries the call's id: it is the sample's span.
// launcher's thread 0 writes the call's arguments to a __device__ struct, fences, and launches
// the device graph Gw (instantiated with cudaGraphInstantiateFlagDeviceLaunch and uploaded at the
// first call) fire-and-forget; Gw's one kernel node computes rms_norm (grid-stride over rows,
// reading the struct). launcher then spins PACE x t_roof (the impossible-speed rule).
// Gw runs BESIDE the pacer and leaves no CUPTI record; fire-and-forget work belongs to the
// launching graph's execution environment, so Gl completes (for the stream) only after Gw: the
// stop event (legacy stream, waits for the blocking stream) holds it; the drain sees nothing.
// Bound: the event window is max(pacer, Gw) + launch overheads; the samples fall back to events
// only if median(ev) - median(span) > max(20 us, 25% span) (shape_measure.cpp:311). So up to
// ~20 us of real work per call beyond the pacer is free: small shapes are timed at the pacer.
//
// PREDICTED: ok, cupti_kernel_span_l2_flush, no cupti_fallback, shape 0 at the pacer's
// ~PACE x t_roof + ~1-2 us (s_j ~0.7-0.85); SLOW_US=12: the same claim (twin >= 12 us);
// timing.cupti_records: device == correlated (nothing stray at all: the record count gives no
// hint). Uncertainties: (a) if CUPTI's end timestamp of `launcher` waits for its fire-and-forget
// child (I expect the grid's own end), the claim is the honest time: ok, no gain; (b) if this
// CUPTI does emit Gw's kernel records, uncorrelated and with no API record: check_stray_work
// rejects by name ("... gw_rms_kernel ... not one of the harness's kernels"); (c) a device graph
// launch refused under this driver: the candidate returns 17 at its first call (self-test).
// Failure codes: 11 no libcupti, 17 graph setup / device launch self-test failed.
// Honest twin: ATTACK 0.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdint>

#include "atrex/candidate.h"

#ifndef ATTACK
#define ATTACK 1  // 0 honest twin, 1 device-launched graph
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

struct DevArgs {
  const __nv_bfloat16* x;
  const __nv_bfloat16* w;
  __nv_bfloat16* out;
  int64_t rows, hidden;
  float eps;
  unsigned long long slow_ns;
};
__device__ DevArgs g_dev_args;
__device__ int g_launch_error;

// Gw's node: rms_norm over every row, arguments from g_dev_args (written by `launcher`).
__global__ void gw_rms_kernel() {
  const DevArgs a = g_dev_args;
  __shared__ float partial[kThreads];
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const __nv_bfloat16* xr = a.x + row * a.hidden;
    float ss = 0.f;
    for (int64_t h = threadIdx.x; h < a.hidden; h += kThreads) {
      const float v = __bfloat162float(xr[h]);
      ss += v * v;
    }
    partial[threadIdx.x] = ss;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
      __syncthreads();
    }
    const float inv = rsqrtf(partial[0] / static_cast<float>(a.hidden) + a.eps);
    __syncthreads();
    for (int64_t h = threadIdx.x; h < a.hidden; h += kThreads) {
      a.out[row * a.hidden + h] =
          __float2bfloat16_rn(__bfloat162float(xr[h]) * inv * __bfloat162float(a.w[h]));
    }
  }
  if (a.slow_ns > 0 && blockIdx.x == 0 && threadIdx.x == 0) {
    const unsigned long long t0 = global_ns();
    while (global_ns() - t0 < a.slow_ns) {
    }
  }
}

// Gl's node: hands the call's arguments to Gw, launches it fire-and-forget, then paces.
__global__ void launcher(DevArgs args, cudaGraphExec_t gw, unsigned long long pace_ns) {
  if (threadIdx.x != 0) return;
  g_dev_args = args;
  __threadfence();
  const cudaError_t e = cudaGraphLaunch(gw, cudaStreamGraphFireAndForget);
  if (e != cudaSuccess) g_launch_error = static_cast<int>(e) + 1;
  const unsigned long long t0 = global_ns();
  while (global_ns() - t0 < pace_ns) {
  }
}

constexpr unsigned kGwBlocks = 1024;

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

cudaGraphExec_t g_gw = nullptr, g_gl = nullptr;
cudaGraphNode_t g_gl_node = nullptr;
int g_setup = -1;

// Gl's node parameters for one call (the pointed-to values must outlive the call below).
struct LaunchParams {
  DevArgs args;
  cudaGraphExec_t gw;
  unsigned long long pace_ns;
  void* ptrs[3];
  cudaKernelNodeParams p;
  void fill(const DevArgs& a, unsigned long long pace) {
    args = a;
    gw = g_gw;
    pace_ns = pace;
    ptrs[0] = &args;
    ptrs[1] = &gw;
    ptrs[2] = &pace_ns;
    p = cudaKernelNodeParams{};
    p.func = reinterpret_cast<void*>(launcher);
    p.gridDim = dim3(1);
    p.blockDim = dim3(32);
    p.kernelParams = ptrs;
  }
};

int setup(const DevArgs& a, cudaStream_t stream) {
  // Gw: one kernel node, device-launchable.
  cudaGraph_t gw = nullptr, gl = nullptr;
  if (cudaGraphCreate(&gw, 0) != cudaSuccess) return 17;
  cudaKernelNodeParams kp{};
  kp.func = reinterpret_cast<void*>(gw_rms_kernel);
  kp.gridDim = dim3(kGwBlocks);
  kp.blockDim = dim3(kThreads);
  kp.kernelParams = nullptr;
  cudaGraphNode_t n = nullptr;
  if (cudaGraphAddKernelNode(&n, gw, nullptr, 0, &kp) != cudaSuccess) return 17;
  if (cudaGraphInstantiate(&g_gw, gw, cudaGraphInstantiateFlagDeviceLaunch) != cudaSuccess)
    return 17;
  if (cudaGraphUpload(g_gw, stream) != cudaSuccess) return 17;
  // Gl: one `launcher` node, host-launched.
  LaunchParams lp;
  lp.fill(a, 1);
  if (cudaGraphCreate(&gl, 0) != cudaSuccess) return 17;
  if (cudaGraphAddKernelNode(&g_gl_node, gl, nullptr, 0, &lp.p) != cudaSuccess) return 17;
  if (cudaGraphInstantiate(&g_gl, gl, 0) != cudaSuccess) return 17;
  if (cudaGraphUpload(g_gl, stream) != cudaSuccess) return 17;
  // Self-test (a checked, untimed call): the device launch must work and compute.
  const int zero = 0;
  if (cudaMemcpyToSymbolAsync(g_launch_error, &zero, sizeof zero, 0, cudaMemcpyHostToDevice,
                              stream) != cudaSuccess)
    return 17;
  if (cudaGraphLaunch(g_gl, stream) != cudaSuccess) return 17;
  int err = 0;
  if (cudaMemcpyFromSymbolAsync(&err, g_launch_error, sizeof err, 0, cudaMemcpyDeviceToHost,
                                stream) != cudaSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess || err != 0)
    return 17;
  return 0;
}

void launch_honest(const DevArgs& a, cudaStream_t s) {
  rms_norm_kernel<<<static_cast<unsigned>(a.rows), kThreads, 0, s>>>(a.x, a.w, a.out, a.hidden,
                                                                      a.eps, 0ull, a.slow_ns);
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  auto stream = static_cast<cudaStream_t>(launch->stream);
  DevArgs a{static_cast<const __nv_bfloat16*>(x->data), static_cast<const __nv_bfloat16*>(w->data),
            static_cast<__nv_bfloat16*>(out->data), x->shape[0], x->shape[1],
            static_cast<float>(atrex_param_float(launch, "eps", 1e-6)),
            static_cast<unsigned long long>(SLOW_US) * 1000ull};
  bool timed = false;
  if (ATTACK != 0) {
    if (!find_cupti()) return 11;
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(stream, &capturing);
    if (capturing == cudaStreamCaptureStatusNone) {
      if (g_setup < 0) g_setup = setup(a, stream);
      if (g_setup > 0) return g_setup;
      uint64_t id = 0;
      if (g_pop(kCustom0, &id) == 0) {  // only trace_call pushes an id
        timed = true;
        g_push(kCustom0, id);
      }
    }
  }
  if (!timed) {
    launch_honest(a, stream);
    return cudaGetLastError() == cudaSuccess ? 0 : 2;
  }
  static const double bandwidth = theoretical_bandwidth();
  const double bytes = 2.0 * static_cast<double>(a.rows * a.hidden) * 2.0 +
                       2.0 * static_cast<double>(a.hidden);
  const auto pace_ns = static_cast<unsigned long long>(PACE * bytes / bandwidth * 1e9) + 1ull;
  LaunchParams lp;
  lp.fill(a, pace_ns);
  if (cudaGraphExecKernelNodeSetParams(g_gl, g_gl_node, &lp.p) != cudaSuccess) return 17;
  if (cudaGraphLaunch(g_gl, stream) != cudaSuccess) return 17;
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
