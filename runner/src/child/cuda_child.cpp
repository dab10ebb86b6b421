// atrex-eval-cuda: the evaluation child of the cuda backend. Links the CUDA runtime as a
// shared library — the same one candidates are built against (nvcc --cudart shared) — so the
// candidate and the harness share one runtime and one context.
//
// Timing: cuda_timer.h (graph replay by default, eager events as the fallback), clocks and
// throttle reasons from NVML (nvml_clocks.h, loaded with dlopen).
#include <cuda_runtime.h>

#include <bit>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "atrex/problems/cuda_ops.h"
#include "atrex/problems/cuda_status.h"
#include "child_runner.h"
#include "judge.h"
#include "cuda_timer.h"
#include "cuda_vmm.h"
#include "nvml_clocks.h"

namespace atrex::runner {
namespace {

Status cuda(cudaError_t e) { return problems::cuda::cuda_status(e); }

class CudaDevice final : public ChildDevice {
 public:
  // `trace`: set up CUPTI (the judge, which times no candidate, does not).
  CudaDevice(int device, bool trace) : device_(device), trace_wanted_(trace) {}

  Status init() {
    ATREX_TRY(cuda(cudaSetDevice(device_)));
    cudaDeviceProp prop{};
    ATREX_TRY(cuda(cudaGetDeviceProperties(&prop, device_)));
    name_ = prop.name;
    l2_bytes_ = static_cast<size_t>(prop.l2CacheSize);
    ATREX_TRY(cuda(cudaStreamCreate(&stream_)));
    char bus_id[32] = {};
    if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device_) == cudaSuccess)
      nvml_ = std::make_unique<NvmlClocks>(bus_id);
    ATREX_TRY(timer_.init(stream_, l2_bytes_));
#if ATREX_HAVE_CUPTI
    if (!trace_wanted_) {
      trace_unavailable_ = "the judge traces nothing";
    } else if (auto traced = trace_.init(); !traced) {
      trace_unavailable_ = traced.error().message;
    }
#else
    trace_unavailable_ = "atrex-eval-cuda was built without the CUPTI headers";
#endif
    return ok();
  }

