// What the evaluation child needs from a backend: memory, the shared reference/generator
// executors, synchronisation with error reporting, and cache-flushed timing of one call.
// Implemented by the CPU child (host memory), the CUDA child (device memory, events, graphs,
// CUPTI) and the HIP child. Every operation returns a Status: a device error (sticky or not) is
// an Error of code kIo whose message is the runtime's own words (problems/cuda_status.h,
// hip_timer.h's hip_status); what a backend does not have (graph replay, tracing) is
// kUnavailable. The shape run turns an error into a `crashed` verdict (the process is not reused
// after one).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <dlpack/dlpack.h>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/problems/compare.h"
#include "atrex/problems/operator.h"
#include "cupti_trace.h"

namespace atrex::runner {

class ChildDevice {
 public:
  virtual ~ChildDevice() = default;
  virtual std::string name() const = 0;  // "NVIDIA H200", "host CPU (model)"
  // Whether alloc() returns host memory (the cpu backend): its buffers are read and written
  // directly, without to_host/from_host copies.
  virtual bool host_memory() const { return false; }
  virtual DLDevice dl_device() const = 0;
  virtual void* stream() = 0;  // passed to the candidate (NULL on CPU)
  // Memory.
  virtual Result<void*> alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  // Returns memory a backend caches for reuse (released buffers) to the system.
  virtual void trim() {}
  // Page-locks host memory that device copies read and write again and again (the judge's shared
  // buffer and its host copies of a shape's tensors): a copy from or to pageable memory goes
  // through a driver staging buffer at a fraction of the link's rate, which set the time of the
  // checks of large shapes (docs/sweeps.md "Timing of the default sweep"). Best effort: false when
  // the backend has nothing to gain or cannot (the copies then stay pageable). unpin_host before
  // the memory is freed or unmapped.
  virtual bool pin_host(void* p, size_t bytes) {
    (void)p, (void)bytes;
    return false;
  }
  virtual void unpin_host(void* p) { (void)p; }
  // Device memory shared with the other process of an evaluation: the judge's device arena
  // (protocol/arena_handoff.h). create_shared: at least `bytes` (rounded up to the device's
  // granularity), mapped read-write here, with a file descriptor (owned by the caller) that
  // import_shared maps in another process. Never released: it lives as long as the process.
  // kUnavailable where the backend cannot share device memory (cpu, hip, a GPU without POSIX
  // file descriptor handles); kIo naming the driver call that failed otherwise.
  struct SharedMemory {
    void* ptr = nullptr;
    uint64_t bytes = 0;
    int fd = -1;
  };
  virtual Result<SharedMemory> create_shared(uint64_t bytes) {
    (void)bytes;
    return make_error(ErrorCode::kUnavailable, "this backend shares no device memory");
  }
  virtual Result<void*> import_shared(int fd, uint64_t bytes) {
    (void)fd, (void)bytes;
    return make_error(ErrorCode::kUnavailable, "this backend shares no device memory");
  }
  virtual Status to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual Status from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;
  virtual Status fill(void* dst, uint8_t byte, size_t bytes) = 0;
  // Shared operator executors.
  virtual Status generate(const problems::ResolvedShape& s, size_t index, uint64_t seed,
                          void* dst) = 0;
  // Input `index` as generate draws it, multiplied by 2^scale_exponent (the range probe:
  // operator.h RangeProbe). This default scales a host copy; backends override it to scale in
  // their generator.
  virtual Status generate_scaled(const problems::ResolvedShape& s, size_t index, uint64_t seed,
                                 int scale_exponent, void* dst) {
    ATREX_TRY(generate(s, index, seed, dst));
    ATREX_TRY(synchronize());
    const problems::TensorDesc& t = s.inputs[index];
    std::vector<uint8_t> host(t.bytes());
    ATREX_TRY(to_host(host.data(), dst, host.size()));
    ATREX_TRY(problems::scale_by_power_of_two(t.dtype, host.data(), t.numel(), scale_exponent));
    return from_host(dst, host.data(), host.size());
  }
  virtual Status reference(const problems::ResolvedShape& s, std::span<const void* const> in,
                           std::span<void* const> out) = 0;
  // The correctness comparison of one output on device buffers (compare.h semantics, without
  // the message) and the first differing byte of two buffers (-1: none). Backends without
  // them leave `supported` false and the child compares on the host.
  virtual Status compare(const problems::TensorDesc& desc, const void* cand, const void* ref,
                         double atol, double rtol, problems::CompareResult& result,
                         bool& supported) {
    (void)desc, (void)cand, (void)ref, (void)atol, (void)rtol, (void)result;
    supported = false;
    return ok();
  }
  // The operator's own comparison of output `index` (TensorSpec::compare) on the device, where the
  // backend has a version of it (`cand`, `ref`: every output's buffer).
  virtual Status compare_custom(const problems::ResolvedShape& shape, size_t index,
                                std::span<const void* const> cand, std::span<const void* const> ref,
                                double atol, double rtol, problems::CompareResult& result,
                                bool& supported) {
    (void)shape, (void)index, (void)cand, (void)ref, (void)atol, (void)rtol, (void)result;
    supported = false;
    return ok();
  }
  virtual Status first_difference(const void* a, const void* b, size_t bytes, int64_t& index,
                                  bool& supported) {
    (void)a, (void)b, (void)bytes, (void)index;
    supported = false;
    return ok();
  }
  // Waits for all device work; the (possibly sticky) device error.
  virtual Status synchronize() = 0;
  // Flushes the caches (outside the timed window), then times `call` (microseconds, device
  // time where the backend can measure it). `call` returns the candidate's return code.
  // Implementations run the timing hooks (set_timing_hooks) right before the timed window
  // opens (after the flush is issued) and right after it closes (the device work done), so the
  // judge's clock brackets each timed call (judge_link.h).
  virtual Status time_call(const std::function<int()>& call, int& rc, double& us) = 0;
  // Of the last time_call or trace_call: how long (microseconds, host clock) a device-wide
  // synchronize took after the call's end event had completed, i.e. how long device work the
  // call started outlived its timed window (work on a stream never joined back to the given
  // one, or launched by another thread). Taken before the hook that ends the judge's bracket, so
  // the bracket holds that work too. 0 where the backend has no such window (cpu).
  virtual double last_drain_us() const { return 0; }
  // Of the same call: device time (microseconds) between the end of the harness's preparation
  // (the flush) and the call's start event, where nothing of the harness's runs: work put on the
  // stream meanwhile by someone else (a thread or signal handler of the candidate's while the
  // child waits for the judge's go). 0 where the backend cannot tell (cpu).
  virtual double last_start_gap_us() const { return 0; }
  void set_timing_hooks(std::function<void()> before, std::function<void()> after) {
    timing_before_ = std::move(before);
    timing_after_ = std::move(after);
  }
  // The judge's calibration (judge.cpp), in the judge's own process, with no candidate: what one
  // timed sample costs inside a bracket beyond the candidate's call (microseconds on this
  // process's clock), `reset` standing in for the output reset of a timed call. This default:
  // the median wall time of time_call around `reset`, i.e. the flush, the events and the sync.
  virtual Status bracket_overhead(const std::function<Status()>& reset, double& us) {
    std::vector<double> walls;
    for (int k = 0; k < 5; ++k) {
      Status inner = ok();
      int rc = 0;
      double device_us = 0;
      const auto t0 = std::chrono::steady_clock::now();
      ATREX_TRY(time_call(
          [&] {
            inner = reset();
            return 0;
          },
          rc, device_us));
      ATREX_TRY(synchronize());
      walls.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      ATREX_TRY(inner);
    }
    std::sort(walls.begin(), walls.end());
    us = walls[walls.size() / 2];
    return ok();
  }
  virtual std::string timing_method() const = 0;
  // Whether the judge's brackets hold the work of a timed call on this backend (issue 14;
  // docs/evaluation.md "The judge"): the child applies the splice the judge's go names to the
  // call's inputs only after the go, inside the bracket, and keeps the outputs in the shared
  // memfd's arena (protocol/shared_layout.h), where the judge reads them itself when the done
  // reaches it; the judge holds what it read against the outputs it re-checks and bounds the
  // claimed time with the brackets it so verified only. cpu: yes (host memory: the splice is a
  // few memcpys, the outputs live in the arena). cuda and hip: no, they splice by call number
  // before the bracket as before and the outputs stay on the device (applying the splice at go
  // time on the device broke honest kernels' input checks in an earlier attempt, and a device
  // copy at the done would sit inside the event window); there every bracket bounds the claim,
  // and a relay that empties brackets is not refuted.
  virtual bool brackets_hold_work() const { return false; }
  // Graph-replay timing (cuda_timer.h). Backends without graphs leave `unsupported` set.
  // capture_timed: records `batch` times (`before`, flush, timed call); replay_timed appends their
  // samples (microseconds); replay_call runs one untimed call of the captured work (for checks).
  virtual Status capture_timed(const std::function<int()>& call,
                               const std::function<Status()>& before, int batch, int& rc,
                               std::string& unsupported) {
    (void)call, (void)before, (void)batch, (void)rc;
    unsupported = "this backend has no graph replay";
    return ok();
  }
  virtual Status replay_timed(std::vector<double>& us) {
    (void)us;
    return make_error(ErrorCode::kUnavailable, "this backend has no graph replay");
  }
  virtual Status replay_call() {
    return make_error(ErrorCode::kUnavailable, "this backend has no graph replay");
  }
  virtual std::string graph_timing_method() const { return {}; }
  // Activity tracing of candidate calls (CUPTI on CUDA, cupti_trace.h): tracing_unavailable() is
  // "" when the backend can trace, else why not. trace_call: flushes the caches, runs `call`
  // tagged with `id` and also times it with events (`event_us`); trace_collect (after a
  // synchronize) moves the traces of the tagged calls into `out`, and the device records since
  // the first of those calls began that carry no call's id into `strays` (kernel_checks.h
  // check_stray_work).
  virtual std::string tracing_unavailable() const { return "this backend has no activity tracing"; }
  virtual Status trace_call(const std::function<int()>& call, uint64_t id, int& rc,
                            double& event_us) {
    (void)call, (void)id, (void)rc, (void)event_us;
    return make_error(ErrorCode::kUnavailable, "this backend has no activity tracing");
  }
  virtual Status trace_collect(std::map<uint64_t, CallTrace>& out,
                               std::vector<StrayRecord>& strays) {
    (void)out, (void)strays;
    return make_error(ErrorCode::kUnavailable, "this backend has no activity tracing");
  }
  // Counts of the records tracing saw since the child started ({device, correlated}), for the
  // record.
  virtual Json trace_stats() const { return Json::object(); }
  // Clocks, throttle reasons, temperature, power (NVML on the GPU); {} where unknown.
  virtual Json clocks() { return Json::object(); }

 protected:
  void timing_before() {
    if (timing_before_) timing_before_();
  }
  void timing_after() {
    if (timing_after_) timing_after_();
  }

 private:
  std::function<void()> timing_before_, timing_after_;
};

}  // namespace atrex::runner
