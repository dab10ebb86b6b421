// The agent worker (docs/architecture.md §2): pulls agent tasks (one AKA generation each) from the
// queue, evaluates candidates by enqueueing eval tasks and waiting for their records in the result
// store, re-queues the next generation after a dropout, and at the end runs the full
// evaluation and writes the (agent, operator) final marker.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "atrex/agent/loop.h"
#include "atrex/agent/provider_registry.h"
#include "atrex/common/queue.h"
#include "atrex/common/result_store.h"
#include "atrex/common/wire/final_marker.h"
#include "atrex/common/wire/keys.h"

namespace atrex::metrics {
struct AgentMetrics;  // atrex/common/metrics.h
}

namespace atrex::agent {

struct QueueEvalOptions {
  std::string stream = kEvalStream;
  int max_deliveries = 3;                   // the sweep's delivery bound (how long a wait may last)
  const std::atomic<bool>* stop = nullptr;  // when set, interrupts a wait (kUnavailable)
  // How often a wait checks that its task can still arrive: a task deleted from the queue
  // behind its back (XDEL, a trim, its consumer deleted) would otherwise be waited for until
  // the deadline and recorded as a timeout although it never ran.
  std::chrono::milliseconds loss_check_every{10'000};
  metrics::AgentMetrics* metrics = nullptr;  // atrex_agent_eval_tasks_lost_total; may be null
};

// An EvalFn that goes through the queue: reuses stored records (a resumed sweep), else
// enqueues the task and waits for one record per shape. A task that was dead-lettered, or that
// produced no record in time, yields `crashed` / `timeout` records saying why; a task found
// lost (no longer queued, no record, not dead-lettered) is put back and counted.
class QueueEvalFn {
 public:
  QueueEvalFn(TaskQueue& queue, ResultStore& results, QueueEvalOptions options = {});
  Result<std::vector<EvalRecord>> operator()(const EvalTask& task) const;

 private:
  Result<std::optional<EvalRecord>> stored(const EvalTask& task, const std::string& shape,
                                           std::chrono::milliseconds wait) const;
  // kOk when every shape's record is stored.
  Result<bool> all_stored(const EvalTask& task) const;
  Result<std::optional<DeadLetter>> dead_letter_of(const EvalTask& task) const;
  // Puts the task back when its message is gone or stranded and it left no record; the
  // message id to watch from then on.
  Result<std::string> recover_if_lost(const EvalTask& task, std::string message_id) const;

  TaskQueue& queue_;
  ResultStore& results_;
  QueueEvalOptions options_;
};

struct AgentWorkerOptions {
  std::string consumer = "agent-worker-0";
  std::filesystem::path audit_dir;  // <results>/audit
  std::chrono::milliseconds poll_block{500};
  std::chrono::milliseconds heartbeat{10'000};
  // The sweep's delivery bound: an evaluation dead-lettered after it yields `crashed` records.
  int max_deliveries = 3;
  // atrex_agent_* (tasks, candidates, best quick S_i); none when null. Must outlive the worker.
  metrics::AgentMetrics* metrics = nullptr;
  // Each (agent, operator)'s best-so-far shared by its sub-agents across workers (a sweep's
  // Redis, or one MemoryBestStore for the in-process workers of `sweep run`); must outlive the
  // worker. Null: each generation sees the best its task and the audit trail carry.
  BestStore* shared_best = nullptr;
};

class AgentWorker {
 public:
  // `providers` (must outlive the worker) makes each task's provider.
  AgentWorker(TaskQueue& queue, ResultStore& results, const ProviderRegistry& providers,
              AgentWorkerOptions options);
  // Claims and runs at most one agent task; false when none was available. `stop`, when set,
  // interrupts the task (its lease is released so it is redone later).
  Result<bool> run_once(const std::atomic<bool>* stop = nullptr);
  void run(const std::atomic<bool>& stop);

 private:
  Result<void> handle(const AgentTask& task, const std::atomic<bool>* stop);
  // The one full evaluation of the (agent, operator) and its final marker, run by the worker
  // whose sub-agent ended last.
  Result<void> finish_pair(AgentTask task, AuditTrail& audit, const EvalFn& eval);
  Result<AuditTrail*> audit_for(const AgentTask& task);
  Result<void> put_final(const FinalMarker& marker);

  TaskQueue& queue_;
  ResultStore& results_;
  const ProviderRegistry& providers_;
  AgentWorkerOptions options_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<AuditTrail>> audits_;
};

}  // namespace atrex::agent