  std::string name() const override { return name_; }
  DLDevice dl_device() const override { return DLDevice{kDLCUDA, device_}; }
  void* stream() override { return stream_; }
  // Buffers are cached across the shapes of a task (one child evaluates them all): a released
  // buffer is kept for the next shape's allocation of a similar size (no cudaMalloc/cudaFree,
  // which synchronise and cost milliseconds for large buffers); trim() returns the ones left
  // unused once a shape has allocated, so the candidate's own allocations find the memory free.
  Result<void*> alloc(size_t bytes) override {
    const size_t size = bytes >= (1u << 20) ? (bytes + (1u << 20) - 1) & ~size_t{(1u << 20) - 1}
                                            : std::bit_ceil(bytes);
    if (auto it = cached_.lower_bound(size); it != cached_.end() && it->first <= 2 * size) {
      void* p = it->second;
      live_[p] = it->first;
      cached_.erase(it);
      return p;
    }
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, size);
    if (e == cudaErrorMemoryAllocation && !cached_.empty()) {
      (void)cudaGetLastError();  // clears the recoverable out-of-memory error before retrying
      trim();
      e = cudaMalloc(&p, size);
    }
    ATREX_TRY(cuda(e));
    live_[p] = size;
    return p;
  }
  void release(void* p) override {
    auto it = live_.find(p);
    if (it == live_.end()) return;
    cached_.emplace(it->second, p);
    live_.erase(it);
  }
  void trim() override {
    for (auto& [size, p] : cached_)
      (void)cudaFree(p);  // freeing cached memory cannot fail usefully
    cached_.clear();
  }
  bool pin_host(void* p, size_t n) override {
    if (!p || n == 0) return false;
    if (cudaHostRegister(p, n, cudaHostRegisterDefault) == cudaSuccess) return true;
    (void)cudaGetLastError();  // not sticky: the copies stay pageable
    return false;
  }
  void unpin_host(void* p) override {
    if (cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
  }
  Result<SharedMemory> create_shared(uint64_t bytes) override {
    ATREX_TRY(load_vmm());
    std::string error;
    const CudaVmm::Exported e = vmm_.create_exported(bytes, &error);
    if (!e.ptr) return io_error("allocating shared device memory: " + error);
    return SharedMemory{reinterpret_cast<void*>(e.ptr), e.bytes, e.fd};
  }
  Result<void*> import_shared(int fd, uint64_t bytes) override {
    ATREX_TRY(load_vmm());
    std::string error;
    const CUdeviceptr p = vmm_.import_map(fd, bytes, &error);
    if (!p) return io_error("mapping shared device memory: " + error);
    return reinterpret_cast<void*>(p);
  }
  Status to_host(void* dst, const void* src, size_t n) override {
    return cuda(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
  }
  Status from_host(void* dst, const void* src, size_t n) override {
    return cuda(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
  }
  Status copy(void* dst, const void* src, size_t n) override {
    return cuda(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream_));
  }
  Status fill(void* dst, uint8_t byte, size_t n) override {
    return cuda(cudaMemsetAsync(dst, byte, n, stream_));
  }
  Status generate(const problems::ResolvedShape& s, size_t index, uint64_t seed,
                  void* dst) override {
    return problems::cuda::generate_input(s, index, seed, dst, stream_);
  }
  Status generate_scaled(const problems::ResolvedShape& s, size_t index, uint64_t seed,
                         int scale_exponent, void* dst) override {
    return problems::cuda::generate_input(s, index, seed, dst, stream_, scale_exponent);
  }
  Status reference(const problems::ResolvedShape& s, std::span<const void* const> in,
                   std::span<void* const> out) override {
    return problems::cuda::reference(s, in, out, stream_);
  }
  Status compare(const problems::TensorDesc& desc, const void* cand, const void* ref, double atol,
                 double rtol, problems::CompareResult& result, bool& supported) override {
    supported = true;
    return problems::cuda::compare_output(desc, cand, ref, atol, rtol, stream_, result);
  }
  Status compare_custom(const problems::ResolvedShape& shape, size_t index,
                        std::span<const void* const> cand, std::span<const void* const> ref,
                        double atol, double rtol, problems::CompareResult& result,
                        bool& supported) override {
    return problems::cuda::compare_custom_output(shape, index, cand, ref, atol, rtol, stream_,
                                                 result, supported);
  }
  Status first_difference(const void* a, const void* b, size_t bytes, int64_t& index,
                          bool& supported) override {
    supported = true;
    ATREX_ASSIGN_OR_RETURN(index, problems::cuda::first_difference(a, b, bytes, stream_));
    return ok();
  }
  Status synchronize() override {
    ATREX_TRY(cuda(cudaDeviceSynchronize()));
    return cuda(cudaGetLastError());
  }
  Status time_call(const std::function<int()>& call, int& rc, double& us) override {
    return timer_.time_eager(
        call, rc, us, [this] { timing_before(); }, [this] { timing_after(); });
  }
  std::string timing_method() const override { return "cuda_events_l2_flush"; }
  double last_drain_us() const override { return timer_.last_drain_us(); }
  double last_start_gap_us() const override { return timer_.last_start_gap_us(); }
  Status capture_timed(const std::function<int()>& call, const std::function<Status()>& before,
                       int batch, int& rc, std::string& unsupported) override {
    return timer_.capture(call, batch, rc, unsupported, before);
  }
  Status replay_timed(std::vector<double>& us) override { return timer_.replay_timed(us); }
  Status replay_call() override { return timer_.replay_call(); }
  std::string graph_timing_method() const override { return "cuda_graph_l2_flush"; }
  std::string tracing_unavailable() const override { return trace_unavailable_; }
  Status trace_call(const std::function<int()>& call, uint64_t id, int& rc,
                    double& event_us) override {
    if (!trace_unavailable_.empty()) return make_error(ErrorCode::kUnavailable, trace_unavailable_);
    return timer_.time_eager(
        [&] {
          trace_.begin(id);
          const int r = call();
          trace_.end();
          return r;
        },
        rc, event_us, [this] { timing_before(); }, [this] { timing_after(); });
  }
  Status trace_collect(std::map<uint64_t, CallTrace>& out,
                       std::vector<StrayRecord>& strays) override {
    if (!trace_unavailable_.empty()) return make_error(ErrorCode::kUnavailable, trace_unavailable_);
#if ATREX_HAVE_CUPTI
    Status collected = trace_.collect(out);
    device_records_ += trace_.last_device_records();
    correlated_records_ += trace_.last_correlated();
    strays = trace_.last_strays();
    return collected;
#else
    (void)out, (void)strays;
    return make_error(ErrorCode::kUnavailable, trace_unavailable_);
#endif
  }
  Json trace_stats() const override {
    return Json{{"device", device_records_}, {"correlated", correlated_records_}};
  }
  Json clocks() override { return nvml_ ? nvml_->sample() : Json{{"available", false}}; }

 private:
  Status load_vmm() {
    if (!vmm_loaded_) {
      if (const std::string missing = vmm_.load(device_); !missing.empty())
        return make_error(ErrorCode::kUnavailable, "no driver entry point " + missing);
      vmm_loaded_ = true;
    }
    return ok();
  }

  int device_;
  bool trace_wanted_ = true;
  CudaVmm vmm_;
  bool vmm_loaded_ = false;
  std::map<void*, size_t> live_;         // buffer -> size
  std::multimap<size_t, void*> cached_;  // released buffers by size
  std::string name_;
  size_t l2_bytes_ = 0;
  cudaStream_t stream_ = nullptr;
  CudaTimer timer_;
#if ATREX_HAVE_CUPTI
  CuptiTrace trace_;
#endif
  std::string trace_unavailable_;
  int64_t device_records_ = 0, correlated_records_ = 0;
  std::unique_ptr<NvmlClocks> nvml_;
};

// `--probe`: prints the visible devices as JSON (atrex.devices/1) for the runner's detection.
int probe() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  atrex::Json out{{"schema", "atrex.devices/1"}, {"devices", atrex::Json::array()}};
  if (e != cudaSuccess) {
    out["error"] = problems::cuda::cuda_error_text(e);
  }
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  out["runtime_version"] = runtime;
  out["driver_version"] = driver;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out["devices"].push_back(atrex::Json{{"index", i},
                                         {"name", p.name},
                                         {"cc_major", p.major},
                                         {"cc_minor", p.minor},
                                         {"sm_count", p.multiProcessorCount},
                                         {"l2_bytes", p.l2CacheSize},
                                         {"memory_bytes", p.totalGlobalMem}});
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace atrex::runner

int main(int argc, char** argv) {
  atrex::runner::judge_prelude(argc, argv);  // before the device: the runner waits for it
  if (argc > 1 && std::strcmp(argv[1], "--probe") == 0) return atrex::runner::probe();
  int device = 0;
  bool judge = false;
  for (int i = 1; i < argc; ++i) {
    if (i + 1 < argc && std::strcmp(argv[i], "--device") == 0) device = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--judge") == 0) judge = true;
  }
  atrex::runner::CudaDevice dev(device, !judge);
  if (auto e = dev.init(); !e) {
    // No usable GPU: the runner records why from this output (status crashed).
    std::fprintf(stderr, "atrex-eval-cuda: cannot initialise device %d: %s\n", device,
                 e.error().message.c_str());
    return 4;
  }
  return atrex::runner::child_main(argc, argv, dev);
}
