// atrex-cuda-bench: GPU ceilings and timing calibration, run as a child of `atrex hardware
// measure` and `atrex bench timing` (so the `atrex` binary never creates a GPU context). Prints
// one JSON object on stdout.
//
//   --measure [--device N]   copy bandwidth (cudaMemcpyAsync device-to-device, bytes read +
//                            written, best of several rounds over 2 GiB) and dense matrix rate per
//                            dtype path through cuBLASLt (bf16, fp16, fp8 e4m3, tf32, fp32), TN
//                            layout, random operands, best of several rounds. Schema
//                            atrex.gpu-measure/1.
//   --timing [--device N]    calibration of the harness timer (cuda_timer.h, the one the
//                            evaluation child uses): an empty kernel and a >= 1 GiB copy kernel,
//                            eager and graph methods, several rounds each. Schema
//                            atrex.timing-calibration/1.
// The card's clocks and settings are only read (NVML), never changed.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "atrex/common/sample_stats.h"
#include "cuda_timer.h"
#include "cupti_trace.h"
#include "nvml_clocks.h"

namespace atrex::runner {
namespace {

using Json = nlohmann::json;

struct Fatal {
  std::string what;
};

void check(cudaError_t e, const char* where) {
  if (e != cudaSuccess) throw Fatal{std::string(where) + ": " + cuda_error_text(e)};
}
void check(cublasStatus_t s, const char* where) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Fatal{std::string(where) + ": cuBLASLt status " + std::to_string(static_cast<int>(s))};
}

__device__ float hash_uniform(size_t i, unsigned seed) {
  unsigned long long x =
      (i + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<unsigned long long>(seed) << 32);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return static_cast<float>(x & 0xffffff) / 16777216.0f * 2.0f - 1.0f;  // [-1, 1)
}

template <typename T>
__global__ void fill_uniform(T* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    p[i] = static_cast<T>(hash_uniform(i, seed));
  }
}

__global__ void empty_kernel() {}

__global__ void copy_kernel(const int4* __restrict__ src, int4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

struct Device {
  int index = 0;
  cudaDeviceProp prop{};
  std::string bus_id;
};

Device open_device(int index) {
  Device d;
  d.index = index;
  check(cudaSetDevice(index), "cudaSetDevice");
  check(cudaGetDeviceProperties(&d.prop, index), "cudaGetDeviceProperties");
  char bus[32] = {};
  check(cudaDeviceGetPCIBusId(bus, sizeof bus, index), "cudaDeviceGetPCIBusId");
  d.bus_id = bus;
  return d;
}

Json device_json(const Device& d) {
  return Json{{"index", d.index},
              {"name", d.prop.name},
              {"cc", std::to_string(d.prop.major) + "." + std::to_string(d.prop.minor)},
              {"sm_count", d.prop.multiProcessorCount},
              {"l2_bytes", d.prop.l2CacheSize},
              {"memory_bytes", d.prop.totalGlobalMem},
              {"pci_bus_id", d.bus_id}};
}

// Device-to-device copy bandwidth in bytes/s (read + write), best of `rounds`.
double copy_bandwidth(size_t bytes, int rounds) {
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, bytes), "cudaMalloc");
  check(cudaMalloc(&b, bytes), "cudaMalloc");
  check(cudaMemset(a, 1, bytes), "cudaMemset");
  cudaEvent_t s, e;
  check(cudaEventCreate(&s), "event");
  check(cudaEventCreate(&e), "event");
  double best = 0;
  for (int r = 0; r < rounds + 1; ++r) {
    check(cudaEventRecord(s), "record");
    for (int i = 0; i < 5; ++i)
      check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice), "copy");
    check(cudaEventRecord(e), "record");
    check(cudaEventSynchronize(e), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, s, e), "elapsed");
    if (r > 0)
      best =
          std::max(best, 5.0 * 2.0 * static_cast<double>(bytes) / (ms * 1e-3));  // round 0 warms up
  }
  cudaEventDestroy(s);
  cudaEventDestroy(e);
  cudaFree(a);
  cudaFree(b);
  return best;
}

