// The metric catalogue: every Prometheus metric an atrex process exposes, defined in one table
// (name, type, help, labels, unit), and the typed handles each component updates
// (docs/architecture.md §1 "Monitoring", §4 "Metrics").
//
// Names follow `atrex_<component>_<quantity>_<unit>` with base units (seconds; scores are
// dimensionless ratios, `_ratio`); counters end in `_total`. Labels are bounded: agent names,
// operator names (30), statuses, queue names and states — never task, candidate or shape ids.
// Prometheus naming conventions: https://prometheus.io/docs/practices/naming/ ; the families are
// prometheus-cpp 1.0.1 (`prometheus::Registry`, Debian `prometheus-cpp-dev`).
//
// Thread-safety: prometheus-cpp families and metrics are thread-safe; so are these handles.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace atrex::metrics {

enum class Type { kCounter, kGauge, kHistogram };
const char* type_name(Type t);  // "counter", "gauge", "histogram" (the exposition format's TYPE)

struct MetricSpec {
  std::string name;  // atrex_<component>_<quantity>_<unit>
  Type type = Type::kCounter;
  std::string help;                 // says where the value comes from
  std::vector<std::string> labels;  // label names; their values are bounded sets
  std::string unit;                 // "seconds", "ratio", "tasks", ... (base units)
};

// Every atrex metric, in catalogue order. Tests check dashboards and rules against it.
const std::vector<MetricSpec>& catalogue();
// The catalogue entry called `name`; nullptr when there is none.
const MetricSpec* find_metric(std::string_view name);

// Registers the catalogue's family `name` in `registry` (asserts that it exists and has the type).
prometheus::Family<prometheus::Counter>& counter_family(prometheus::Registry& registry,
                                                        std::string_view name);
prometheus::Family<prometheus::Gauge>& gauge_family(prometheus::Registry& registry,
                                                    std::string_view name);
prometheus::Family<prometheus::Histogram>& histogram_family(prometheus::Registry& registry,
                                                            std::string_view name);

// Runner (runner_loop.h): one per runner process or runner thread.
struct RunnerMetrics {
  explicit RunnerMetrics(prometheus::Registry& registry);
  // status: done (acked), released (given back: an error or a stopping runner), invalid
  // (unparseable).
  prometheus::Family<prometheus::Counter>& tasks;
  // One per shape record written; status as in atrex.eval/1 (ok, compile_error, wrong_result,
  // timeout, crashed, rejected).
  prometheus::Family<prometheus::Counter>& evaluations;
  prometheus::Counter& duplicate_records;
  prometheus::Histogram& evaluation_duration;  // seconds per task: compile + all its shapes
  prometheus::Gauge& busy;                     // 1 while a task is evaluated
  prometheus::Family<prometheus::Counter>& compile_lookups;  // result: hit | miss
  prometheus::Counter& compiled_ahead;
  prometheus::Family<prometheus::Counter>& lease_renewals;  // result: ok | failed

  void count_evaluation(const std::string& op, const std::string& status) {
    evaluations.Add({{"operator", op}, {"status", status}}).Increment();
  }
  void count_task(const std::string& status) { tasks.Add({{"status", status}}).Increment(); }
  void count_renewal(bool ok) {
    lease_renewals.Add({{"result", ok ? "ok" : "failed"}}).Increment();
  }
  void count_compile(bool cache_hit) {
    compile_lookups.Add({{"result", cache_hit ? "hit" : "miss"}}).Increment();
  }
};

// Agent worker (agent/worker.h).
struct AgentMetrics {
  explicit AgentMetrics(prometheus::Registry& registry);
  prometheus::Family<prometheus::Counter>&
      tasks;  // {agent, status}: done | dropout | released | error
  prometheus::Family<prometheus::Counter>&
      candidates;  // {agent}: quick evaluations of proposed candidates
  // {agent, operator}: best quick S_i so far; absent until the pair has a correct candidate
  prometheus::Family<prometheus::Gauge>& best_score;
  // Evaluation tasks this worker found lost from the queue (gone without a record) and put back.
  prometheus::Counter& eval_tasks_lost;
  prometheus::Family<prometheus::Counter>& model_tokens;    // {agent, kind}: prompt | completion
  prometheus::Family<prometheus::Counter>& model_cost_usd;  // {agent}
  prometheus::Family<prometheus::Counter>& model_requests;  // {agent}
  // {agent, reason}: dropout | budget | wall_time | tokens | cost | no_new_candidates
  prometheus::Family<prometheus::Counter>& generations;
  prometheus::Family<prometheus::Counter>& shared_best_updates;  // {agent}
};

// A sweep being followed (`atrex sweep run`, `atrex sweep wait`).
struct SweepMetrics {
  explicit SweepMetrics(prometheus::Registry& registry);
  prometheus::Gauge& operators_done;     // (agent, operator) pairs with a final marker
  prometheus::Gauge& operators_planned;  // agents x operators
  prometheus::Family<prometheus::Gauge>&
      queue_tasks;  // {queue: eval | agent, state: queued | leased | dead}
  // {agent}: S_agg over the final evaluations stored so far; set while the sweep runs, and
  // from the written report at its end
  prometheus::Family<prometheus::Gauge>& s_agg;
  // {agent, operator}: S_i of each (agent, operator) whose final evaluation is stored
  prometheus::Family<prometheus::Gauge>& s_i;
  // {queue}: tasks found lost (deleted from the queue without a result) and put back, as the
  // queue counts them (QueueStats::lost_total, since the stream was created)
  prometheus::Family<prometheus::Gauge>& queue_lost;
  // {queue}: leases whose entry was deleted under them (QueueStats::vanished_total)
  prometheus::Family<prometheus::Gauge>& queue_vanished;
  // Agent tasks this follower found lost and put back.
  prometheus::Counter& agent_tasks_lost;

  void set_queue(const std::string& queue, int64_t queued, int64_t leased, int64_t dead);
};

}  // namespace atrex::metrics
