#include "atrex/runner/runner_loop.h"

#include <optional>
#include <thread>

#include "atrex/common/heartbeat.h"
#include "atrex/common/metrics.h"

#include <spdlog/spdlog.h>

namespace atrex::runner {

// A task this runner holds: its lease (renewed by the heartbeat from the claim on), the parsed
// task (or why it could not be parsed), and whether its candidate is already compiled.
struct RunnerLoop::Claimed {
  Lease lease;
  Result<EvalTask> task = internal_error("not parsed");
  std::unique_ptr<LeaseHeartbeat> heartbeat;
};

RunnerLoop::RunnerLoop(TaskQueue& queue, ResultStore& results, Evaluator& evaluator,
                       RunnerLoopOptions options)
    : queue_(queue), results_(results), evaluator_(evaluator), options_(std::move(options)) {}

RunnerLoop::~RunnerLoop() { release_ahead("runner stopped"); }

// A release or ack that fails (Redis away past the reconnects) is logged, not fatal: the lease
// then expires and the task is delivered again, which first-write-wins records make harmless.
void RunnerLoop::give_back(const Lease& lease, const std::string& why) {
  if (auto r = queue_.release(lease, why); !r) {
    spdlog::warn("runner {}: giving task {} back: {}", options_.consumer, lease.message_id,
                 r.error().message);
  }
}

void RunnerLoop::finish(const Lease& lease) {
  if (auto r = queue_.ack(lease); !r) {
    spdlog::warn("runner {}: acking task {}: {}", options_.consumer, lease.message_id,
                 r.error().message);
  }
}

void RunnerLoop::release_ahead(const std::string& why) {
  for (auto& c : ahead_) {
    c->heartbeat.reset();
    give_back(c->lease, why);
  }
  ahead_.clear();
}

std::unique_ptr<RunnerLoop::Claimed> RunnerLoop::claim_one(std::chrono::milliseconds block,
                                                           Result<bool>& status) {
  auto leases = queue_.claim(options_.stream, options_.consumer, 1, block);
  if (!leases) {
    status = tl::make_unexpected(leases.error());
    return nullptr;
  }
  if (leases->empty()) return nullptr;
  auto c = std::make_unique<Claimed>();
  c->lease = std::move(leases->front());
  std::function<void(bool)> on_renew;
  if (auto* m = options_.metrics) on_renew = [m](bool renewed) { m->count_renewal(renewed); };
  c->heartbeat =
      std::make_unique<LeaseHeartbeat>(queue_, c->lease, options_.heartbeat, std::move(on_renew));
  c->task = eval_task_from_json(c->lease.body, "eval task " + c->lease.message_id);
  return c;
}

// Claims up to `prefetch` more tasks without blocking and compiles their candidates (runs on a
// thread of its own while the current task is evaluated), each on a thread of its own: nvcc
// uses one core, and a GPU host's other cores would otherwise idle while the GPU waits for the
// next candidate. The compile cache publishes by rename, so concurrent compiles are safe. A
// compile failure is not an error here: evaluate() compiles again (a cache hit for successes)
// and records the compiler's log.
void RunnerLoop::compile_ahead(std::vector<std::unique_ptr<Claimed>>& out) {
  for (size_t n = ahead_.size(); n < static_cast<size_t>(std::max(0, options_.prefetch)); ++n) {
    Result<bool> status = true;
    auto c = claim_one(std::chrono::milliseconds(0), status);
    if (!c) {
      if (!status)
        spdlog::warn("runner {}: claiming ahead: {}", options_.consumer, status.error().message);
      break;
    }
    out.push_back(std::move(c));
  }
  std::vector<std::thread> compilers;
  for (auto& c : out) {
    if (!c->task) continue;
    compilers.emplace_back([this, &task = *c->task] {
      auto compiled = evaluator_.precompile(task);
      if (compiled && *compiled) {
        ++stats_.compiled_ahead;
        if (options_.metrics) options_.metrics->compiled_ahead.Increment();
      }
      if (!compiled)
        spdlog::warn("task {}: compiling ahead: {}", task.task_id, compiled.error().message);
    });
  }
  for (auto& t : compilers) t.join();
}

Result<bool> RunnerLoop::run_once() {
  std::unique_ptr<Claimed> current;
  if (!ahead_.empty()) {
    current = std::move(ahead_.front());
    ahead_.pop_front();
  } else {
    Result<bool> status = true;
    current = claim_one(options_.poll_block, status);
    if (!status) return tl::make_unexpected(status.error());
    if (!current) return false;
  }
  if (!current->task) {
    spdlog::error("{}", current->task.error().message);
    current->heartbeat.reset();
    give_back(current->lease, current->task.error().message);
    ++stats_.tasks_failed;
    if (options_.metrics) options_.metrics->count_task("invalid");
    return true;
  }
  const EvalTask& task = *current->task;
  // The next task's compile overlaps this one's measurement (joined before the ack, so a task
  // claimed ahead is never lost track of).
  std::vector<std::unique_ptr<Claimed>> fetched;
  std::thread ahead;
  if (options_.prefetch > 0) ahead = std::thread([&] { compile_ahead(fetched); });
  // A record the store could not take (Redis down past the connection's reconnects) must not be
  // acked away: the task is given back instead, and its next delivery writes what is missing
  // (first write per key wins, so the records that did land are not counted twice).
  std::optional<Error> lost;
  metrics::RunnerMetrics* m = options_.metrics;
  if (m) m->busy.Set(1);
  const auto t0 = std::chrono::steady_clock::now();
  auto records = evaluator_.evaluate(task, [&](const EvalRecord& r) {
    EvalRecord stamped = r;
    stamped.runner =
        options_.consumer;  // whichever evaluator it shares, the record names this runner
    auto put = results_.put(record_key(r.task_id, r.shape_id), to_json(stamped));
    if (put && *put) {
      ++stats_.records_written;
      if (m) m->count_evaluation(task.operator_name, eval_status_name(r.status));
    }
    if (put && !*put) {
      ++stats_.duplicate_records;
      if (m) m->duplicate_records.Increment();
    }
    if (!put && !lost) lost = put.error();
  });
  if (m) {
    m->evaluation_duration.Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    m->busy.Set(0);
  }
  if (records && lost) {
    records = tl::make_unexpected(with_context(*lost, "writing a record"));
  }
  if (ahead.joinable()) ahead.join();
  for (auto& c : fetched) ahead_.push_back(std::move(c));
  current->heartbeat.reset();
  if (!records) {
    if (records.error().code == ErrorCode::kUnavailable) {
      spdlog::info("task {}: {}; giving it back", task.task_id,
                   records.error().message);  // stopping, or the judge failed on its own
    } else {
      spdlog::error("task {}: {}", task.task_id, records.error().message);
    }
    give_back(current->lease, records.error().message);
    ++stats_.tasks_failed;
    if (m) m->count_task("released");
    return true;
  }
  finish(current->lease);
  ++stats_.tasks_done;
  if (m) m->count_task("done");
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
  release_ahead("runner stopping");
}

}  // namespace atrex::runner