// One cuBLASLt GEMM path: D(m x n) = op(A)(m x k) * B(k x n), A stored k x m (transposed), all
// column-major; FLOP/s = 2mnk / time, best of `rounds` of `reps` back-to-back calls.
struct GemmPath {
  const char* path;  // hardware-profile p_peak key
  cudaDataType_t ab, cd;
  cublasComputeType_t compute;
  size_t ab_size, cd_size;
};

template <typename T>
void fill(void* p, size_t n, unsigned seed) {
  fill_uniform<T><<<1024, 256>>>(static_cast<T*>(p), n, seed);
  check(cudaGetLastError(), "fill");
}

Json gemm_rate(cublasLtHandle_t lt, const GemmPath& g, int m, int n, int k, int reps, int rounds) {
  void *a = nullptr, *b = nullptr, *d = nullptr, *ws = nullptr;
  const size_t ws_bytes = size_t{64} << 20;
  check(cudaMalloc(&a, g.ab_size * m * k), "cudaMalloc A");
  check(cudaMalloc(&b, g.ab_size * k * n), "cudaMalloc B");
  check(cudaMalloc(&d, g.cd_size * m * n), "cudaMalloc D");
  check(cudaMalloc(&ws, ws_bytes), "cudaMalloc workspace");
  auto fill_ab = [&](void* p, size_t count, unsigned seed) {
    switch (g.ab) {
      case CUDA_R_16BF: fill<__nv_bfloat16>(p, count, seed); break;
      case CUDA_R_16F: fill<__half>(p, count, seed); break;
      case CUDA_R_8F_E4M3: fill<__nv_fp8_e4m3>(p, count, seed); break;
      default: fill<float>(p, count, seed); break;
    }
  };
  fill_ab(a, size_t(m) * k, 1);
  fill_ab(b, size_t(k) * n, 2);
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  check(cublasLtMatmulDescCreate(&op, g.compute, CUDA_R_32F), "MatmulDescCreate");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "TRANSA");
  check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "TRANSB");
  check(cublasLtMatrixLayoutCreate(&la, g.ab, k, m, k), "layout A");
  check(cublasLtMatrixLayoutCreate(&lb, g.ab, k, n, k), "layout B");
  check(cublasLtMatrixLayoutCreate(&ld, g.cd, m, n, m), "layout D");
  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &ws_bytes, sizeof ws_bytes),
        "pref");
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &heur, &found),
        "AlgoGetHeuristic");
  if (found == 0) throw Fatal{std::string("no cuBLASLt algorithm for ") + g.path};
  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&] {
    check(cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &heur.algo, ws,
                         ws_bytes, nullptr),
          g.path);
  };
  cudaEvent_t s, e;
  check(cudaEventCreate(&s), "event");
  check(cudaEventCreate(&e), "event");
  for (int i = 0; i < 3; ++i) run();
  double best = 0;
  std::vector<double> rates;
  for (int r = 0; r < rounds; ++r) {
    check(cudaEventRecord(s), "record");
    for (int i = 0; i < reps; ++i) run();
    check(cudaEventRecord(e), "record");
    check(cudaEventSynchronize(e), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, s, e), "elapsed");
    const double rate = 2.0 * m * n * static_cast<double>(k) * reps / (ms * 1e-3);
    rates.push_back(rate);
    best = std::max(best, rate);
  }
  cudaEventDestroy(s);
  cudaEventDestroy(e);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(op);
  cudaFree(a);
  cudaFree(b);
  cudaFree(d);
  cudaFree(ws);
  return Json{{"path", g.path},
              {"m", m},
              {"n", n},
              {"k", k},
              {"flops_per_s", best},
              {"rounds_flops_per_s", rates}};
}

