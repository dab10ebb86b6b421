#include "atrex/scheduler/follow.h"

#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "atrex/common/clock.h"
#include "atrex/common/wire/keys.h"

namespace atrex::scheduler {

namespace {

// The sweep's gauges from its queues and final markers. A queue that cannot be read now leaves
// the gauges as they were (they are observations, not results).
void observe(metrics::SweepMetrics* sm, TaskQueue& queue, int done, int total) {
  if (!sm) return;
  sm->operators_done.Set(done);
  sm->operators_planned.Set(total);
  for (const char* stream : kAllStreams) {
    auto s = queue.stats(stream);
    if (!s) {
      spdlog::warn("sweep metrics: {}", s.error().message);
      continue;
    }
    sm->set_queue(stream, s->ready, s->leased, s->dead);
  }
}

}  // namespace

Result<FollowResult> follow_sweep(const Manifest& sweep, TaskQueue& queue, ResultStore& store,
                                  const FollowOptions& o) {
  FollowResult r;
  r.total = static_cast<int>(sweep.agents.size() * sweep.operators.size());
  std::set<std::string> seen;
  const auto t0 = std::chrono::steady_clock::now();
  auto last_line = t0;
  for (;;) {
    ATREX_ASSIGN_OR_RETURN(r.done, count_finals(sweep, store, seen, o.say));
    observe(o.metrics, queue, r.done, r.total);
    if (r.done == r.total) {
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
  if (metrics) {
    for (const auto& a : report.agents) metrics->s_agg.Add({{"agent", a.agent}}).Set(a.s_agg);
  }
  return SweepOutcome{report.agents, files.json, files.markdown, false};
}

}  // namespace atrex::scheduler
