// Cache-flushed timing of one candidate call on the GPU, shared by the evaluation child
// (atrex-eval-cuda) and the calibration benchmark (atrex-cuda-bench), so `atrex bench timing`
// measures exactly the harness the scores come from. docs/evaluation.md "Timing".
//
// Two methods, both flushing the L2 (cudaMemsetAsync over max(2 x L2, 64 MiB)) outside the timed
// window before every sample:
//  * eager  ("cuda_events_l2_flush"): start event on the candidate's stream, the call, stop event
//    on the legacy default stream, which waits for every blocking stream, so work the candidate
//    put on its own blocking streams is inside the window. Host launch cost partly shows.
//  * graph  ("cuda_graph_l2_flush"): `batch` x (flush, start, call, stop) captured once into a
//    CUDA graph (stream capture, global mode) and replayed; the events are external event-record
//    nodes (cudaEventRecordExternal). Capture only succeeds when every stream the candidate uses
//    is joined back to the capturing one, so the window covers all of its work; host launch cost
//    is gone, which is what tiny shapes need (a 2 us kernel measures ~2 us, not ~9 us). A call that
//    cannot be captured (synchronises, allocates, launches on the legacy stream, returns an error
//    under capture) falls back to eager, with the reason recorded.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "atrex/common/error.h"

namespace atrex::runner {

class CudaTimer {
 public:
  CudaTimer() = default;
  ~CudaTimer();
  CudaTimer(const CudaTimer&) = delete;
  CudaTimer& operator=(const CudaTimer&) = delete;

  // `l2_bytes` from cudaDeviceProp::l2CacheSize. Every method's CUDA failure is a kIo Error with
  // the runtime's words (problems/cuda_status.h).
  Status init(cudaStream_t stream, size_t l2_bytes);
  size_t flush_bytes() const { return flush_size_; }

  // Enqueues one L2 flush on the stream (outside any timed window).
  Status flush();
  // One eager sample: flush, start event, `call` (returns the candidate's rc), stop event; `us` is
  // the device time between the events in microseconds.
  // `before`/`after` (optional): run right before the start event is recorded (the flush is
  // issued) and right after the stop event has completed and a device-wide synchronize has
  // waited for any work the call left running: the judge's bracket (judge_link.h).
  // last_drain_us(): how long that synchronize took (host clock, microseconds).
  Status time_eager(const std::function<int()>& call, int& rc, double& us,
                    const std::function<void()>& before = {},
                    const std::function<void()>& after = {});

  // Captures `batch` timed calls into a graph, plus a graph of one bare call (no flush, no
  // events) used to re-check what replays compute. When the call cannot be captured,
  // `unsupported` says why and the return is ok() (the caller falls back to eager); a returned
  // error is a real device failure.
  // `before` (optional) is captured ahead of each sample's flush, outside the timed window (the
  // evaluation child poisons the outputs there).
  Status capture(const std::function<int()>& call, int batch, int& rc, std::string& unsupported,
                 const std::function<Status()>& before = {});
  bool captured() const { return timed_exec_ != nullptr; }
  double last_drain_us() const { return drain_us_; }
  // Of the last time_eager: device time between the event recorded right after the flush and
  // the start event (microseconds); nothing of the harness's runs there, and the stream is held
  // until the start event is enqueued (waiting for `before` is no idle time in it): work another
  // thread or a signal handler put on the stream meanwhile.
  double last_start_gap_us() const { return gap_us_; }
  // Replays the timed graph once and appends its `batch` samples (microseconds).
  Status replay_timed(std::vector<double>& us);
  // Replays the one-call graph (asynchronously, on the stream).
  Status replay_call();

 private:
  void drop_graphs();
  // cudaLaunchHostFunc body: returns once `gate` (std::atomic<uint32_t>) is non-zero.
  static void CUDART_CB hold_stream(void* gate);

  cudaStream_t stream_ = nullptr;
  void* flush_ = nullptr;
  size_t flush_size_ = 0;
  unsigned flush_round_ = 0;
  double drain_us_ = 0, gap_us_ = 0;
  cudaEvent_t start_ = nullptr, stop_ = nullptr, ready_ = nullptr;
  std::atomic<uint32_t> gate_{1};
  std::vector<cudaEvent_t> graph_start_, graph_stop_;
  cudaGraphExec_t timed_exec_ = nullptr, call_exec_ = nullptr;
};

}  // namespace atrex::runner
