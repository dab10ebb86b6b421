#include "hip_timer.h"

#include <algorithm>

#include <fmt/format.h>

namespace atrex::runner {

std::string hip_error_text(hipError_t e) {
  // HIP 5.2's hipGetErrorString often returns the name again.
  const std::string name = hipGetErrorName(e), text = hipGetErrorString(e);
  return text.empty() || text == name ? fmt::format("{} ({})", name, static_cast<int>(e))
                                      : fmt::format("{} ({}): {}", name, static_cast<int>(e), text);
}

Status hip_status(hipError_t e, std::string_view where) {
  if (e == hipSuccess) return ok();
  std::string message = where.empty() ? std::string() : std::string(where) + ": ";
  return io_error(message + hip_error_text(e));
}

HipTimer::~HipTimer() {
  drop_graphs();
  if (start_) (void)hipEventDestroy(start_);
  if (stop_) (void)hipEventDestroy(stop_);
  if (flush_) (void)hipFree(flush_);
}

void HipTimer::drop_graphs() {
  if (timed_exec_) (void)hipGraphExecDestroy(timed_exec_);
  if (call_exec_) (void)hipGraphExecDestroy(call_exec_);
  timed_exec_ = call_exec_ = nullptr;
  for (auto* e : graph_start_) (void)hipEventDestroy(e);
  for (auto* e : graph_stop_) (void)hipEventDestroy(e);
  graph_start_.clear();
  graph_stop_.clear();
  for (auto* g : graphs_) (void)hipGraphDestroy(g);
  graphs_.clear();
}

Status HipTimer::init(hipStream_t stream, size_t l2_bytes) {
  stream_ = stream;
  flush_size_ = std::max<size_t>(2 * l2_bytes, size_t{512} << 20);
  ATREX_TRY(hip_status(hipMalloc(&flush_, flush_size_), "allocating the cache flush buffer"));
  ATREX_TRY(hip_status(hipEventCreate(&start_)));
  return hip_status(hipEventCreate(&stop_));
}

Status HipTimer::flush() {
  // A different byte each round, so no layer can skip the writes as redundant.
  return hip_status(
      hipMemsetAsync(flush_, static_cast<int>(++flush_round_ & 0xff), flush_size_, stream_));
}

Status HipTimer::time_eager(const std::function<int()>& call, int& rc, double& us) {
  ATREX_TRY(flush());
  ATREX_TRY(hip_status(hipEventRecord(start_, stream_)));
  rc = call();
  // The null stream waits for every blocking stream, so the candidate's own streams are inside.
  ATREX_TRY(hip_status(hipEventRecord(stop_, nullptr)));
  ATREX_TRY(hip_status(hipEventSynchronize(stop_)));
  float ms = 0;
  ATREX_TRY(hip_status(hipEventElapsedTime(&ms, start_, stop_)));
  us = static_cast<double>(ms) * 1000.0;
  return ok();
}

Status HipTimer::capture_graph(const std::function<Status()>& body, int& rc, hipGraph_t& graph,
                               std::string& unsupported) {
  graph = nullptr;
  ATREX_TRY(hip_status(hipStreamBeginCapture(stream_, hipStreamCaptureModeGlobal),
                       "beginning a stream capture"));
  Status body_status = body();
  const hipError_t end = hipStreamEndCapture(stream_, &graph);
  if (body_status && end != hipSuccess) body_status = hip_status(end, "ending the capture");
  if (body_status && rc == 0) return ok();
  if (graph) (void)hipGraphDestroy(graph);
  graph = nullptr;
  (void)hipGetLastError();  // capture errors are not sticky; clear them for the eager path
  unsupported = rc != 0 ? "the candidate returned an error under stream capture"
                        : body_status.error().message;
  return ok();
}

Status HipTimer::build_timed_graph(const std::function<int()>& call, int batch, int& rc,
                                   std::string& unsupported,
                                   const std::function<Status()>& before) {
  // The top graph and its parts live as long as the executable graph (drop_graphs), in case a
  // runtime keeps references to them instead of copies.
  hipGraph_t top = nullptr;
  ATREX_TRY(hip_status(hipGraphCreate(&top, 0)));
  graphs_.push_back(top);
  hipGraphNode_t prev = nullptr;
  auto add_child = [&](hipGraph_t child, hipGraphNode_t& node) {
    return hip_status(
        hipGraphAddChildGraphNode(&node, top, prev ? &prev : nullptr, prev ? 1 : 0, child),
        "assembling the timed graph");
  };
  auto add_event = [&](hipEvent_t event, hipGraphNode_t& node) {
    return hip_status(
        hipGraphAddEventRecordNode(&node, top, prev ? &prev : nullptr, prev ? 1 : 0, event),
        "assembling the timed graph");
  };
  auto call_body = [&]() -> Status {
    rc = call();
    return ok();
  };
  for (int k = 0; k < batch; ++k) {
    hipGraph_t setup = nullptr, body = nullptr;
    auto setup_body = [&]() -> Status {
      if (before) {
        if (auto s = before(); !s)
          return tl::unexpected(with_context(s.error(), "before the timed call"));
      }
      if (auto s = flush(); !s) return tl::unexpected(with_context(s.error(), "flush"));
      return ok();
    };
    ATREX_TRY(capture_graph(setup_body, rc, setup, unsupported));
    if (!setup) return ok();
    graphs_.push_back(setup);
    ATREX_TRY(capture_graph(call_body, rc, body, unsupported));
    if (!body) return ok();
    graphs_.push_back(body);
    // setup -> start event -> call -> stop event, after the previous sample's stop event.
    for (int step = 0; step < 4; ++step) {
      hipGraphNode_t node = nullptr;
      ATREX_TRY(step == 0   ? add_child(setup, node)
                : step == 1 ? add_event(graph_start_[k], node)
                : step == 2 ? add_child(body, node)
                            : add_event(graph_stop_[k], node));
      prev = node;
    }
  }
  const hipError_t inst = hipGraphInstantiate(&timed_exec_, top, nullptr, nullptr, 0);
  if (inst != hipSuccess) {
    timed_exec_ = nullptr;
    (void)hipGetLastError();
    unsupported = "instantiating the timed graph: " + hip_error_text(inst);
  }
  return ok();
}

Status HipTimer::capture(const std::function<int()>& call, int batch, int& rc,
                         std::string& unsupported, const std::function<Status()>& before) {
  drop_graphs();
  rc = 0;
  unsupported.clear();
  ATREX_TRY(hip_status(hipStreamSynchronize(stream_)));
  for (int k = 0; k < batch; ++k) {
    hipEvent_t a = nullptr, b = nullptr;
    ATREX_TRY(hip_status(hipEventCreate(&a)));
    graph_start_.push_back(a);
    ATREX_TRY(hip_status(hipEventCreate(&b)));
    graph_stop_.push_back(b);
  }
  ATREX_TRY(build_timed_graph(call, batch, rc, unsupported, before));
  if (!timed_exec_) return ok();
  hipGraph_t one = nullptr;
  ATREX_TRY(capture_graph(
      [&]() -> Status {
        rc = call();
        return ok();
      },
      rc, one, unsupported));
  if (one) {
    graphs_.push_back(one);
    const hipError_t inst = hipGraphInstantiate(&call_exec_, one, nullptr, nullptr, 0);
    if (inst != hipSuccess) {
      call_exec_ = nullptr;
      (void)hipGetLastError();
      unsupported = "instantiating the one-call graph: " + hip_error_text(inst);
    }
  }
  if (!call_exec_) drop_graphs();
  return hip_status(hipStreamSynchronize(stream_));
}

Status HipTimer::replay_timed(std::vector<double>& us) {
  ATREX_TRY(hip_status(hipGraphLaunch(timed_exec_, stream_)));
  ATREX_TRY(hip_status(hipStreamSynchronize(stream_)));
  for (size_t k = 0; k < graph_start_.size(); ++k) {
    float ms = 0;
    ATREX_TRY(hip_status(hipEventElapsedTime(&ms, graph_start_[k], graph_stop_[k]),
                         "reading graph event times"));
    us.push_back(static_cast<double>(ms) * 1000.0);
  }
  return ok();
}

Status HipTimer::replay_call() { return hip_status(hipGraphLaunch(call_exec_, stream_)); }

}  // namespace atrex::runner
