// Cache-flushed timing of one candidate call on an AMD GPU (atrex-eval-hip), the HIP twin of
// cuda_timer.h. docs/evaluation.md "HIP backend". Written against the HIP 5.2 runtime API of
// Debian 12; never run: we have no AMD GPU.
//
// Every sample is preceded by a cache flush outside the timed window: hipMemsetAsync over
// max(2 x L2, 512 MiB), a different byte each time. hipDeviceProp_t reports the L2 of one XCD
// (4 MiB on MI300X); MI300X's 256 MiB Infinity Cache (MALL) behind it is not in the properties,
// hence the 512 MiB floor.
//  * eager ("hip_events_l2_flush"): start event on the candidate's stream, the call, stop event
//    on the null stream, which waits for every blocking stream.
//  * graph ("hip_graph_l2_flush"): HIP 5.2 cannot capture a timing event inside a stream capture
//    (hipEventRecordWithFlags / hipEventRecordExternal came later; a captured hipEventRecord only
//    orders streams), so the timed graph is assembled by hand: for each of `batch` samples, the
//    captured (before + flush) graph, an event-record node, the captured call graph as a child
//    node, and an event-record node, in one chain. A child-graph node completes when all of its
//    nodes do, so the window covers every stream the call joined back into its capture; work that
//    escaped the capture is caught by the replay re-check in the child runner. A call that cannot
//    be captured falls back to eager with the reason recorded.
#pragma once

#include <hip/hip_runtime_api.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "atrex/common/error.h"

namespace atrex::runner {

// "hipErrorX (code): text" (hipGetErrorName, hipGetErrorString).
std::string hip_error_text(hipError_t e);
// ok() for hipSuccess, else a kIo Error "[where: ]hipErrorX (code): text" (common/error.h).
Status hip_status(hipError_t e, std::string_view where = {});

class HipTimer {
 public:
  HipTimer() = default;
  ~HipTimer();
  HipTimer(const HipTimer&) = delete;
  HipTimer& operator=(const HipTimer&) = delete;

  // `l2_bytes` from hipDeviceProp_t::l2CacheSize. Every method's HIP failure is hip_status's.
  Status init(hipStream_t stream, size_t l2_bytes);
  size_t flush_bytes() const { return flush_size_; }

  Status flush();
  // One eager sample (microseconds between the events).
  Status time_eager(const std::function<int()>& call, int& rc, double& us);

  // Builds the timed graph of `batch` samples and a graph of one bare call (for re-checks).
  // When the call cannot be captured, `unsupported` says why and the return is ok(); a returned
  // error is a device failure. `before` runs ahead of each sample's flush, outside the window.
  Status capture(const std::function<int()>& call, int batch, int& rc, std::string& unsupported,
                 const std::function<Status()>& before = {});
  Status replay_timed(std::vector<double>& us);
  Status replay_call();

 private:
  void drop_graphs();
  // Captures `body` on the stream into `graph` (null with `unsupported` set when it cannot).
  Status capture_graph(const std::function<Status()>& body, int& rc, hipGraph_t& graph,
                       std::string& unsupported);
  Status build_timed_graph(const std::function<int()>& call, int batch, int& rc,
                           std::string& unsupported, const std::function<Status()>& before);

  hipStream_t stream_ = nullptr;
  void* flush_ = nullptr;
  size_t flush_size_ = 0;
  unsigned flush_round_ = 0;
  hipEvent_t start_ = nullptr, stop_ = nullptr;
  std::vector<hipEvent_t> graph_start_, graph_stop_;
  hipGraphExec_t timed_exec_ = nullptr, call_exec_ = nullptr;
  std::vector<hipGraph_t> graphs_;  // the graphs behind the executable ones
};

}  // namespace atrex::runner
