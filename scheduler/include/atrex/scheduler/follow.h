// The loop that follows a sweep to its end, one for the local sweep (`atrex sweep run`, the
// in-process queue) and the cluster sweep (`atrex sweep wait`, Redis): count the (agent,
// operator) final markers, tell new ones, keep the sweep's gauges, finalize dead-lettered agent
// tasks, and stop when every marker is there, on a stop request or at a deadline; then reduce the
// records into the reports, dead letters included. Unit-testable on the in-process queue.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <vector>

#include "atrex/common/metrics.h"
#include "atrex/common/queue.h"
#include "atrex/common/result_store.h"
#include "atrex/common/wire/manifest.h"
#include "atrex/problems/suite.h"
#include "atrex/scheduler/reconcile.h"
#include "atrex/scoring/reduce.h"

namespace atrex::scheduler {

struct FollowOptions {
  std::chrono::milliseconds poll{500};
  std::optional<std::chrono::steady_clock::time_point> deadline;  // none: until done or stopped
  const std::atomic<bool>* stop = nullptr;
  metrics::SweepMetrics* metrics = nullptr;  // operators done/planned, queue depths
  ProgressFn say;                            // new final markers, periodic progress lines
  // A line every `progress_every` (e.g. evaluations done); none when unset.
  std::function<std::string(int done, int total)> progress_line;
  std::chrono::seconds progress_every{30};
  // Called at every poll with the (agent, operator) pairs done and planned: a progress meter's
  // input (the cli's line with rate and ETA); none when unset.
  std::function<void(int done, int total)> on_poll;
  // With `metrics`: the S_agg gauge is recomputed from the stored records each time a final
  // marker arrives (operators not yet final count 0), so it moves while the sweep runs.
  const problems::Suite* suite = nullptr;
  // How often agent tasks lost from the queue are looked for and put back
  // (requeue_lost_agent_tasks); 0 = never.
  std::chrono::milliseconds loss_check_every{30'000};
  // When every marker is there, how long to wait for the last leases to be acked so the leased
  // gauges read 0 at the end (the worker writes its marker before it acks).
  std::chrono::milliseconds drain{5'000};
};

enum class FollowEnd { kDone, kStopped, kTimedOut };

struct FollowResult {
  FollowEnd end = FollowEnd::kDone;
  int done = 0;   // (agent, operator) pairs with a final marker
  int total = 0;  // agents x operators
};

Result<FollowResult> follow_sweep(const Manifest& sweep, TaskQueue& queue, ResultStore& store,
                                  const FollowOptions& options);

struct SweepOutcome {
  std::vector<scoring::AgentScore> agents;
  std::filesystem::path report_json;
  std::filesystem::path report_md;
  bool interrupted = false;
};

// Reduces `store` into the reports of the results folder `sweep.output`, with the dead letters
// of `queue` (when given) listed, tells them through `say`, and sets the S_agg gauge.
Result<SweepOutcome> finish_sweep(const Manifest& sweep, ResultStore& store, TaskQueue* queue,
                                  const problems::Suite& suite, metrics::SweepMetrics* metrics,
                                  const ProgressFn& say);

}  // namespace atrex::scheduler
