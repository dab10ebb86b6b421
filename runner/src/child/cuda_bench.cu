// atrex-cuda-bench: GPU ceilings and timing calibration, run as a child of `atrex hardware
// measure` and `atrex bench timing` (so the `atrex` binary never creates a GPU context). Prints
// one JSON object on stdout.
//
//   --measure [--device N]   memory ceiling (best of cudaMemcpy and read+write, read-only and
//                            write-only kernels over 1-2 GiB: memory_ceiling()) and
//                            dense matrix rate per
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

#include "atrex/common/error.h"
#include "atrex/common/sample_stats.h"
#include "atrex/problems/cuda_status.h"
#include "bandwidth_bench.h"
#include "cuda_timer.h"
#include "cupti_trace.h"
#include "nvml_clocks.h"

namespace atrex::runner {
namespace {

using Json = nlohmann::json;

// CUDA runtime and cuBLASLt results as Status (kIo, naming the call that failed).
Status check(cudaError_t e, const char* where) { return problems::cuda::cuda_status(e, where); }
Status check(cublasStatus_t s, const char* where) {
  if (s == CUBLAS_STATUS_SUCCESS) return ok();
  return io_error(std::string(where) + ": cuBLASLt status " + std::to_string(static_cast<int>(s)));
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

struct Device {
  int index = 0;
  cudaDeviceProp prop{};
  std::string bus_id;
};

Result<Device> open_device(int index) {
  Device d;
  d.index = index;
  ATREX_TRY(check(cudaSetDevice(index), "cudaSetDevice"));
  ATREX_TRY(check(cudaGetDeviceProperties(&d.prop, index), "cudaGetDeviceProperties"));
  char bus[32] = {};
  ATREX_TRY(check(cudaDeviceGetPCIBusId(bus, sizeof bus, index), "cudaDeviceGetPCIBusId"));
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

// One cuBLASLt GEMM path: D(m x n) = op(A)(m x k) * B(k x n), A stored k x m (transposed), all
// column-major; FLOP/s = 2mnk / time, best of `rounds` of `reps` back-to-back calls.
struct GemmPath {
  const char* path;  // hardware-profile p_peak key
  cudaDataType_t ab, cd;
  cublasComputeType_t compute;
  size_t ab_size, cd_size;
};

template <typename T>
Status fill(void* p, size_t n, unsigned seed) {
  fill_uniform<T><<<1024, 256>>>(static_cast<T*>(p), n, seed);
  return check(cudaGetLastError(), "fill");
}

Result<Json> gemm_rate(cublasLtHandle_t lt, const GemmPath& g, int m, int n, int k, int reps,
                       int rounds) {
  void *a = nullptr, *b = nullptr, *d = nullptr, *ws = nullptr;
  const size_t ws_bytes = size_t{64} << 20;
  ATREX_TRY(check(cudaMalloc(&a, g.ab_size * m * k), "cudaMalloc A"));
  ATREX_TRY(check(cudaMalloc(&b, g.ab_size * k * n), "cudaMalloc B"));
  ATREX_TRY(check(cudaMalloc(&d, g.cd_size * m * n), "cudaMalloc D"));
  ATREX_TRY(check(cudaMalloc(&ws, ws_bytes), "cudaMalloc workspace"));
  auto fill_ab = [&](void* p, size_t count, unsigned seed) -> Status {
    switch (g.ab) {
      case CUDA_R_16BF: return fill<__nv_bfloat16>(p, count, seed);
      case CUDA_R_16F: return fill<__half>(p, count, seed);
      case CUDA_R_8F_E4M3: return fill<__nv_fp8_e4m3>(p, count, seed);
      default: return fill<float>(p, count, seed);
    }
  };
  ATREX_TRY(fill_ab(a, size_t(m) * k, 1));
  ATREX_TRY(fill_ab(b, size_t(k) * n, 2));
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  ATREX_TRY(check(cublasLtMatmulDescCreate(&op, g.compute, CUDA_R_32F), "MatmulDescCreate"));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  ATREX_TRY(check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
                  "TRANSA"));
  ATREX_TRY(check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
                  "TRANSB"));
  ATREX_TRY(check(cublasLtMatrixLayoutCreate(&la, g.ab, k, m, k), "layout A"));
  ATREX_TRY(check(cublasLtMatrixLayoutCreate(&lb, g.ab, k, n, k), "layout B"));
  ATREX_TRY(check(cublasLtMatrixLayoutCreate(&ld, g.cd, m, n, m), "layout D"));
  cublasLtMatmulPreference_t pref = nullptr;
  ATREX_TRY(check(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate"));
  ATREX_TRY(check(cublasLtMatmulPreferenceSetAttribute(
                      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes),
                  "pref"));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  ATREX_TRY(check(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &heur, &found),
                  "AlgoGetHeuristic"));
  if (found == 0) return io_error(std::string("no cuBLASLt algorithm for ") + g.path);
  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&] {
    return check(cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &heur.algo, ws,
                                ws_bytes, nullptr),
                 g.path);
  };
  cudaEvent_t s, e;
  ATREX_TRY(check(cudaEventCreate(&s), "event"));
  ATREX_TRY(check(cudaEventCreate(&e), "event"));
  for (int i = 0; i < 3; ++i) ATREX_TRY(run());
  double best = 0;
  std::vector<double> rates;
  for (int r = 0; r < rounds; ++r) {
    ATREX_TRY(check(cudaEventRecord(s), "record"));
    for (int i = 0; i < reps; ++i) ATREX_TRY(run());
    ATREX_TRY(check(cudaEventRecord(e), "record"));
    ATREX_TRY(check(cudaEventSynchronize(e), "sync"));
    float ms = 0;
    ATREX_TRY(check(cudaEventElapsedTime(&ms, s, e), "elapsed"));
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

Result<Json> measure(const Device& dev) {
  NvmlClocks nvml(dev.bus_id);
  Json out{{"schema", "atrex.gpu-measure/1"},
           {"device", device_json(dev)},
           {"clocks_before", nvml.sample()}};
  ATREX_ASSIGN_OR_RETURN(Json ceiling, memory_ceiling(dev.prop.multiProcessorCount, 3));
  out["copy_bytes_per_s"] = ceiling["best_bytes_per_s"];
  out["memory_ceiling"] = std::move(ceiling);
  cublasLtHandle_t lt = nullptr;
  ATREX_TRY(check(cublasLtCreate(&lt), "cublasLtCreate"));
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
    // A path the card or library lacks is recorded, not fatal: the other paths still run.
    if (auto rate = gemm_rate(lt, g, 8192, 8192, 8192, slow ? 3 : 20, slow ? 3 : 5)) {
      gemms.push_back(std::move(*rate));
    } else {
      gemms.push_back(Json{{"path", g.path}, {"error", rate.error().message}});
      (void)cudaGetLastError();  // clears a non-sticky error before the next path
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
Result<Json> calibrate(cudaStream_t stream, size_t l2, const std::function<int()>& call,
                       const std::string& method, int rounds, int n) {
  Json rows = Json::array();
  std::vector<double> medians;
  for (int r = 0; r < rounds; ++r) {
    CudaTimer timer;
    ATREX_TRY(timer.init(stream, l2));
    std::vector<double> samples;
    for (int w = 0; w < 3; ++w) call();
    ATREX_TRY(check(cudaStreamSynchronize(stream), "warm-up"));
    if (method == "cupti") {
      // The evaluation child's default: eager calls tagged for CUPTI, a sample is the device span
      // of the call's kernels (cupti_trace.h).
      static CuptiTrace trace;
      static const Status traced = trace.init();
      if (!traced) return tl::unexpected(with_context(traced.error(), "cupti"));
      std::map<uint64_t, CallTrace> traces;
      for (int i = 0; i < n; ++i) {
        ATREX_TRY(timer.flush());
        trace.begin(static_cast<uint64_t>(i));
        call();
        trace.end();
      }
      ATREX_TRY(check(cudaStreamSynchronize(stream), "cupti samples"));
      ATREX_TRY(trace.collect(traces));
      for (int i = 0; i < n; ++i) {
        auto it = traces.find(static_cast<uint64_t>(i));
        if (it == traces.end() || it->second.span_us() <= 0)
          return io_error("cupti: no kernel record for a timed call");
        samples.push_back(it->second.span_us());
      }
    } else if (method == "graph") {
      int rc = 0;
      std::string unsupported;
      ATREX_TRY(timer.capture(call, 25, rc, unsupported));
      if (!unsupported.empty()) return io_error("capture failed: " + unsupported);
      while (static_cast<int>(samples.size()) < n) ATREX_TRY(timer.replay_timed(samples));
    } else {
      for (int i = 0; i < n; ++i) {
        int rc = 0;
        double us = 0;
        ATREX_TRY(timer.time_eager(call, rc, us));
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

Result<Json> timing(const Device& dev) {
  NvmlClocks nvml(dev.bus_id);
  Json out{{"schema", "atrex.timing-calibration/1"},
           {"device", device_json(dev)},
           {"clocks_before", nvml.sample()}};
  cudaStream_t stream = nullptr;
  ATREX_TRY(check(cudaStreamCreate(&stream), "cudaStreamCreate"));
  const size_t l2 = static_cast<size_t>(dev.prop.l2CacheSize);
  auto empty = [&] {
    empty_kernel<<<1, 32, 0, stream>>>();
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
  };
  // Device time of the empty kernel itself: 1000 launches back to back in one graph.
  {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    ATREX_TRY(check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture"));
    for (int i = 0; i < 1000; ++i) empty_kernel<<<1, 32, 0, stream>>>();
    ATREX_TRY(check(cudaStreamEndCapture(stream, &g), "capture"));
    ATREX_TRY(check(cudaGraphInstantiate(&ge, g, 0), "instantiate"));
    cudaEvent_t s, e;
    ATREX_TRY(check(cudaEventCreate(&s), "event"));
    ATREX_TRY(check(cudaEventCreate(&e), "event"));
    ATREX_TRY(check(cudaGraphLaunch(ge, stream), "launch"));
    ATREX_TRY(check(cudaEventRecord(s, stream), "record"));
    ATREX_TRY(check(cudaGraphLaunch(ge, stream), "launch"));
    ATREX_TRY(check(cudaEventRecord(e, stream), "record"));
    ATREX_TRY(check(cudaEventSynchronize(e), "sync"));
    float ms = 0;
    ATREX_TRY(check(cudaEventElapsedTime(&ms, s, e), "elapsed"));
    out["empty_kernel_back_to_back_us"] = ms * 1000.0 / 1000.0;
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  }
  const int rounds = 5;
  std::vector<std::string> methods = {"eager", "graph"};
#if ATREX_HAVE_CUPTI
  methods.push_back("cupti");
#endif
  out["empty_kernel"] = Json::array();
  for (const auto& method : methods) {
    ATREX_ASSIGN_OR_RETURN(Json row, calibrate(stream, l2, empty, method, rounds, 200));
    out["empty_kernel"].push_back(std::move(row));
  }
  const size_t copy_bytes = size_t{1} << 30;
  int4 *src = nullptr, *dst = nullptr;
  ATREX_TRY(check(cudaMalloc(&src, copy_bytes), "cudaMalloc"));
  ATREX_TRY(check(cudaMalloc(&dst, copy_bytes), "cudaMalloc"));
  ATREX_TRY(check(cudaMemset(src, 7, copy_bytes), "cudaMemset"));
  const int blocks = dev.prop.multiProcessorCount * 8;
  auto copy = [&] {
    return launch_copy(src, dst, copy_bytes / sizeof(int4), static_cast<unsigned>(blocks), 512,
                       stream)
               ? 0
               : 1;
  };
  out["copy_kernel_bytes"] = copy_bytes;
  out["copy_kernel"] = Json::array();
  for (const auto& method : methods) {
    ATREX_ASSIGN_OR_RETURN(Json row, calibrate(stream, l2, copy, method, rounds, 30));
    out["copy_kernel"].push_back(std::move(row));
  }
  ATREX_ASSIGN_OR_RETURN(out["memcpy_copy_bytes_per_s"], copy_bandwidth(copy_bytes, 5));
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
  const auto dev = atrex::runner::open_device(device);
  const auto out = !dev                ? atrex::Result<nlohmann::json>(tl::unexpected(dev.error()))
                   : mode == "measure" ? atrex::runner::measure(*dev)
                                       : atrex::runner::timing(*dev);
  if (!out) {
    std::printf("%s\n", nlohmann::json{{"error", out.error().message}}.dump().c_str());
    std::fprintf(stderr, "atrex-cuda-bench: %s\n", out.error().message.c_str());
    return 1;
  }
  std::printf("%s\n", out->dump().c_str());
  return 0;
}
