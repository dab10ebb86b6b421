#include "atrex/scheduler/cluster_sweep.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "atrex/agent/worker.h"
#include "atrex/common/clock.h"
#include "atrex/common/redis_queue.h"
#include "atrex/common/redis_result_store.h"
#include "atrex/runner/runner_loop.h"
#include "launchers.h"

namespace atrex::scheduler {
namespace fs = std::filesystem;

std::string sweep_prefix(const std::string& sweep_id) { return "atrex:{" + sweep_id + "}"; }

Json to_json(const ClusterOptions& o) {
  return Json{{"launcher", o.launcher},
              {"runners", o.runners},
              {"agent_workers", o.agent_workers},
              {"gpus_per_runner", o.gpus_per_runner},
              {"gpu_partition", o.gpu_partition},
              {"cpu_partition", o.cpu_partition},
              {"time_limit", o.time_limit},
              {"array_throttle", o.array_throttle},
              {"sbatch_args", o.sbatch_args},
              {"job_template", o.job_template.string()},
              {"atrex", o.atrex.string()},
              {"lease_timeout_s", o.lease_timeout_s},
              {"max_deliveries", o.max_deliveries},
              {"prefetch", o.prefetch},
              {"metrics", o.metrics},
              {"metrics_targets", o.metrics_targets.string()}};
}

ClusterOptions cluster_options_from_json(const Json& j, ClusterOptions o) {
  o.launcher = j.value("launcher", o.launcher);
  o.runners = j.value("runners", o.runners);
  o.agent_workers = j.value("agent_workers", o.agent_workers);
  o.gpus_per_runner = j.value("gpus_per_runner", o.gpus_per_runner);
  o.gpu_partition = j.value("gpu_partition", o.gpu_partition);
  o.cpu_partition = j.value("cpu_partition", o.cpu_partition);
  o.time_limit = j.value("time_limit", o.time_limit);
  o.array_throttle = j.value("array_throttle", o.array_throttle);
  o.sbatch_args = j.value("sbatch_args", o.sbatch_args);
  o.job_template = j.value("job_template", o.job_template.string());
  o.atrex = j.value("atrex", o.atrex.string());
  o.lease_timeout_s = j.value("lease_timeout_s", o.lease_timeout_s);
  o.max_deliveries = j.value("max_deliveries", o.max_deliveries);
  o.prefetch = j.value("prefetch", o.prefetch);
  o.metrics = j.value("metrics", o.metrics);
  o.metrics_targets = j.value("metrics_targets", o.metrics_targets.string());
  return o;
}

fs::path metrics_targets_dir(const fs::path& results) { return results / "metrics" / "targets"; }

namespace {

struct Connections {
  std::unique_ptr<RedisQueue> queue;
  std::unique_ptr<RedisResultStore> store;
};

// `lease_timeout_s`, `max_deliveries`: the sweep's (manifest "cluster"), which the workers'
// claims apply.
Result<Connections> connect(const std::string& url, const std::string& sweep_id,
                            int lease_timeout_s = 60, int max_deliveries = 3) {
  ATREX_ASSIGN_OR_RETURN(RedisOptions ro, parse_redis_url(url));
  Connections c;
  QueueOptions qo;
  qo.lease_timeout = std::chrono::seconds(std::max(1, lease_timeout_s));
  qo.max_deliveries = std::max(1, max_deliveries);
  ATREX_ASSIGN_OR_RETURN(c.queue, RedisQueue::open(ro, qo, sweep_prefix(sweep_id)));
  ATREX_ASSIGN_OR_RETURN(c.store, RedisResultStore::open(ro, sweep_prefix(sweep_id)));
  return c;
}

problems::HardwareProfile hardware_from_manifest(const Json& m) {
  problems::HardwareProfile hw;
  const Json& h = m.value("hardware", Json::object());
  hw.name = h.value("name", "");
  hw.hbm_bytes_per_s = h.value("hbm_bytes_per_s", 0.0);
  const Json peaks = h.value("p_peak", Json::object());  // named: items() must not outlive it
  for (auto& [k, v] : peaks.items()) hw.p_peak_flops_per_s[k] = v.get<double>();
  hw.source_doc = h.value("source", "");
  return hw;
}

Result<problems::Suite> suite_for(const Json& m) {
  fs::path dir = m.value("suite", "");
  std::error_code ec;
  if (dir.empty() || !fs::exists(dir / "data", ec)) dir = problems::default_suite_dir();
  return problems::Suite::load(dir);
}

// The manifest as workers see it: stored in Redis so they need only the URL and the sweep id.
Result<Json> manifest_from_redis(const std::string& url, const std::string& sweep_id) {
  ATREX_ASSIGN_OR_RETURN(RedisOptions ro, parse_redis_url(url));
  ATREX_ASSIGN_OR_RETURN(auto conn, RedisConnection::connect(ro));
  ATREX_ASSIGN_OR_RETURN(RedisValue v,
                         conn->command({"GET", sweep_prefix(sweep_id) + ":manifest"}));
  if (v.is_nil())
    return not_found(fmt::format("no sweep {} in Redis {}:{}", sweep_id, ro.host, ro.port));
  try {
    return Json::parse(v.str);
  } catch (const Json::parse_error& e) {
    return internal_error(
        fmt::format("sweep {} manifest in Redis is not JSON: {}", sweep_id, e.what()));
  }
}

Result<Json> read_manifest(const fs::path& dir) {
  auto m = read_json_file(dir / "manifest.json");
  if (!m) return tl::unexpected(with_context(m.error(), "not a sweep results folder"));
  if (m->value("redis_url", "").empty()) {
    return invalid_input(
        fmt::format("{}: this sweep was not submitted to a cluster (no redis_url in its manifest)",
                    dir.string()));
  }
  return m;
}

Result<std::vector<Json>> all_dead_letters(TaskQueue& queue) {
  std::vector<Json> out;
  for (const char* stream : {runner::kEvalStream, agent::kAgentStream}) {
    ATREX_ASSIGN_OR_RETURN(auto dead, queue.dead_letters(stream));
    for (const auto& d : dead) out.push_back(dead_letter_json(stream, d));
  }
  return out;
}

// The worker's /metrics endpoint: --metrics-listen, else the manifest's cluster.metrics; null
// when neither asks for one. Its target file goes to <results>/metrics/targets/<name>.json.
Result<std::unique_ptr<metrics::Exposition>> start_worker_metrics(
    const Json& m, const ClusterOptions& co, const std::optional<metrics::ListenAddress>& flag,
    const std::string& role, const std::string& name) {
  std::optional<metrics::ListenAddress> listen = flag;
  if (!listen && !co.metrics.empty()) {
    ATREX_ASSIGN_OR_RETURN(
        listen, metrics::parse_listen_address(co.metrics, "the manifest's cluster.metrics"));
  }
  if (!listen) return std::unique_ptr<metrics::Exposition>();
  // In a folder shared by sweeps the file names carry the sweep id.
  const bool shared = !co.metrics_targets.empty();
  const fs::path dir = shared ? co.metrics_targets : metrics_targets_dir(m.value("output", "."));
  ATREX_ASSIGN_OR_RETURN(
      auto e, metrics::start_exposition(*listen, dir, m.value("name", ""), role, name,
                                        shared ? m.value("sweep_id", "") + "-" + name : name));
  spdlog::info("{} {}: metrics at http://{}/metrics", role, name, e->server->target());
  return e;
}

// The sweep's gauges from its queues and final markers.
Result<void> observe_sweep(metrics::SweepMetrics* sm, TaskQueue& queue, int done, int total) {
  if (!sm) return ok();
  sm->operators_done.Set(done);
  sm->operators_planned.Set(total);
  for (const char* stream : {runner::kEvalStream, agent::kAgentStream}) {
    ATREX_ASSIGN_OR_RETURN(QueueStats s, queue.stats(stream));
    sm->set_queue(stream, s.ready, s.leased, s.dead);
  }
  return ok();
}

// report.json gets "dead_letters"; report.md a table of them.
Result<void> add_dead_letters_to_reports(const SweepOutcome& out, const std::vector<Json>& dead,
                                         const ProgressFn& say) {
  if (dead.empty()) return ok();
  ATREX_ASSIGN_OR_RETURN(Json report, read_json_file(out.report_json));
  report["dead_letters"] = dead;
  ATREX_TRY(write_text_file_atomic(out.report_json, report.dump(2)));
  for (const auto& d : dead) {
    if (say) {
      say(fmt::format("dead-lettered {} task of {} after {} deliveries: {}", d.value("kind", ""),
                      d.value("operator", ""), d.value("deliveries", 0), d.value("error", "")));
    }
  }
  ATREX_ASSIGN_OR_RETURN(std::string md, read_text_file(out.report_md));
  md += dead_letters_markdown(dead);
  return write_text_file_atomic(out.report_md, md);
}

}  // namespace

Result<ResolvedSweep> sweep_from_manifest(const fs::path& dir) {
  ATREX_ASSIGN_OR_RETURN(Json m, read_json_file(dir / "manifest.json"));
  ATREX_ASSIGN_OR_RETURN(problems::Suite suite, suite_for(m));
  ResolvedSweep r{SweepSpec{},
                  std::move(suite),
                  hardware_from_manifest(m),
                  m.value("backend", ""),
                  m.value("device", ""),
                  {},
                  {},
                  dir,
                  m.value("sweep_id", "")};
  r.spec.name = m.value("name", "");
  r.spec.source = m.value("source", "");
  r.spec.raw = m.value("spec", Json::object());
  for (const auto& a : m.value("agents", Json::array()))
    r.spec.agents.push_back(agent::agent_spec_from_flat_json(a));
  const Json ev = m.value("evaluation", Json::object()),
             qev = m.value("quick_evaluation", Json::object());
  ATREX_ASSIGN_OR_RETURN(
      r.spec.evaluation,
      eval_settings_from_json(JsonField(ev, (dir / "manifest.json").string(), "evaluation")));
  ATREX_ASSIGN_OR_RETURN(r.spec.quick_evaluation,
                         eval_settings_from_json(
                             JsonField(qev, (dir / "manifest.json").string(), "quick_evaluation")));
  for (const auto& o : m.value("operators", Json::array())) {
    r.operators.push_back(OperatorPlan{o.value("operator", ""),
                                       o.value("shapes", std::vector<std::string>{}),
                                       o.value("quick_shapes", std::vector<std::string>{})});
  }
  r.not_covered = m.value("not_covered", std::vector<std::string>{});
  return r;
}

Result<Json> submit_sweep(const ResolvedSweep& sweep, const ClusterOptions& given,
                          const ProgressFn& say) {
  ClusterOptions options = given;
  if (!options.redis_urls.empty()) {
    ATREX_ASSIGN_OR_RETURN(options.redis_url,
                           choose_redis_url(options.redis_urls, options.redis_urls_source,
                                            sweep.sweep_id, sweep.output));
    if (say && options.redis_urls.size() > 1) {
      const auto& l = options.redis_urls;
      const auto pos = std::find(l.begin(), l.end(), options.redis_url) - l.begin();
      say(fmt::format("sweep {}: Redis {} ({}; the manifest keeps it there)", sweep.sweep_id,
                      redis_url_without_password(options.redis_url),
                      pos < static_cast<long>(l.size())
                          ? fmt::format("entry {} of the {} listed", pos + 1, l.size())
                          : std::string("as its manifest records")));
    }
  }
  ATREX_ASSIGN_OR_RETURN(Connections c, connect(options.redis_url, sweep.sweep_id));
  const Json cluster = to_json(options);
  ATREX_ASSIGN_OR_RETURN(
      Json manifest,
      open_results_dir(sweep, Json{{"status", "submitted"},
                                   {"redis_url", options.redis_url},
                                   {"redis", redis_url_without_password(options.redis_url)},
                                   {"cluster", cluster},
                                   {"submitted_at", utc_timestamp_now()}}));
  ATREX_ASSIGN_OR_RETURN(RedisOptions ro, parse_redis_url(options.redis_url));
  {
    ATREX_ASSIGN_OR_RETURN(auto conn, RedisConnection::connect(ro));
    ATREX_TRY(conn->command({"SET", sweep_prefix(sweep.sweep_id) + ":manifest", manifest.dump()}));
  }
  ATREX_ASSIGN_OR_RETURN(int n, enqueue_missing(sweep, *c.queue, *c.store, say));
  if (say)
    say(fmt::format("sweep {} ({}): {} agent task(s) queued in {}", sweep.spec.name, sweep.sweep_id,
                    n, redis_url_without_password(options.redis_url)));
  auto workers = launch_workers(manifest, options, say);
  if (!workers) {
    return tl::unexpected(with_context(
        workers.error(),
        fmt::format(
            "sweep {}: tasks are queued but no workers started (fix that, then `atrex sweep "
            "resume {}`)",
            sweep.sweep_id, sweep.output.string())));
  }
  return update_manifest(sweep.output, Json{{"status", "running"}, {"workers", *workers}});
}

Result<SweepStatus> sweep_status(const fs::path& dir) {
  SweepStatus st;
  ATREX_ASSIGN_OR_RETURN(st.manifest, read_manifest(dir));
  const std::string id = st.manifest.value("sweep_id", "");
  ATREX_ASSIGN_OR_RETURN(Connections c, connect(st.manifest.value("redis_url", ""), id));
  std::vector<std::string> agents, ops;
  for (const auto& a : st.manifest.value("agents", Json::array()))
    agents.push_back(a.value("name", ""));
  for (const auto& o : st.manifest.value("operators", Json::array()))
    ops.push_back(o.value("operator", ""));
  st.total = static_cast<int>(agents.size() * ops.size());
  std::set<std::string> seen;
  ATREX_ASSIGN_OR_RETURN(st.done, count_finals(agents, ops, *c.store, seen, nullptr));
  ATREX_ASSIGN_OR_RETURN(st.eval, c.queue->stats(runner::kEvalStream));
  ATREX_ASSIGN_OR_RETURN(st.agent, c.queue->stats(agent::kAgentStream));
  ATREX_ASSIGN_OR_RETURN(st.dead_letters, all_dead_letters(*c.queue));
  auto alive = workers_alive(st.manifest.value("workers", Json::object()));
  st.workers_alive = alive.first;
  st.workers_text = alive.second;
  return st;
}

Result<SweepOutcome> wait_sweep(const fs::path& dir, std::chrono::seconds timeout,
                                const ProgressFn& say, const std::atomic<bool>* stop,
                                metrics::SweepMetrics* sm) {
  ATREX_ASSIGN_OR_RETURN(Json m, read_manifest(dir));
  const std::string id = m.value("sweep_id", "");
  ATREX_ASSIGN_OR_RETURN(Connections c, connect(m.value("redis_url", ""), id));
  std::vector<std::string> agents, ops;
  for (const auto& a : m.value("agents", Json::array())) agents.push_back(a.value("name", ""));
  for (const auto& o : m.value("operators", Json::array())) ops.push_back(o.value("operator", ""));
  const int total = static_cast<int>(agents.size() * ops.size());
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::set<std::string> seen;
  for (;;) {
    ATREX_ASSIGN_OR_RETURN(int done, count_finals(agents, ops, *c.store, seen, say));
    if (auto o = observe_sweep(sm, *c.queue, done, total); !o)
      spdlog::warn("sweep metrics: {}", o.error().message);
    if (done == total) break;
    ATREX_TRY(finalize_dead_agent_tasks(*c.queue, *c.store));
    if (std::chrono::steady_clock::now() > deadline || (stop && stop->load())) {
      return make_error(
          ErrorCode::kTimeout,
          fmt::format("sweep {}: {}/{} operators done; still running", id, done, total));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  // Keep a copy of every record next to the manifest, then score.
  ATREX_ASSIGN_OR_RETURN(auto entries, c.store->entries());
  ATREX_ASSIGN_OR_RETURN(auto local, MemoryResultStore::open_jsonl(dir / "results.jsonl"));
  for (const auto& [key, record] : entries) ATREX_TRY(local->put(key, record));
  ATREX_ASSIGN_OR_RETURN(problems::Suite suite, suite_for(m));
  ATREX_ASSIGN_OR_RETURN(SweepOutcome out, reduce(dir, suite, *local));
  // The tasks the sweep completed without (their workers kept dying) go into the report with
  // their last error: they are not in the records, so scores alone would hide them.
  ATREX_ASSIGN_OR_RETURN(std::vector<Json> dead, all_dead_letters(*c.queue));
  ATREX_TRY(add_dead_letters_to_reports(out, dead, say));
  if (sm) {
    for (const auto& a : out.agents) sm->s_agg.Add({{"agent", a.agent}}).Set(a.s_agg);
  }
  // Nothing is left to do: the sweep's workers stop (they serve this sweep only).
  ATREX_TRY(stop_workers(m.value("workers", Json::object())));
  ATREX_TRY(
      update_manifest(dir, Json{{"status", "complete"}, {"finished_at", utc_timestamp_now()}}));
  return out;
}

Result<void> cancel_sweep(const fs::path& dir) {
  ATREX_ASSIGN_OR_RETURN(Json m, read_manifest(dir));
  ATREX_TRY(stop_workers(m.value("workers", Json::object())));
  ATREX_TRY(
      update_manifest(dir, Json{{"status", "cancelled"}, {"cancelled_at", utc_timestamp_now()}}));
  return ok();
}

Result<Json> resume_sweep(const fs::path& dir, const ProgressFn& say) {
  ATREX_ASSIGN_OR_RETURN(Json m, read_manifest(dir));
  ATREX_ASSIGN_OR_RETURN(ResolvedSweep sweep, sweep_from_manifest(dir));
  ATREX_ASSIGN_OR_RETURN(Connections c, connect(m.value("redis_url", ""), sweep.sweep_id));
  ATREX_ASSIGN_OR_RETURN(RedisOptions ro, parse_redis_url(m.value("redis_url", "")));
  {
    // A Redis that lost the sweep (restarted without persistence) learns it again.
    ATREX_ASSIGN_OR_RETURN(auto conn, RedisConnection::connect(ro));
    ATREX_TRY(conn->command({"SET", sweep_prefix(sweep.sweep_id) + ":manifest", m.dump()}));
  }
  ATREX_ASSIGN_OR_RETURN(int n, enqueue_missing(sweep, *c.queue, *c.store, say));
  if (say) say(fmt::format("sweep {}: {} agent task(s) re-enqueued", sweep.sweep_id, n));
  ClusterOptions o = cluster_options_from_json(m.value("cluster", Json::object()));
  o.redis_url = m.value("redis_url", "");
  ATREX_ASSIGN_OR_RETURN(Json workers, revive_workers(m, o, say));
  return update_manifest(
      dir, Json{{"status", "running"}, {"workers", workers}, {"resumed_at", utc_timestamp_now()}});
}

int run_runner_daemon(const std::string& redis_url, const std::string& sweep_id, int device,
                      const std::string& name, const std::atomic<bool>& stop,
                      const std::optional<metrics::ListenAddress>& metrics_listen) {
  auto m = manifest_from_redis(redis_url, sweep_id);
  if (!m) {
    spdlog::error("runner: {}", m.error().message);
    return exit_code_for(m.error());
  }
  const ClusterOptions co = cluster_options_from_json(m->value("cluster", Json::object()));
  const int lease_s = co.lease_timeout_s;
  auto c = connect(redis_url, sweep_id, lease_s, co.max_deliveries);
  auto suite = suite_for(*m);
  if (!c || !suite) {
    spdlog::error("runner: {}", (!c ? c.error() : suite.error()).message);
    return 1;
  }
  auto exposition = start_worker_metrics(*m, co, metrics_listen, "runner", name);
  if (!exposition) {
    spdlog::error("runner: {}", exposition.error().message);
    return exit_code_for(exposition.error());
  }
  std::optional<metrics::RunnerMetrics> rm;
  if (*exposition) rm.emplace(*(*exposition)->registry);
  runner::EvaluatorOptions eo;
  if (rm) eo.on_compile = [&rm](bool hit) { rm->count_compile(hit); };
  eo.suite = &*suite;
  eo.hardware = hardware_from_manifest(*m);
  eo.device_index = device;
  eo.runner = name;
  eo.work_dir = fs::path(m->value("output", ".")) / "work" / name;
  eo.stop = &stop;  // SIGTERM/SIGUSR1: stop between shapes and give the lease back
  runner::Evaluator evaluator(eo);
  runner::RunnerLoopOptions ro{runner::kEvalStream, name};
  ro.heartbeat = std::chrono::milliseconds(std::max(500, lease_s * 1000 / 6));
  ro.prefetch = co.prefetch;
  ro.metrics = rm ? &*rm : nullptr;
  runner::RunnerLoop loop(*c->queue, *c->store, evaluator, ro);
  spdlog::info("runner {} on device {} serving sweep {}", name, device, sweep_id);
  loop.run(stop);
  spdlog::info("runner {}: stopped after {} task(s)", name, loop.stats().tasks_done.load());
  return 0;
}

int run_agent_worker_daemon(const std::string& redis_url, const std::string& sweep_id,
                            const std::string& name, const std::atomic<bool>& stop,
                            const std::optional<metrics::ListenAddress>& metrics_listen) {
  auto m = manifest_from_redis(redis_url, sweep_id);
  if (!m) {
    spdlog::error("agent-worker: {}", m.error().message);
    return exit_code_for(m.error());
  }
  const ClusterOptions co = cluster_options_from_json(m->value("cluster", Json::object()));
  const int lease_s = co.lease_timeout_s;
  auto c = connect(redis_url, sweep_id, lease_s, co.max_deliveries);
  auto catalog = agent::TemplateCatalog::embedded();
  if (!c || !catalog) {
    spdlog::error("agent-worker: {}", (!c ? c.error() : catalog.error()).message);
    return 1;
  }
  auto exposition = start_worker_metrics(*m, co, metrics_listen, "agent-worker", name);
  if (!exposition) {
    spdlog::error("agent-worker: {}", exposition.error().message);
    return exit_code_for(exposition.error());
  }
  std::optional<metrics::AgentMetrics> am;
  if (*exposition) am.emplace(*(*exposition)->registry);
  agent::AgentWorkerOptions wo;
  wo.consumer = name;
  wo.heartbeat = std::chrono::milliseconds(std::max(500, lease_s * 1000 / 6));
  wo.audit_dir = fs::path(m->value("output", ".")) / "audit";
  wo.metrics = am ? &*am : nullptr;
  agent::AgentWorker worker(*c->queue, *c->store, *catalog, wo);
  spdlog::info("agent worker {} serving sweep {}", name, sweep_id);
  worker.run(stop);
  return 0;
}

}  // namespace atrex::scheduler
