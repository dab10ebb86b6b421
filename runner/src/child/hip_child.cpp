// atrex-eval-hip: the evaluation child of the hip backend. Links the HIP runtime (libamdhip64)
// as a shared library, the one hipcc-built candidates load, so the candidate and the harness
// share one runtime. The gates are the child runner's (child_runner.h), as for cpu and cuda;
// this backend gives them device memory, a stream, cache-flushed hipEvent timing and hipGraph
// replay (hip_timer.h). Inputs are drawn and references computed on the host with the problems
// library, like the cpu backend, then copied; outputs are compared on the host.
//
// Built and tested without an AMD GPU only: with none, the child answers `rejected` with
// "no AMD GPU / HIP runtime found: <hipGetDeviceCount error>" for every shape (and `--probe`
// lists no device). Everything past device initialisation has never been run.
#include <hip/hip_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "atrex/problems/operator.h"
#include "child_runner.h"
#include "judge.h"
#include "child_unavailable.h"
#include "hip_timer.h"

namespace atrex::runner {
inline constexpr const char* kNoDevice = "no AMD GPU / HIP runtime found";

namespace {

Status hip(hipError_t e) { return hip_status(e); }

// The number of devices the runtime sees (> 0), or kUnavailable saying why there are none.
Result<int> device_count() {
  int count = 0;
  const hipError_t e = hipGetDeviceCount(&count);
  if (e != hipSuccess) {
    return make_error(ErrorCode::kUnavailable,
                      fmt::format("{}: hipGetDeviceCount: {}", kNoDevice, hip_error_text(e)));
  }
  if (count <= 0) {
    return make_error(ErrorCode::kUnavailable,
                      fmt::format("{}: hipGetDeviceCount reports 0 devices", kNoDevice));
  }
  return count;
}

// "gfx942:sramecc+:xnack-" -> "gfx942" (hipcc's --offload-arch takes the processor name).
std::string processor_name(const char* gcn_arch_name) {
  std::string s = gcn_arch_name;
  return s.substr(0, s.find(':'));
}

class HipDevice final : public ChildDevice {
 public:
  explicit HipDevice(int device) : device_(device) {}

  // kUnavailable when there is no such device; kIo when it is there but fails to initialise.
  Status init() {
    ATREX_ASSIGN_OR_RETURN(const int count, device_count());
    if (device_ >= count) {
      return make_error(ErrorCode::kUnavailable,
                        fmt::format("no AMD GPU {} (the HIP runtime sees {})", device_, count));
    }
    ATREX_TRY(hip(hipSetDevice(device_)));
    hipDeviceProp_t prop{};
    ATREX_TRY(hip(hipGetDeviceProperties(&prop, device_)));
    name_ = fmt::format("{} ({})", prop.name, processor_name(prop.gcnArchName));
    ATREX_TRY(hip(hipStreamCreate(&stream_)));
    return timer_.init(stream_, static_cast<size_t>(prop.l2CacheSize));
  }

