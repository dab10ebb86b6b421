// CUPTI activity tracing of the candidate's calls (docs/evaluation.md "Timing"), loaded with
// dlopen (libcupti.so.13, libcupti.so): no link-time dependency; without CUPTI the child times
// with graphs or events and says so.
//
// Every CUDA call the calling thread makes between begin(id) and end() is tagged with `id`
// (external correlation, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0); kernel, memcpy and memset
// activity records (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, MEMCPY, MEMSET: device timestamps,
// every stream) are grouped by that id. A call's time is the span from its first record's start
// to its last record's end (the method of NVIDIA SOL-ExecBench's bench_gpu_time_with_cupti);
// launch latency before the first kernel is not in it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "atrex/common/error.h"

namespace atrex::runner {

struct TracedKernel {
  std::string name;  // mangled, as the module defines it
  double us = 0;     // end - start
};

struct CallTrace {
  uint64_t first_start_ns = 0, last_end_ns = 0;
  std::vector<TracedKernel> kernels;  // in start order
  int copies = 0;                     // memcpy and memset records
  double span_us() const {
    return last_end_ns > first_start_ns ? (last_end_ns - first_start_ns) / 1e3 : 0.0;
  }
};

// A device record (kernel, memcpy, memset) that ran after the first traced call of a collect
// began and carries no traced call's id: the harness's own work between the calls (output
// resets, guard checks, the L2 flush) or work that escaped the timed span (launched from another
// thread, or inside a call with the id taken off the thread: kernels/faults/arena_attacks/
// cupti_escape_side_stream.cu). Where it came from is read off the API record that launched it.
struct StrayRecord {
  std::string kernel;         // mangled name; empty for a memcpy or memset
  bool other_thread = false;  // launched by a thread other than the one that traces the calls
  int64_t in_call = -1;       // the traced call whose begin/end window holds the launch, or -1
  // The external id it carried where that id is no traced call's of this collect (pushed by the
  // candidate itself: every record with it would otherwise be counted as correlated), else -1.
  int64_t foreign_id = -1;
  uint64_t start_ns = 0, end_ns = 0;
};

class CuptiTrace {
 public:
  CuptiTrace() = default;
  ~CuptiTrace();
  CuptiTrace(const CuptiTrace&) = delete;
  CuptiTrace& operator=(const CuptiTrace&) = delete;

  // Loads CUPTI and enables the activity kinds. kUnavailable (CUPTI missing, too old, or
  // ATREX_NO_CUPTI set) or kIo (a CUPTI call failed) says why tracing is off. Call after the CUDA
  // context exists.
  Status init();
  bool available() const { return available_; }
  void begin(uint64_t id);
  void end();
  // Flushes CUPTI's buffers (the caller has synchronised the device) and moves the traces of the
  // tagged calls seen since the last collect into `out`.
  // kUnavailable without a successful init; kIo when CUPTI's flush fails.
  Status collect(std::map<uint64_t, CallTrace>& out);
  // Of the last collect: device records (kernel, memcpy, memset) seen, and those of tagged calls.
  int last_device_records() const { return last_device_records_; }
  int last_correlated() const { return last_correlated_; }
  // Of the last collect: the stray records (above), in start order.
  const std::vector<StrayRecord>& last_strays() const { return last_strays_; }

 private:
  int last_device_records_ = 0, last_correlated_ = 0;
  std::map<uint64_t, std::pair<uint64_t, uint64_t>>
      windows_;  // id -> CUPTI timestamps of begin/end
  std::vector<StrayRecord> last_strays_;
  uint32_t tracing_thread_ = 0;     // gettid() of the thread that calls begin()
  bool system_thread_ids_ = false;  // CUPTI's threadId is gettid() (cuptiSetThreadIdType)
  uint64_t open_ = 0;
  bool available_ = false;
  void* lib_ = nullptr;
};

}  // namespace atrex::runner