Json measure(const Device& dev) {
  NvmlClocks nvml(dev.bus_id);
  Json out{{"schema", "atrex.gpu-measure/1"},
           {"device", device_json(dev)},
           {"clocks_before", nvml.sample()}};
  out["copy_bytes_per_s"] = copy_bandwidth(size_t{2} << 30, 5);
  cublasLtHandle_t lt = nullptr;
  check(cublasLtCreate(&lt), "cublasLtCreate");
  const std::vector<GemmPath> paths = {
      {"bf16_tc", CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 2, 2},
      {"fp16_tc", CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, 2, 2},
      {"fp8_e4m3_tc", CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 1, 2},
      {"fp32_tf32_tc", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 4, 4},
      {"fp32_strict", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 4, 4},
  };
  Json gemms = Json::array();
  for (const auto& g : paths) {
    const bool slow = std::strcmp(g.path, "fp32_strict") == 0;
    try {
      gemms.push_back(gemm_rate(lt, g, 8192, 8192, 8192, slow ? 3 : 20, slow ? 3 : 5));
    } catch (const Fatal& f) {
      gemms.push_back(Json{{"path", g.path}, {"error", f.what}});
      (void)cudaGetLastError();
    }
  }
  cublasLtDestroy(lt);
  out["gemm"] = gemms;
  out["clocks_after"] = nvml.sample();
  return out;
}

Json summary(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return Json{{"median_us", stats::quantile_sorted(samples, 0.5)},
              {"p25_us", stats::quantile_sorted(samples, 0.25)},
              {"p75_us", stats::quantile_sorted(samples, 0.75)},
              {"min_us", samples.front()},
              {"n", samples.size()}};
}

// Rounds of `n` samples of `call` with one timer method; per round the median, across rounds the
// spread (max-min over the mean of the round medians).
Json calibrate(cudaStream_t stream, size_t l2, const std::function<int()>& call,
               const std::string& method, int rounds, int n) {
  Json rows = Json::array();
  std::vector<double> medians;
  for (int r = 0; r < rounds; ++r) {
    CudaTimer timer;
    if (auto e = timer.init(stream, l2); !e.empty()) throw Fatal{e};
    std::vector<double> samples;
    for (int w = 0; w < 3; ++w) call();
    check(cudaStreamSynchronize(stream), "warm-up");
    if (method == "cupti") {
      // The evaluation child's default: eager calls tagged for CUPTI, a sample is the device span
      // of the call's kernels (cupti_trace.h).
      static CuptiTrace trace;
      static const std::string unavailable = trace.init();
      if (!unavailable.empty()) throw Fatal{"cupti: " + unavailable};
      std::map<uint64_t, CallTrace> traces;
      for (int i = 0; i < n; ++i) {
        if (auto e = timer.flush(); !e.empty()) throw Fatal{e};
        trace.begin(static_cast<uint64_t>(i));
        call();
        trace.end();
      }
      check(cudaStreamSynchronize(stream), "cupti samples");
      if (auto e = trace.collect(traces); !e.empty()) throw Fatal{e};
      for (int i = 0; i < n; ++i) {
        auto it = traces.find(static_cast<uint64_t>(i));
        if (it == traces.end() || it->second.span_us() <= 0)
          throw Fatal{"cupti: no kernel record for a timed call"};
        samples.push_back(it->second.span_us());
      }
    } else if (method == "graph") {
      int rc = 0;
      std::string unsupported;
      if (auto e = timer.capture(call, 25, rc, unsupported); !e.empty()) throw Fatal{e};
      if (!unsupported.empty()) throw Fatal{"capture failed: " + unsupported};
      while (static_cast<int>(samples.size()) < n) {
        if (auto e = timer.replay_timed(samples); !e.empty()) throw Fatal{e};
      }
    } else {
      for (int i = 0; i < n; ++i) {
        int rc = 0;
        double us = 0;
        if (auto e = timer.time_eager(call, rc, us); !e.empty()) throw Fatal{e};
        samples.push_back(us);
      }
    }
    Json s = summary(samples);
    medians.push_back(s["median_us"].get<double>());
    rows.push_back(s);
  }
  return Json{{"method", method},
              {"median_us", stats::median(medians)},
              {"spread", stats::relative_spread(medians)},
              {"rounds", rows}};
}

