// The runner daemon's loop (docs/architecture.md §2): pull eval tasks from a queue stream, evaluate
// them, write one record per shape to the result store (first write wins; its `runner` field is
// this loop's consumer name), then ack. A heartbeat renews the lease while a long evaluation runs;
// a task that cannot even be parsed is released with its reason (and dead-lettered after max
// deliveries).
//
// Compile ahead: while the current task is measured, the loop claims up to `prefetch` more
// tasks (without blocking) and compiles their candidates into the shared compile cache, all at
// once (a thread each), so the GPU does not wait for nvcc between tasks. Those tasks are leased (and heartbeated) by
// this runner meanwhile; a stopping runner releases them at once.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "atrex/common/queue.h"
#include "atrex/common/result_store.h"
#include "atrex/common/wire/keys.h"
#include "atrex/runner/evaluator.h"

namespace atrex::metrics {
struct RunnerMetrics;  // atrex/common/metrics.h
}

namespace atrex::runner {

struct RunnerLoopOptions {
  std::string stream = kEvalStream;
  std::string consumer = "runner-0";
  std::chrono::milliseconds poll_block{500};
  std::chrono::milliseconds heartbeat{10'000};
  // Tasks claimed ahead and compiled while the current one is evaluated (0 = none). A task
  // claimed ahead waits for this runner even when another is idle: keep it at 0 or 1 when
  // runners outnumber the tasks in flight.
  int prefetch = 1;
  // Updated as tasks run (atrex_runner_*; atrex/common/metrics.h); none when null. Must outlive
  // the loop. The evaluator's compile-cache lookups are counted by its own `on_compile`.
  metrics::RunnerMetrics* metrics = nullptr;
};

struct RunnerStats {
  std::atomic<int64_t> tasks_done{0};
  std::atomic<int64_t> tasks_failed{0};
  std::atomic<int64_t> records_written{0};
  std::atomic<int64_t> duplicate_records{0};
  std::atomic<int64_t> compiled_ahead{0};  // candidates compiled while another task was evaluated
};

class RunnerLoop {
 public:
  RunnerLoop(TaskQueue& queue, ResultStore& results, Evaluator& evaluator,
             RunnerLoopOptions options = {});
  ~RunnerLoop();  // releases the tasks claimed ahead
  RunnerLoop(const RunnerLoop&) = delete;
  RunnerLoop& operator=(const RunnerLoop&) = delete;

  // Processes tasks until `stop` becomes true (checked between tasks and while idle).
  void run(const std::atomic<bool>& stop);
  // Processes at most one claimed task (the oldest claimed ahead, else a new one); returns
  // false when none was available.
  Result<bool> run_once();
  // Gives back the tasks claimed ahead (a stopping runner; also done by the destructor).
  void release_ahead(const std::string& why);

  const RunnerStats& stats() const { return stats_; }

 private:
  TaskQueue& queue_;
  ResultStore& results_;
  Evaluator& evaluator_;
  RunnerLoopOptions options_;
  RunnerStats stats_;
  struct Claimed;  // a leased task, its heartbeat, and whether its candidate was compiled
  std::deque<std::unique_ptr<Claimed>> ahead_;

  std::unique_ptr<Claimed> claim_one(std::chrono::milliseconds block, Result<bool>& status);
  void give_back(const Lease& lease, const std::string& why);
  void finish(const Lease& lease);
  void compile_ahead(std::vector<std::unique_ptr<Claimed>>& out);
};

}  // namespace atrex::runner
