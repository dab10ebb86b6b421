#include "hip_timer.h"

#include <algorithm>

#include <fmt/format.h>

namespace atrex::runner {

std::string hip_error_text(hipError_t e) {
  if (e == hipSuccess) return {};
  // HIP 5.2's hipGetErrorString often returns the name again.
  const std::string name = hipGetErrorName(e), text = hipGetErrorString(e);
  return text.empty() || text == name ? fmt::format("{} ({})", name, static_cast<int>(e))
                                      : fmt::format("{} ({}): {}", name, static_cast<int>(e), text);
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

std::string HipTimer::init(hipStream_t stream, size_t l2_bytes) {
  stream_ = stream;
  flush_size_ = std::max<size_t>(2 * l2_bytes, size_t{512} << 20);
  if (auto e = hip_error_text(hipMalloc(&flush_, flush_size_)); !e.empty()) return e;
  if (auto e = hip_error_text(hipEventCreate(&start_)); !e.empty()) return e;
  return hip_error_text(hipEventCreate(&stop_));
}

std::string HipTimer::flush() {
  // A different byte each round, so no layer can skip the writes as redundant.
  return hip_error_text(
      hipMemsetAsync(flush_, static_cast<int>(++flush_round_ & 0xff), flush_size_, stream_));
}

std::string HipTimer::time_eager(const std::function<int()>& call, int& rc, double& us) {
  if (auto e = flush(); !e.empty()) return e;
  if (auto e = hip_error_text(hipEventRecord(start_, stream_)); !e.empty()) return e;
  rc = call();
  // The null stream waits for every blocking stream, so the candidate's own streams are inside.
  if (auto e = hip_error_text(hipEventRecord(stop_, nullptr)); !e.empty()) return e;
  if (auto e = hip_error_text(hipEventSynchronize(stop_)); !e.empty()) return e;
  float ms = 0;
  if (auto e = hip_error_text(hipEventElapsedTime(&ms, start_, stop_)); !e.empty()) return e;
  us = static_cast<double>(ms) * 1000.0;
  return {};
}

std::string HipTimer::capture_graph(const std::function<std::string()>& body, int& rc,
                                    hipGraph_t& graph, std::string& unsupported) {
  graph = nullptr;
  if (auto e = hip_error_text(hipStreamBeginCapture(stream_, hipStreamCaptureModeGlobal));
      !e.empty())
    return e;
  std::string body_error = body();
  const hipError_t end = hipStreamEndCapture(stream_, &graph);
  if (body_error.empty() && end != hipSuccess)
    body_error = "ending the capture: " + hip_error_text(end);
  if (body_error.empty() && rc == 0) return {};
  if (graph) (void)hipGraphDestroy(graph);
  graph = nullptr;
  (void)hipGetLastError();  // capture errors are not sticky; clear them for the eager path
  unsupported = rc != 0 ? "the candidate returned an error under stream capture" : body_error;
  return {};
}

std::string HipTimer::build_timed_graph(const std::function<int()>& call, int batch, int& rc,
                                        std::string& unsupported,
                                        const std::function<std::string()>& before) {
  // The top graph and its parts live as long as the executable graph (drop_graphs), in case a
  // runtime keeps references to them instead of copies.
  hipGraph_t top = nullptr;
  if (auto e = hip_error_text(hipGraphCreate(&top, 0)); !e.empty()) return e;
  graphs_.push_back(top);
  hipGraphNode_t prev = nullptr;
  auto add_child = [&](hipGraph_t child, hipGraphNode_t& node) {
    return hip_error_text(
        hipGraphAddChildGraphNode(&node, top, prev ? &prev : nullptr, prev ? 1 : 0, child));
  };
  auto add_event = [&](hipEvent_t event, hipGraphNode_t& node) {
    return hip_error_text(
        hipGraphAddEventRecordNode(&node, top, prev ? &prev : nullptr, prev ? 1 : 0, event));
  };
  for (int k = 0; k < batch; ++k) {
    hipGraph_t setup = nullptr, body = nullptr;
    auto setup_body = [&]() -> std::string {
      if (before) {
        if (auto e = before(); !e.empty()) return "before the timed call: " + e;
      }
      if (auto e = flush(); !e.empty()) return "flush: " + e;
      return {};
    };
    if (auto e = capture_graph(setup_body, rc, setup, unsupported); !e.empty()) return e;
    if (!setup) return {};
    graphs_.push_back(setup);
    if (auto e = capture_graph(
            [&] {
              rc = call();
              return std::string();
            },
            rc, body, unsupported);
        !e.empty())
      return e;
    if (!body) return {};
    graphs_.push_back(body);
    // setup -> start event -> call -> stop event, after the previous sample's stop event.
    for (int step = 0; step < 4; ++step) {
      hipGraphNode_t node = nullptr;
      const std::string e = step == 0   ? add_child(setup, node)
                            : step == 1 ? add_event(graph_start_[k], node)
                            : step == 2 ? add_child(body, node)
                                        : add_event(graph_stop_[k], node);
      if (!e.empty()) return "assembling the timed graph: " + e;
      prev = node;
    }
  }
  const hipError_t inst = hipGraphInstantiate(&timed_exec_, top, nullptr, nullptr, 0);
  if (inst != hipSuccess) {
    timed_exec_ = nullptr;
    (void)hipGetLastError();
    unsupported = "instantiating the timed graph: " + hip_error_text(inst);
  }
  return {};
}

std::string HipTimer::capture(const std::function<int()>& call, int batch, int& rc,
                              std::string& unsupported,
                              const std::function<std::string()>& before) {
  drop_graphs();
  rc = 0;
  unsupported.clear();
  if (auto e = hip_error_text(hipStreamSynchronize(stream_)); !e.empty()) return e;
  for (int k = 0; k < batch; ++k) {
    hipEvent_t a = nullptr, b = nullptr;
    if (auto e = hip_error_text(hipEventCreate(&a)); !e.empty()) return e;
    graph_start_.push_back(a);
    if (auto e = hip_error_text(hipEventCreate(&b)); !e.empty()) return e;
    graph_stop_.push_back(b);
  }
  if (auto e = build_timed_graph(call, batch, rc, unsupported, before); !e.empty()) return e;
  if (!timed_exec_) return {};
  hipGraph_t one = nullptr;
  if (auto e = capture_graph(
          [&] {
            rc = call();
            return std::string();
          },
          rc, one, unsupported);
      !e.empty())
    return e;
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
  return hip_error_text(hipStreamSynchronize(stream_));
}

std::string HipTimer::replay_timed(std::vector<double>& us) {
  if (auto e = hip_error_text(hipGraphLaunch(timed_exec_, stream_)); !e.empty()) return e;
  if (auto e = hip_error_text(hipStreamSynchronize(stream_)); !e.empty()) return e;
  for (size_t k = 0; k < graph_start_.size(); ++k) {
    float ms = 0;
    if (auto e = hip_error_text(hipEventElapsedTime(&ms, graph_start_[k], graph_stop_[k]));
        !e.empty()) {
      return "reading graph event times: " + e;
    }
    us.push_back(static_cast<double>(ms) * 1000.0);
  }
  return {};
}

std::string HipTimer::replay_call() { return hip_error_text(hipGraphLaunch(call_exec_, stream_)); }

}  // namespace atrex::runner
