#include "atrex/scheduler/follow.h"

#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "atrex/common/clock.h"
#include "atrex/common/wire/keys.h"
#include "atrex/scheduler/best_kernels.h"

namespace atrex::scheduler {

namespace {

// The sweep's gauges from its queues and final markers. A queue that cannot be read now leaves
// the gauges as they were (they are observations, not results). Returns the leases held.
int64_t observe(metrics::SweepMetrics* sm, TaskQueue& queue, int done, int total) {
  int64_t leased = 0;
  if (sm) {
    sm->operators_done.Set(done);
    sm->operators_planned.Set(total);
  }
  for (const char* stream : kAllStreams) {
    auto s = queue.stats(stream);
    if (!s) {
      spdlog::warn("sweep metrics: {}", s.error().message);
      continue;
    }
    leased += s->leased;
    if (!sm) continue;
    sm->set_queue(stream, s->ready, s->leased, s->dead);
    sm->queue_lost.Add({{"queue", stream}}).Set(static_cast<double>(s->lost_total));
    sm->queue_vanished.Add({{"queue", stream}}).Set(static_cast<double>(s->vanished_total));
  }
  return leased;
}

void set_scores(metrics::SweepMetrics& m, const scoring::Report& report) {
  for (const auto& a : report.agents) {
    m.s_agg.Add({{"agent", a.agent}}).Set(a.s_agg);
    for (const auto& op : a.operators) {
      if (op.attempted) m.s_i.Add({{"agent", a.agent}, {"operator", op.name}}).Set(op.s_i);
    }
  }
}

// S_agg per agent and S_i per (agent, operator) over the final evaluations stored so far.
void observe_scores(const Manifest& sweep, ResultStore& store, const FollowOptions& o) {
  if (!o.metrics || !o.suite) return;
  auto report = scoring::reduce(sweep, store, *o.suite, utc_timestamp_now());
  if (!report) {
    spdlog::warn("sweep metrics: S_agg so far: {}", report.error().message);
    return;
  }
  set_scores(*o.metrics, *report);
}

// Waits (up to o.drain) for the leases still held once every marker is there, then observes.
void drain_leases(const FollowOptions& o, TaskQueue& queue, const FollowResult& r) {
  const auto until = std::chrono::steady_clock::now() + o.drain;
  while (observe(o.metrics, queue, r.done, r.total) > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::min(o.poll, std::chrono::milliseconds(100)));
}

}  // namespace

Result<FollowResult> follow_sweep(const Manifest& sweep, TaskQueue& queue, ResultStore& store,
                                  const FollowOptions& o) {
  FollowResult r;
  r.total = static_cast<int>(sweep.agents.size() * sweep.operators.size());
  std::set<std::string> seen;
  std::set<std::string> suspects;  // pairs missing at the last loss check
  const auto t0 = std::chrono::steady_clock::now();
  auto last_line = t0;
  auto next_loss_check = t0 + o.loss_check_every;
  int scored = -1;
  for (;;) {
    ATREX_ASSIGN_OR_RETURN(r.done, count_finals(sweep, store, seen, o.say));
    if (o.on_poll) o.on_poll(r.done, r.total);
    observe(o.metrics, queue, r.done, r.total);
    if (r.done != scored) {
      scored = r.done;
      observe_scores(sweep, store, o);
    }
    if (r.done == r.total) {
      drain_leases(o, queue, r);
      r.end = FollowEnd::kDone;
      return r;
    }
    ATREX_TRY(finalize_dead_agent_tasks(queue, store));
    if (o.stop && o.stop->load()) {
      r.end = FollowEnd::kStopped;
      return r;
    }
    const auto now = std::chrono::steady_clock::now();
    if (o.deadline && now > *o.deadline) {
      r.end = FollowEnd::kTimedOut;
      return r;
    }
    if (o.loss_check_every.count() > 0 && now >= next_loss_check) {
      next_loss_check = now + o.loss_check_every;
      ATREX_ASSIGN_OR_RETURN(int lost,
                             requeue_lost_agent_tasks(sweep, queue, store, suspects, o.say));
      if (o.metrics && lost > 0) o.metrics->agent_tasks_lost.Increment(lost);
    }
    if (o.progress_line && o.say && now - last_line > o.progress_every) {
      last_line = now;
      o.say(o.progress_line(r.done, r.total));
    }
    std::this_thread::sleep_for(o.poll);
  }
}

Result<SweepOutcome> finish_sweep(const Manifest& sweep, ResultStore& store, TaskQueue* queue,
                                  const problems::Suite& suite, metrics::SweepMetrics* metrics,
                                  const ProgressFn& say) {
  ATREX_ASSIGN_OR_RETURN(scoring::Report report,
                         scoring::reduce(sweep, store, suite, utc_timestamp_now()));
  // The tasks the sweep completed without (their workers kept dying) go into the report with
  // their last error: they are not in the records, so scores alone would hide them.
  if (queue) {
    ATREX_ASSIGN_OR_RETURN(report.dead_letters, all_dead_letters(*queue));
    for (const auto& d : report.dead_letters) {
      if (say) {
        say(fmt::format("dead-lettered {} task of {} after {} deliveries: {}", d.kind, d.op,
                        d.deliveries, d.error));
      }
    }
  }
  ATREX_ASSIGN_OR_RETURN(scoring::ReportFiles files,
                         scoring::write_report_files(sweep.output, report));
  // The best kernels as files: what a nightly sweep re-measures (`--kernels-from`).
  if (auto k = export_best_kernels(sweep.output, sweep.output, report); !k) {
    spdlog::warn("best kernels of {}: {}", sweep.output, k.error().message);
  }
  if (metrics) set_scores(*metrics, report);
  return SweepOutcome{report.agents, files.json, files.markdown, false};
}

}  // namespace atrex::scheduler