Json timing(const Device& dev) {
  NvmlClocks nvml(dev.bus_id);
  Json out{{"schema", "atrex.timing-calibration/1"},
           {"device", device_json(dev)},
           {"clocks_before", nvml.sample()}};
  cudaStream_t stream = nullptr;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  const size_t l2 = static_cast<size_t>(dev.prop.l2CacheSize);
  auto empty = [&] {
    empty_kernel<<<1, 32, 0, stream>>>();
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
  };
  // Device time of the empty kernel itself: 1000 launches back to back in one graph.
  {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture");
    for (int i = 0; i < 1000; ++i) empty_kernel<<<1, 32, 0, stream>>>();
    check(cudaStreamEndCapture(stream, &g), "capture");
    check(cudaGraphInstantiate(&ge, g, 0), "instantiate");
    cudaEvent_t s, e;
    check(cudaEventCreate(&s), "event");
    check(cudaEventCreate(&e), "event");
    check(cudaGraphLaunch(ge, stream), "launch");
    check(cudaEventRecord(s, stream), "record");
    check(cudaGraphLaunch(ge, stream), "launch");
    check(cudaEventRecord(e, stream), "record");
    check(cudaEventSynchronize(e), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, s, e), "elapsed");
    out["empty_kernel_back_to_back_us"] = ms * 1000.0 / 1000.0;
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  }
  const int rounds = 5;
  out["empty_kernel"] = Json::array({calibrate(stream, l2, empty, "eager", rounds, 200),
                                     calibrate(stream, l2, empty, "graph", rounds, 200)});
#if ATREX_HAVE_CUPTI
  out["empty_kernel"].push_back(calibrate(stream, l2, empty, "cupti", rounds, 200));
#endif
  const size_t copy_bytes = size_t{1} << 30;
  int4 *src = nullptr, *dst = nullptr;
  check(cudaMalloc(&src, copy_bytes), "cudaMalloc");
  check(cudaMalloc(&dst, copy_bytes), "cudaMalloc");
  check(cudaMemset(src, 7, copy_bytes), "cudaMemset");
  const int blocks = dev.prop.multiProcessorCount * 8;
  auto copy = [&] {
    copy_kernel<<<blocks, 512, 0, stream>>>(src, dst, copy_bytes / sizeof(int4));
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
  };
  out["copy_kernel_bytes"] = copy_bytes;
  out["copy_kernel"] = Json::array({calibrate(stream, l2, copy, "eager", rounds, 30),
                                    calibrate(stream, l2, copy, "graph", rounds, 30)});
#if ATREX_HAVE_CUPTI
  out["copy_kernel"].push_back(calibrate(stream, l2, copy, "cupti", rounds, 30));
#endif
  out["memcpy_copy_bytes_per_s"] = copy_bandwidth(copy_bytes, 5);
  cudaFree(src);
  cudaFree(dst);
  cudaStreamDestroy(stream);
  out["clocks_after"] = nvml.sample();
  return out;
}

}  // namespace
}  // namespace atrex::runner

int main(int argc, char** argv) {
  std::string mode;
  int device = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--measure") == 0 || std::strcmp(argv[i], "--timing") == 0)
      mode = argv[i] + 2;
    if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) device = std::atoi(argv[++i]);
  }
  if (mode.empty()) {
    std::fprintf(stderr, "usage: %s --measure|--timing [--device N]\n", argv[0]);
    return 2;
  }
  try {
    const auto dev = atrex::runner::open_device(device);
    const auto out = mode == "measure" ? atrex::runner::measure(dev) : atrex::runner::timing(dev);
    std::printf("%s\n", out.dump().c_str());
    return 0;
  } catch (const atrex::runner::Fatal& f) {
    std::printf("%s\n", nlohmann::json{{"error", f.what}}.dump().c_str());
    std::fprintf(stderr, "atrex-cuda-bench: %s\n", f.what.c_str());
    return 1;
  }
}
