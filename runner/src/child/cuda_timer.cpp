#include "cuda_timer.h"

#include <algorithm>
#include <chrono>

#include "atrex/problems/cuda_status.h"

namespace atrex::runner {

using problems::cuda::cuda_status;

CudaTimer::~CudaTimer() {
  drop_graphs();
  if (start_) cudaEventDestroy(start_);
  if (stop_) cudaEventDestroy(stop_);
  if (ready_) cudaEventDestroy(ready_);
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

Status CudaTimer::init(cudaStream_t stream, size_t l2_bytes) {
  stream_ = stream;
  flush_size_ = std::max<size_t>(2 * l2_bytes, size_t{64} << 20);
  ATREX_TRY(cuda_status(cudaMalloc(&flush_, flush_size_), "allocating the L2 flush buffer"));
  ATREX_TRY(cuda_status(cudaEventCreate(&start_)));
  ATREX_TRY(cuda_status(cudaEventCreate(&ready_)));
  return cuda_status(cudaEventCreate(&stop_));
}

Status CudaTimer::flush() {
  // A different byte each round, so no layer can skip the writes as redundant.
  return cuda_status(
      cudaMemsetAsync(flush_, static_cast<int>(++flush_round_ & 0xff), flush_size_, stream_));
}

void CUDART_CB CudaTimer::hold_stream(void* gate) {
  // On CUDA's host-function thread; no CUDA call here (cudaLaunchHostFunc's contract).
  auto& g = *static_cast<std::atomic<uint32_t>*>(gate);
  while (g.load(std::memory_order_acquire) == 0) g.wait(0, std::memory_order_acquire);
}

Status CudaTimer::time_eager(const std::function<int()>& call, int& rc, double& us,
                             const std::function<void()>& before,
                             const std::function<void()>& after) {
  ATREX_TRY(flush());
  // Nothing of the harness's runs between `ready_` and `start_` on the stream: device time
  // between them is work someone else put there meanwhile (a thread or a signal handler of the
  // candidate's while the child waits for the judge's go), which no window holds. The stream is
  // held at a host function from the flush until `start_` is enqueued, so the device cannot
  // reach `ready_` early and idle there while `before` waits (a slow go would read as busy).
  gate_.store(0, std::memory_order_release);
  ATREX_TRY(cuda_status(cudaLaunchHostFunc(stream_, &CudaTimer::hold_stream, &gate_),
                        "holding the stream until the start event"));
  {
    // Opened on every way out of this block: a failed record must not leave the stream held.
    struct OpenGate {
      std::atomic<uint32_t>& gate;
      ~OpenGate() {
        gate.store(1, std::memory_order_release);
        gate.notify_all();
      }
    } opener{gate_};
    ATREX_TRY(cuda_status(cudaEventRecord(ready_, stream_)));
    if (before) before();
    ATREX_TRY(cuda_status(cudaEventRecord(start_, stream_)));
  }
  rc = call();
  ATREX_TRY(cuda_status(cudaEventRecord(stop_, cudaStreamLegacy)));
  ATREX_TRY(cuda_status(cudaEventSynchronize(stop_)));
  // The stop event is on the legacy stream, which waits for blocking streams only: work the call
  // left on a non-blocking stream, or a thread of the candidate's launched, may still run.
  const auto drain_start = std::chrono::steady_clock::now();
  ATREX_TRY(cuda_status(cudaDeviceSynchronize(), "waiting for the call's device work"));
  drain_us_ =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - drain_start)
          .count();
  if (after) after();
  float ms = 0;
  ATREX_TRY(cuda_status(cudaEventElapsedTime(&ms, start_, stop_)));
  us = static_cast<double>(ms) * 1000.0;
  float gap_ms = 0;
  ATREX_TRY(cuda_status(cudaEventElapsedTime(&gap_ms, ready_, start_)));
  gap_us_ = static_cast<double>(gap_ms) * 1000.0;
  return ok();
}

Status CudaTimer::capture(const std::function<int()>& call, int batch, int& rc,
                          std::string& unsupported, const std::function<Status()>& before) {
  drop_graphs();
  rc = 0;
  unsupported.clear();
  ATREX_TRY(cuda_status(cudaStreamSynchronize(stream_)));
  for (int k = 0; k < batch; ++k) {
    cudaEvent_t a = nullptr, b = nullptr;
    ATREX_TRY(cuda_status(cudaEventCreate(&a)));
    graph_start_.push_back(a);
    ATREX_TRY(cuda_status(cudaEventCreate(&b)));
    graph_stop_.push_back(b);
  }
  // Captures `body` into an executable graph. A body that fails under capture is no device
  // failure: `exec` stays null and `unsupported` says why (the caller times eagerly). Only
  // failing to begin a capture is an error.
  auto capture_one = [&](const std::function<Status()>& body, cudaGraphExec_t& exec) -> Status {
    ATREX_TRY(cuda_status(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal),
                          "beginning a stream capture"));
    Status body_status = body();
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    if (body_status && end != cudaSuccess) body_status = cuda_status(end, "ending the capture");
    if (body_status && rc == 0) {
      body_status = cuda_status(cudaGraphInstantiate(&exec, graph, 0), "instantiating the graph");
    }
    if (graph) cudaGraphDestroy(graph);
    if (!body_status || rc != 0) {
      (void)cudaGetLastError();  // capture errors are not sticky; clear them for the eager path
      exec = nullptr;
      unsupported = rc != 0 ? "the candidate returned an error under stream capture"
                            : body_status.error().message;
    }
    return ok();
  };
  auto timed_body = [&]() -> Status {
    for (int k = 0; k < batch && rc == 0; ++k) {
      if (before) {
        if (auto s = before(); !s)
          return tl::unexpected(with_context(s.error(), "before the timed call"));
      }
      if (auto s = flush(); !s) return tl::unexpected(with_context(s.error(), "flush"));
      ATREX_TRY(
          cuda_status(cudaEventRecordWithFlags(graph_start_[k], stream_, cudaEventRecordExternal),
                      "start event"));
      rc = call();
      if (const cudaError_t e =
              cudaEventRecordWithFlags(graph_stop_[k], stream_, cudaEventRecordExternal);
          e != cudaSuccess) {
        return io_error("the candidate's work could not be joined to the capture (" +
                        problems::cuda::cuda_error_text(e) + ")");
      }
    }
    return ok();
  };
  ATREX_TRY(capture_one(timed_body, timed_exec_));
  if (!timed_exec_) return ok();
  auto call_body = [&]() -> Status {
    rc = call();
    return ok();
  };
  ATREX_TRY(capture_one(call_body, call_exec_));
  if (!call_exec_) drop_graphs();
  // Upload both graphs now so the first replay does not pay for it.
  if (timed_exec_) {
    ATREX_TRY(cuda_status(cudaGraphUpload(timed_exec_, stream_)));
    ATREX_TRY(cuda_status(cudaGraphUpload(call_exec_, stream_)));
    ATREX_TRY(cuda_status(cudaStreamSynchronize(stream_)));
  }
  return ok();
}

Status CudaTimer::replay_timed(std::vector<double>& us) {
  ATREX_TRY(cuda_status(cudaGraphLaunch(timed_exec_, stream_)));
  ATREX_TRY(cuda_status(cudaStreamSynchronize(stream_)));
  for (size_t k = 0; k < graph_start_.size(); ++k) {
    float ms = 0;
    ATREX_TRY(cuda_status(cudaEventElapsedTime(&ms, graph_start_[k], graph_stop_[k]),
                          "reading graph event times"));
    us.push_back(static_cast<double>(ms) * 1000.0);
  }
  return ok();
}

Status CudaTimer::replay_call() { return cuda_status(cudaGraphLaunch(call_exec_, stream_)); }

}  // namespace atrex::runner
