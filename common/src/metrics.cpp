#include "atrex/common/metrics.h"

#include <cassert>
#include <cstdlib>

#include <fmt/format.h>

namespace atrex::metrics {

const char* type_name(Type t) {
  switch (t) {
    case Type::kCounter: return "counter";
    case Type::kGauge: return "gauge";
    case Type::kHistogram: return "histogram";
  }
  return "untyped";
}

const std::vector<MetricSpec>& catalogue() {
  static const std::vector<MetricSpec> table = {
      // runner (runner/src/runner_loop.cpp, runner/src/evaluator.cpp)
      {"atrex_runner_tasks_total",
       Type::kCounter,
       "Evaluation tasks this runner finished, by status: done (acked), released (given back to "
       "the queue: an "
       "error or a stopping runner), invalid (the task could not be parsed)",
       {"status"},
       "tasks"},
      {"atrex_runner_evaluations_total",
       Type::kCounter,
       "Shape evaluation records this runner wrote, by operator and atrex.eval/1 status (ok, "
       "compile_error, "
       "wrong_result, timeout, crashed, rejected)",
       {"operator", "status"},
       "records"},
      {"atrex_runner_duplicate_records_total",
       Type::kCounter,
       "Shape records already in the result store (a redelivered task; first write wins)",
       {},
       "records"},
      {"atrex_runner_evaluation_duration_seconds",
       Type::kHistogram,
       "Wall time of one evaluation task: compile (or cache hit) and every shape's gates",
       {},
       "seconds"},
      {"atrex_runner_busy",
       Type::kGauge,
       "1 while this runner evaluates a task, else 0",
       {},
       "boolean"},
      {"atrex_runner_compile_cache_lookups_total",
       Type::kCounter,
       "Compile gate lookups in the content-addressed compile cache, by result (hit, miss)",
       {"result"},
       "lookups"},
      {"atrex_runner_compiled_ahead_total",
       Type::kCounter,
       "Candidates compiled while another task was measured (prefetch)",
       {},
       "candidates"},
      {"atrex_runner_lease_renewals_total",
       Type::kCounter,
       "Lease renewals (heartbeats) of the tasks this runner holds, by result (ok, failed)",
       {"result"},
       "renewals"},
      // agent worker (agent/src/worker.cpp)
      {"atrex_agent_tasks_total",
       Type::kCounter,
       "Agent tasks (AKA generations) this worker ended, by agent and status: done (final "
       "evaluation written), "
       "dropout (next generation queued), released (given back), error (the (agent, operator) "
       "ended in error)",
       {"agent", "status"},
       "tasks"},
      {"atrex_agent_candidates_total",
       Type::kCounter,
       "Candidates the agent proposed and sent to a quick evaluation",
       {"agent"},
       "candidates"},
      {"atrex_agent_model_tokens_total",
       Type::kCounter,
       "Tokens model-backed providers (openai) spent, as the model servers reported them, by agent "
       "and kind (prompt, completion)",
       {"agent", "kind"},
       "tokens"},
      {"atrex_agent_model_cost_usd_total",
       Type::kCounter,
       "Cost of those tokens at the agent's price (USD per million tokens), by agent",
       {"agent"},
       "usd"},
      {"atrex_agent_model_requests_total",
       Type::kCounter,
       "Requests sent to model servers (retries included), by agent",
       {"agent"},
       "requests"},
      {"atrex_agent_generations_total",
       Type::kCounter,
       "AKA generations this worker ran to their end, by agent and reason: dropout (patience "
       "spent: a fresh sub-agent continues), budget (iterations), wall_time, tokens, cost (a "
       "budget of the (agent, operator) spent), no_new_candidates",
       {"agent", "reason"},
       "generations"},
      {"atrex_agent_shared_best_updates_total",
       Type::kCounter,
       "New bests this worker's generations stored as their (agent, operator)'s shared best "
       "(offers that beat the stored score), by agent",
       {"agent"},
       "candidates"},
      {"atrex_agent_best_score_ratio",
       Type::kGauge,
       "Best quick S_i (median S_j over the quick shapes) of (agent, operator) so far: raised as "
       "each improving candidate's quick records arrive, and at the end of each of this worker's "
       "generations; absent while the pair has no correct candidate",
       {"agent", "operator"},
       "ratio"},
      {"atrex_agent_eval_tasks_lost_total",
       Type::kCounter,
       "Evaluation tasks this worker found lost from the queue (deleted, trimmed or stranded "
       "without a result) and put back",
       {},
       "tasks"},
      // sweep (scheduler: `atrex sweep run`, `atrex sweep wait`)
      {"atrex_sweep_operators_done",
       Type::kGauge,
       "(agent, operator) pairs with a final marker",
       {},
       "operators"},
      {"atrex_sweep_operators_planned",
       Type::kGauge,
       "(agent, operator) pairs of the sweep (agents x operators)",
       {},
       "operators"},
      {"atrex_sweep_queue_tasks",
       Type::kGauge,
       "Tasks in the sweep's queues (QueueStats), by queue (eval, agent) and state (queued, "
       "leased, dead)",
       {"queue", "state"},
       "tasks"},
      {"atrex_sweep_s_agg_ratio",
       Type::kGauge,
       "S_agg = sum_i w_i S_i by agent: over the final evaluations stored so far while the sweep "
       "runs (operators not yet final count 0), from the written report at its end",
       {"agent"},
       "ratio"},
      {"atrex_sweep_s_i_ratio",
       Type::kGauge,
       "S_i (median S_j over the correct shapes of the final evaluation) by agent and operator, "
       "set as each (agent, operator)'s final records arrive; absent before",
       {"agent", "operator"},
       "ratio"},
      {"atrex_sweep_queue_lost_tasks",
       Type::kGauge,
       "Tasks found lost from the sweep's queues and put back since each stream was created "
       "(QueueStats::lost_total), by queue",
       {"queue"},
       "tasks"},
      {"atrex_sweep_queue_vanished_tasks",
       Type::kGauge,
       "Leases whose queue entry was deleted under them, seen by XAUTOCLAIM "
       "(QueueStats::vanished_total), by queue",
       {"queue"},
       "tasks"},
      {"atrex_sweep_agent_tasks_lost_total",
       Type::kCounter,
       "Agent tasks the sweep follower found lost (no final marker, nothing in flight) and put "
       "back",
       {},
       "tasks"},
  };
  return table;
}

const MetricSpec* find_metric(std::string_view name) {
  for (const auto& m : catalogue()) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

namespace {

const MetricSpec& spec(std::string_view name, Type type) {
  const MetricSpec* m = find_metric(name);
  if (m == nullptr || m->type != type) {
    // A typo in the code that names a metric: a bug, never the environment's doing.
    fmt::print(stderr, "atrex: internal error: metric {} is not a {} of the catalogue\n", name,
               type_name(type));
    std::abort();
  }
  return *m;
}

}  // namespace

prometheus::Family<prometheus::Counter>& counter_family(prometheus::Registry& registry,
                                                        std::string_view name) {
  const MetricSpec& m = spec(name, Type::kCounter);
  return prometheus::BuildCounter().Name(m.name).Help(m.help).Register(registry);
}

prometheus::Family<prometheus::Gauge>& gauge_family(prometheus::Registry& registry,
                                                    std::string_view name) {
  const MetricSpec& m = spec(name, Type::kGauge);
  return prometheus::BuildGauge().Name(m.name).Help(m.help).Register(registry);
}

prometheus::Family<prometheus::Histogram>& histogram_family(prometheus::Registry& registry,
                                                            std::string_view name) {
  const MetricSpec& m = spec(name, Type::kHistogram);
  return prometheus::BuildHistogram().Name(m.name).Help(m.help).Register(registry);
}

// Evaluation tasks take from ~0.1 s (a cached CPU shape) to minutes (a cold nvcc plus 15 shapes
// on the GPU, each up to shape_timeout_s).
RunnerMetrics::RunnerMetrics(prometheus::Registry& r)
    : tasks(counter_family(r, "atrex_runner_tasks_total")),
      evaluations(counter_family(r, "atrex_runner_evaluations_total")),
      duplicate_records(counter_family(r, "atrex_runner_duplicate_records_total").Add({})),
      evaluation_duration(
          histogram_family(r, "atrex_runner_evaluation_duration_seconds")
              .Add({}, prometheus::Histogram::BucketBoundaries{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
                                                               60, 120, 300, 600})),
      busy(gauge_family(r, "atrex_runner_busy").Add({})),
      compile_lookups(counter_family(r, "atrex_runner_compile_cache_lookups_total")),
      compiled_ahead(counter_family(r, "atrex_runner_compiled_ahead_total").Add({})),
      lease_renewals(counter_family(r, "atrex_runner_lease_renewals_total")) {}

AgentMetrics::AgentMetrics(prometheus::Registry& r)
    : tasks(counter_family(r, "atrex_agent_tasks_total")),
      candidates(counter_family(r, "atrex_agent_candidates_total")),
      best_score(gauge_family(r, "atrex_agent_best_score_ratio")),
      eval_tasks_lost(counter_family(r, "atrex_agent_eval_tasks_lost_total").Add({})),
      model_tokens(counter_family(r, "atrex_agent_model_tokens_total")),
      model_cost_usd(counter_family(r, "atrex_agent_model_cost_usd_total")),
      model_requests(counter_family(r, "atrex_agent_model_requests_total")),
      generations(counter_family(r, "atrex_agent_generations_total")),
      shared_best_updates(counter_family(r, "atrex_agent_shared_best_updates_total")) {}

SweepMetrics::SweepMetrics(prometheus::Registry& r)
    : operators_done(gauge_family(r, "atrex_sweep_operators_done").Add({})),
      operators_planned(gauge_family(r, "atrex_sweep_operators_planned").Add({})),
      queue_tasks(gauge_family(r, "atrex_sweep_queue_tasks")),
      s_agg(gauge_family(r, "atrex_sweep_s_agg_ratio")),
      s_i(gauge_family(r, "atrex_sweep_s_i_ratio")),
      queue_lost(gauge_family(r, "atrex_sweep_queue_lost_tasks")),
      queue_vanished(gauge_family(r, "atrex_sweep_queue_vanished_tasks")),
      agent_tasks_lost(counter_family(r, "atrex_sweep_agent_tasks_lost_total").Add({})) {}

void SweepMetrics::set_queue(const std::string& queue, int64_t queued, int64_t leased,
                             int64_t dead) {
  queue_tasks.Add({{"queue", queue}, {"state", "queued"}}).Set(static_cast<double>(queued));
  queue_tasks.Add({{"queue", queue}, {"state", "leased"}}).Set(static_cast<double>(leased));
  queue_tasks.Add({{"queue", queue}, {"state", "dead"}}).Set(static_cast<double>(dead));
}

}  // namespace atrex::metrics
