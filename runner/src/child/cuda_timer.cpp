#include "cuda_timer.h"

#include <algorithm>

namespace atrex::runner {

std::string cuda_error_text(cudaError_t e) {
  return e == cudaSuccess ? std::string()
                          : std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

CudaTimer::~CudaTimer() {
  drop_graphs();
  if (start_) cudaEventDestroy(start_);
  if (stop_) cudaEventDestroy(stop_);
  if (flush_) cudaFree(flush_);
}

void CudaTimer::drop_graphs() {
  if (timed_exec_) cudaGraphExecDestroy(timed_exec_);
  if (call_exec_) cudaGraphExecDestroy(call_exec_);
  timed_exec_ = call_exec_ = nullptr;
  for (auto* e : graph_start_) cudaEventDestroy(e);
  for (auto* e : graph_stop_) cudaEventDestroy(e);
  graph_start_.clear();
  graph_stop_.clear();
}

std::string CudaTimer::init(cudaStream_t stream, size_t l2_bytes) {
  stream_ = stream;
  flush_size_ = std::max<size_t>(2 * l2_bytes, size_t{64} << 20);
  if (auto e = cuda_error_text(cudaMalloc(&flush_, flush_size_)); !e.empty()) return e;
  if (auto e = cuda_error_text(cudaEventCreate(&start_)); !e.empty()) return e;
  return cuda_error_text(cudaEventCreate(&stop_));
}

std::string CudaTimer::flush() {
  // A different byte each round, so no layer can skip the writes as redundant.
  return cuda_error_text(
      cudaMemsetAsync(flush_, static_cast<int>(++flush_round_ & 0xff), flush_size_, stream_));
}

std::string CudaTimer::time_eager(const std::function<int()>& call, int& rc, double& us) {
  if (auto e = flush(); !e.empty()) return e;
  if (auto e = cuda_error_text(cudaEventRecord(start_, stream_)); !e.empty()) return e;
  rc = call();
  if (auto e = cuda_error_text(cudaEventRecord(stop_, cudaStreamLegacy)); !e.empty()) return e;
  if (auto e = cuda_error_text(cudaEventSynchronize(stop_)); !e.empty()) return e;
  float ms = 0;
  if (auto e = cuda_error_text(cudaEventElapsedTime(&ms, start_, stop_)); !e.empty()) return e;
  us = static_cast<double>(ms) * 1000.0;
  return {};
}

std::string CudaTimer::capture(const std::function<int()>& call, int batch, int& rc,
                               std::string& unsupported,
                               const std::function<std::string()>& before) {
  drop_graphs();
  rc = 0;
  unsupported.clear();
  if (auto e = cuda_error_text(cudaStreamSynchronize(stream_)); !e.empty()) return e;
  for (int k = 0; k < batch; ++k) {
    cudaEvent_t a = nullptr, b = nullptr;
    if (auto e = cuda_error_text(cudaEventCreate(&a)); !e.empty()) return e;
    graph_start_.push_back(a);
    if (auto e = cuda_error_text(cudaEventCreate(&b)); !e.empty()) return e;
    graph_stop_.push_back(b);
  }
  // Captures `body` into an executable graph; an empty return with a null exec means "cannot".
  auto capture_one = [&](const std::function<std::string()>& body,
                         cudaGraphExec_t& exec) -> std::string {
    if (auto e = cuda_error_text(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal));
        !e.empty())
      return e;
    std::string body_error = body();
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    if (body_error.empty() && end != cudaSuccess)
      body_error = "ending the capture: " + cuda_error_text(end);
    if (body_error.empty() && rc == 0) {
      const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
      if (inst != cudaSuccess) body_error = "instantiating the graph: " + cuda_error_text(inst);
    }
    if (graph) cudaGraphDestroy(graph);
    if (!body_error.empty() || rc != 0) {
      (void)cudaGetLastError();  // capture errors are not sticky; clear them for the eager path
      exec = nullptr;
      unsupported = rc != 0 ? "the candidate returned an error under stream capture" : body_error;
    }
    return {};
  };
  auto timed_body = [&]() -> std::string {
    for (int k = 0; k < batch && rc == 0; ++k) {
      if (before) {
        if (auto e = before(); !e.empty()) return "before the timed call: " + e;
      }
      if (auto e = flush(); !e.empty()) return "flush: " + e;
      if (auto e = cuda_error_text(
              cudaEventRecordWithFlags(graph_start_[k], stream_, cudaEventRecordExternal));
          !e.empty()) {
        return "start event: " + e;
      }
      rc = call();
      if (auto e = cuda_error_text(
              cudaEventRecordWithFlags(graph_stop_[k], stream_, cudaEventRecordExternal));
          !e.empty()) {
        return "the candidate's work could not be joined to the capture (" + e + ")";
      }
    }
    return {};
  };
  if (auto e = capture_one(timed_body, timed_exec_); !e.empty()) return e;
  if (!timed_exec_) return {};
  auto call_body = [&]() -> std::string {
    rc = call();
    return {};
  };
  if (auto e = capture_one(call_body, call_exec_); !e.empty()) return e;
  if (!call_exec_) drop_graphs();
  // Upload both graphs now so the first replay does not pay for it.
  if (timed_exec_) {
    if (auto e = cuda_error_text(cudaGraphUpload(timed_exec_, stream_)); !e.empty()) return e;
    if (auto e = cuda_error_text(cudaGraphUpload(call_exec_, stream_)); !e.empty()) return e;
    if (auto e = cuda_error_text(cudaStreamSynchronize(stream_)); !e.empty()) return e;
  }
  return {};
}

std::string CudaTimer::replay_timed(std::vector<double>& us) {
  if (auto e = cuda_error_text(cudaGraphLaunch(timed_exec_, stream_)); !e.empty()) return e;
  if (auto e = cuda_error_text(cudaStreamSynchronize(stream_)); !e.empty()) return e;
  for (size_t k = 0; k < graph_start_.size(); ++k) {
    float ms = 0;
    if (auto e = cuda_error_text(cudaEventElapsedTime(&ms, graph_start_[k], graph_stop_[k]));
        !e.empty()) {
      return "reading graph event times: " + e;
    }
    us.push_back(static_cast<double>(ms) * 1000.0);
  }
  return {};
}

std::string CudaTimer::replay_call() {
  return cuda_error_text(cudaGraphLaunch(call_exec_, stream_));
}

}  // namespace atrex::runner
