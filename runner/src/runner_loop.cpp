#include "atrex/runner/runner_loop.h"

#include <thread>

#include "atrex/common/heartbeat.h"

#include <spdlog/spdlog.h>

namespace atrex::runner {

RunnerLoop::RunnerLoop(TaskQueue& queue, ResultStore& results, Evaluator& evaluator, RunnerLoopOptions options)
    : queue_(queue), results_(results), evaluator_(evaluator), options_(std::move(options)) {}

Result<bool> RunnerLoop::run_once() {
  ATREX_ASSIGN_OR_RETURN(auto leases, queue_.claim(options_.stream, options_.consumer, 1, options_.poll_block));
  if (leases.empty()) return false;
  const Lease& lease = leases.front();
  auto task = eval_task_from_json(lease.body, "eval task " + lease.message_id);
  if (!task) {
    spdlog::error("{}", task.error().message);
    (void)queue_.release(lease, task.error().message);
    ++stats_.tasks_failed;
    return true;
  }
  Result<std::vector<EvalRecord>> records;
  {
    LeaseHeartbeat heartbeat(queue_, lease, options_.heartbeat);  // a long task keeps its lease
    records = evaluator_.evaluate(*task, [&](const EvalRecord& r) {
      auto put = results_.put(record_key(r.task_id, r.shape_id), to_json(r));
      if (put && *put) ++stats_.records_written;
      if (put && !*put) ++stats_.duplicate_records;
    });
  }
  if (!records) {
    if (records.error().code == ErrorCode::kUnavailable) {
      spdlog::info("task {}: {}; giving it back", task->task_id, records.error().message);  // stopping
    } else {
      spdlog::error("task {}: {}", task->task_id, records.error().message);
    }
    (void)queue_.release(lease, records.error().message);
    ++stats_.tasks_failed;
    return true;
  }
  (void)queue_.ack(lease);
  ++stats_.tasks_done;
  return true;
}

void RunnerLoop::run(const std::atomic<bool>& stop) {
  while (!stop.load()) {
    auto r = run_once();
    if (!r) {
      spdlog::error("runner {}: {}", options_.consumer, r.error().message);
      std::this_thread::sleep_for(options_.poll_block);
    }
  }
}

}  // namespace atrex::runner