  std::string name() const override { return name_; }
  DLDevice dl_device() const override { return DLDevice{kDLROCM, device_}; }
  void* stream() override { return stream_; }
  Result<void*> alloc(size_t bytes) override {
    void* p = nullptr;
    ATREX_TRY(hip(hipMalloc(&p, bytes)));
    return p;
  }
  void release(void* p) override { (void)hipFree(p); }
  Status to_host(void* dst, const void* src, size_t n) override {
    ATREX_TRY(hip(hipMemcpyAsync(dst, src, n, hipMemcpyDeviceToHost, stream_)));
    return hip(hipStreamSynchronize(stream_));
  }
  Status from_host(void* dst, const void* src, size_t n) override {
    ATREX_TRY(hip(hipMemcpyAsync(dst, src, n, hipMemcpyHostToDevice, stream_)));
    return hip(hipStreamSynchronize(stream_));
  }
  Status copy(void* dst, const void* src, size_t n) override {
    return hip(hipMemcpyAsync(dst, src, n, hipMemcpyDeviceToDevice, stream_));
  }
  Status fill(void* dst, uint8_t byte, size_t n) override {
    return hip(hipMemsetAsync(dst, byte, n, stream_));
  }
  // Drawn on the host with the generators the cpu backend uses (same values for a seed), then
  // copied.
  Status generate(const problems::ResolvedShape& s, size_t index, uint64_t seed,
                  void* dst) override {
    std::vector<uint8_t>& host = scratch(0, s.inputs[index].bytes());
    problems::generate_input_cpu(s, index, seed, host.data());
    return from_host(dst, host.data(), host.size());
  }
  // The host reference on copies of the device buffers. Outputs are copied in as well: an
  // in-place output (TensorSpec::initial_from) starts from its input's values.
  Status reference(const problems::ResolvedShape& s, std::span<const void* const> in,
                   std::span<void* const> out) override {
    std::vector<std::vector<uint8_t>> host_in(in.size()), host_out(out.size());
    std::vector<const void*> in_ptrs;
    std::vector<void*> out_ptrs;
    for (size_t i = 0; i < in.size(); ++i) {
      host_in[i].resize(s.inputs[i].bytes());
      ATREX_TRY(to_host(host_in[i].data(), in[i], host_in[i].size()));
      in_ptrs.push_back(host_in[i].data());
    }
    for (size_t i = 0; i < out.size(); ++i) {
      host_out[i].resize(s.outputs[i].bytes());
      ATREX_TRY(to_host(host_out[i].data(), out[i], host_out[i].size()));
      out_ptrs.push_back(host_out[i].data());
    }
    s.def->reference_cpu(s, in_ptrs, out_ptrs);
    for (size_t i = 0; i < out.size(); ++i) {
      ATREX_TRY(from_host(out[i], host_out[i].data(), host_out[i].size()));
    }
    return ok();
  }
  Status synchronize() override {
    ATREX_TRY(hip(hipDeviceSynchronize()));
    return hip(hipGetLastError());
  }
  Status time_call(const std::function<int()>& call, int& rc, double& us) override {
    // The judge's bracket holds the flush too; bracket_overhead's default measures it.
    timing_before();
    Status timed = timer_.time_eager(call, rc, us);
    timing_after();
    return timed;
  }
  std::string timing_method() const override { return "hip_events_l2_flush"; }
  Status capture_timed(const std::function<int()>& call, const std::function<Status()>& before,
                       int batch, int& rc, std::string& unsupported) override {
    return timer_.capture(call, batch, rc, unsupported, before);
  }
  Status replay_timed(std::vector<double>& us) override { return timer_.replay_timed(us); }
  Status replay_call() override { return timer_.replay_call(); }
  std::string graph_timing_method() const override { return "hip_graph_l2_flush"; }
  std::string tracing_unavailable() const override {
    return "the hip backend has no activity tracing (rocprofiler is not wired in): no kernel "
           "spans, no dsl_share";
  }
  Json clocks() override {
    return Json{{"available", false},
                {"reason", "atrex does not read AMD GPU clocks (no rocm-smi binding)"}};
  }

 private:
  std::vector<uint8_t>& scratch(size_t slot, size_t bytes) {
    if (scratch_.size() <= slot) scratch_.resize(slot + 1);
    scratch_[slot].resize(bytes);
    return scratch_[slot];
  }

  int device_;
  std::string name_;
  hipStream_t stream_ = nullptr;
  HipTimer timer_;
  std::vector<std::vector<uint8_t>> scratch_;
};

// `--probe`: the visible devices as JSON (atrex.devices/1) for the runner's detection; with none,
// "error" says why. Exit code 0 either way: the answer is in the JSON.
int probe() {
  Json out{{"schema", "atrex.devices/1"}, {"backend", "hip"}, {"devices", Json::array()}};
  const Result<int> devices = device_count();
  const int count = devices ? *devices : 0;
  if (!devices) out["error"] = devices.error().message;
  int runtime = 0;
  if (hipRuntimeGetVersion(&runtime) == hipSuccess) out["runtime_version"] = runtime;
  for (int i = 0; i < count; ++i) {
    hipDeviceProp_t p{};
    if (hipGetDeviceProperties(&p, i) != hipSuccess) continue;
    out["devices"].push_back(Json{{"index", i},
                                  {"name", p.name},
                                  {"arch", processor_name(p.gcnArchName)},
                                  {"cu_count", p.multiProcessorCount},
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
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0) device = std::atoi(argv[i + 1]);
  }
  atrex::runner::HipDevice dev(device);
  if (auto init = dev.init(); !init) {
    const std::string& e = init.error().message;
    // A verdict per shape instead of a crash: `rejected` when there is no device to run on (the
    // record says why), `crashed` when a device is there but would not initialise.
    const bool no_device = init.error().code == atrex::ErrorCode::kUnavailable;
    return atrex::runner::child_main_unavailable(
        argc, argv, no_device ? atrex::EvalStatus::kRejected : atrex::EvalStatus::kCrashed,
        no_device ? e : "initialising the AMD GPU: " + e, 4);
  }
  return atrex::runner::child_main(argc, argv, dev);
}
