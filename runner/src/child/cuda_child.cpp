// atrex-eval-cuda: the evaluation child of the cuda backend. Links the CUDA runtime as a
// shared library — the same one candidates are built against (nvcc --cudart shared) — so the
// candidate and the harness share one runtime and one context.
//
// Timing: the L2 is flushed (cudaMemsetAsync over 2x the L2 size) outside the timed window,
// then a start event on the candidate's stream and an end event on the legacy default stream,
// which waits for all blocking streams, so work the candidate put on other blocking streams is
// covered too.
#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "atrex/problems/cuda_ops.h"
#include "child_runner.h"

namespace atrex::runner {
namespace {

std::string err_text(cudaError_t e) {
  return e == cudaSuccess ? std::string() : std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

class CudaDevice final : public ChildDevice {
 public:
  explicit CudaDevice(int device) : device_(device) {}

  std::string init() {
    if (auto e = err_text(cudaSetDevice(device_)); !e.empty()) return e;
    cudaDeviceProp prop{};
    if (auto e = err_text(cudaGetDeviceProperties(&prop, device_)); !e.empty()) return e;
    name_ = prop.name;
    l2_bytes_ = static_cast<size_t>(prop.l2CacheSize);
    if (auto e = err_text(cudaStreamCreate(&stream_)); !e.empty()) return e;
    if (auto e = err_text(cudaEventCreate(&start_)); !e.empty()) return e;
    return err_text(cudaEventCreate(&stop_));
  }

  std::string name() const override { return name_; }
  DLDevice dl_device() const override { return DLDevice{kDLCUDA, device_}; }
  void* stream() override { return stream_; }
  void* alloc(size_t bytes, std::string& error) override {
    void* p = nullptr;
    if (auto e = err_text(cudaMalloc(&p, bytes)); !e.empty()) {
      error = e;
      return nullptr;
    }
    return p;
  }
  void release(void* p) override { cudaFree(p); }
  std::string to_host(void* dst, const void* src, size_t n) override {
    return err_text(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
  }
  std::string from_host(void* dst, const void* src, size_t n) override {
    return err_text(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
  }
  std::string copy(void* dst, const void* src, size_t n) override {
    return err_text(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream_));
  }
  std::string fill(void* dst, uint8_t byte, size_t n) override {
    return err_text(cudaMemsetAsync(dst, byte, n, stream_));
  }
  std::string generate(const problems::ResolvedShape& s, size_t index, uint64_t seed, void* dst) override {
    return problems::cuda::generate_input(s, index, seed, dst, stream_);
  }
  std::string reference(const problems::ResolvedShape& s, std::span<const void* const> in,
                        std::span<void* const> out) override {
    return problems::cuda::reference(s, in, out, stream_);
  }
  std::string synchronize() override {
    if (auto e = err_text(cudaDeviceSynchronize()); !e.empty()) return e;
    return err_text(cudaGetLastError());
  }
  std::string time_call(const std::function<int()>& call, int& rc, double& us) override {
    if (!flush_) {
      flush_size_ = std::max<size_t>(2 * l2_bytes_, 64u << 20);
      if (auto e = err_text(cudaMalloc(&flush_, flush_size_)); !e.empty()) return e;
    }
    if (auto e = err_text(cudaMemsetAsync(flush_, ++flush_round_ & 0xff, flush_size_, stream_)); !e.empty()) return e;
    if (auto e = err_text(cudaEventRecord(start_, stream_)); !e.empty()) return e;
    rc = call();
    if (auto e = err_text(cudaEventRecord(stop_, cudaStreamLegacy)); !e.empty()) return e;
    if (auto e = err_text(cudaEventSynchronize(stop_)); !e.empty()) return e;
    float ms = 0;
    if (auto e = err_text(cudaEventElapsedTime(&ms, start_, stop_)); !e.empty()) return e;
    us = static_cast<double>(ms) * 1000.0;
    return {};
  }
  std::string timing_method() const override { return "cuda_events_l2_flush"; }

 private:
  int device_;
  std::string name_;
  size_t l2_bytes_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  void* flush_ = nullptr;
  size_t flush_size_ = 0;
  unsigned flush_round_ = 0;
};

// `--probe`: prints the visible devices as JSON (atrex.devices/1) for the runner's detection.
int probe() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  atrex::Json out{{"schema", "atrex.devices/1"}, {"devices", atrex::Json::array()}};
  if (e != cudaSuccess) {
    out["error"] = err_text(e);
  }
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  out["runtime_version"] = runtime;
  out["driver_version"] = driver;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out["devices"].push_back(atrex::Json{{"index", i}, {"name", p.name}, {"cc_major", p.major}, {"cc_minor", p.minor},
                                         {"sm_count", p.multiProcessorCount}, {"l2_bytes", p.l2CacheSize},
                                         {"memory_bytes", p.totalGlobalMem}});
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace atrex::runner

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--probe") == 0) return atrex::runner::probe();
  int device = 0;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0) device = std::atoi(argv[i + 1]);
  }
  atrex::runner::CudaDevice dev(device);
  if (auto e = dev.init(); !e.empty()) {
    // No usable GPU: the response tells the runner why (status crashed, reason).
    std::fprintf(stderr, "atrex-eval-cuda: cannot initialise device %d: %s\n", device, e.c_str());
    return 4;
  }
  return atrex::runner::child_main(argc, argv, dev);
}
