// The runner daemon's loop (docs/architecture.md §2): pull eval tasks from a queue stream, evaluate them,
// write one record per shape to the result store (first write wins), then ack. A heartbeat
// renews the lease while a long evaluation runs; a task that cannot even be parsed is
// released with its reason (and dead-lettered after max deliveries).
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "atrex/common/queue.h"
#include "atrex/common/result_store.h"
#include "atrex/runner/evaluator.h"

namespace atrex::runner {

inline constexpr const char* kEvalStream = "eval";

struct RunnerLoopOptions {
  std::string stream = kEvalStream;
  std::string consumer = "runner-0";
  std::chrono::milliseconds poll_block{500};
  std::chrono::milliseconds heartbeat{10'000};
};

struct RunnerStats {
  std::atomic<int64_t> tasks_done{0};
  std::atomic<int64_t> tasks_failed{0};
  std::atomic<int64_t> records_written{0};
  std::atomic<int64_t> duplicate_records{0};
};

class RunnerLoop {
 public:
  RunnerLoop(TaskQueue& queue, ResultStore& results, Evaluator& evaluator, RunnerLoopOptions options = {});

  // Processes tasks until `stop` becomes true (checked between tasks and while idle).
  void run(const std::atomic<bool>& stop);
  // Processes at most one claimed task; returns false when none was available.
  Result<bool> run_once();

  const RunnerStats& stats() const { return stats_; }

 private:
  TaskQueue& queue_;
  ResultStore& results_;
  Evaluator& evaluator_;
  RunnerLoopOptions options_;
  RunnerStats stats_;
};

}  // namespace atrex::runner
