// Cluster sweeps: `atrex sweep submit|status|wait|cancel|resume` (the worker daemons the
// launchers start are cmd_workers.cpp's).
#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "atrex/common/progress.h"
#include "atrex/runner/evaluator.h"
#include "atrex/scheduler/lifecycle.h"
#include "atrex/scoring/report.h"
#include "cli.h"

namespace atrex::cli {
namespace {
namespace fs = std::filesystem;

// The sweep file's `cluster` section and the file it came from (for errors).
struct SweepSpecCluster {
  const Json& section;
  const std::string& source;
};

std::atomic<bool> g_stop{false};
extern "C" void on_stop_signal(int) { g_stop = true; }

// SIGTERM / SIGINT, and SIGUSR1 (what sbatch --signal=B:USR1@120 sends before the time limit):
// stop taking work, finish the shape in progress, give the task back, exit.
void install_stop_handlers() {
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGUSR1, on_stop_signal);
}

struct SubmitArgs {
  std::string file;
  std::string out;
  std::string backend;
  std::string hardware;
  std::string redis_url;
  std::string launcher = "local";
  std::string kernels_from;
  bool no_sandbox = false;  // --no-sandbox: the manifest's cluster.sandbox, read by every runner
  ClusterOptions cluster;  // the flags' values; only the flags given override the sweep file
  std::vector<std::pair<CLI::Option*, const char*>> cluster_flags;  // flag -> its manifest key
};

// Defaults < the sweep file's `cluster` section < the flags given.
Result<ClusterOptions> cluster_options(const SubmitArgs& a, const SweepSpecCluster& file) {
  ATREX_ASSIGN_OR_RETURN(
      ClusterOptions o, cluster_options_from_json(JsonField(file.section, file.source, "cluster")));
  Json flags = to_json(a.cluster);
  flags["launcher"] = a.launcher;
  Json given = Json::object();
  for (const auto& [opt, key] : a.cluster_flags) {
    if (opt->count() > 0) given[key] = flags[key];
  }
  ATREX_ASSIGN_OR_RETURN(o, cluster_options_from_json(JsonField(given, "the command line"), o));
  if (!o.job_template.empty()) o.job_template = fs::absolute(o.job_template);  // resume elsewhere
  if (!o.metrics_targets.empty()) o.metrics_targets = fs::absolute(o.metrics_targets);
  if (a.no_sandbox) o.sandbox = SandboxMode::kNone;
  return o;
}

int submit(const GlobalOptions& g, SubmitArgs& a) {
  auto providers = agent::ProviderRegistry::builtin();
  if (!providers) return fail(providers.error());
  auto spec = a.file.empty() ? scheduler::parse_sweep(scheduler::embedded_default_sweep(),
                                                      scheduler::kEmbeddedDefaultSource, *providers)
                             : scheduler::load_sweep_file(a.file, *providers);
  if (!spec) return fail(spec.error());
  if (!a.kernels_from.empty()) {
    if (auto k = scheduler::add_kernels_from_agent(*spec, a.kernels_from, *providers); !k)
      return fail(k.error());
  }
  // One URL, or several to shard sweeps over: submit_sweep picks one (docs/sweeps.md).
  const std::string redis_flag = "--redis (or $ATREX_REDIS_URL)";
  auto redis = parse_redis_url_list(a.redis_url, redis_flag);
  if (!redis) return fail(redis.error());
  scheduler::SweepOverrides ov;
  if (!a.out.empty()) ov.output = a.out;
  if (!a.backend.empty()) {
    auto b = parse_backend_choice(a.backend, "--backend");
    if (!b) return fail(b.error());
    ov.backend = *b;
  }
  if (!a.hardware.empty()) ov.hardware = a.hardware;
  if (!g.suite_dir.empty()) ov.suite_dir = g.suite_dir;
  auto cluster = cluster_options(a, SweepSpecCluster{spec->cluster, spec->source});
  if (!cluster) return fail(cluster.error());
  // Runners run elsewhere (GPU nodes): this machine need not have the sweep's device.
  ov.remote_runners = cluster->launcher != Launcher::kLocal;
  // Local runners would each exit 3 where the sandbox cannot start: refuse before submitting.
  if (!ov.remote_runners) {
    if (auto ready = runner::sandbox_ready(cluster->sandbox); !ready) return fail(ready.error());
  }
  auto resolved = scheduler::resolve_sweep(*spec, ov);
  if (!resolved) return fail(resolved.error());
  auto say = [](const std::string& line) { fmt::print(stderr, "atrex: {}\n", line); };
  auto manifest = scheduler::submit_sweep(
      *resolved, scheduler::SubmitOptions{*cluster, *redis, redis_flag}, say);
  if (!manifest) return fail(manifest.error());
  if (g.json) {
    fmt::print("{}\n", Json{{"schema", "atrex.submit/1"},
                            {"sweep_id", manifest->sweep_id},
                            {"results", manifest->output},
                            {"redis", manifest->redis.value_or("")},
                            {"workers", manifest->workers ? to_json(*manifest->workers) : Json()}}
                           .dump(2));
  } else {
    fmt::print("submitted sweep {} ({}); results in {}\nfollow it with: atrex sweep status {}\n",
               manifest->name, manifest->sweep_id, manifest->output, manifest->output);
  }
  return 0;
}

int status(const GlobalOptions& g, const std::string& dir) {
  auto st = scheduler::sweep_status(dir);
  if (!st) return fail(st.error());
  const Manifest& m = st->manifest;
  if (g.json) {
    auto q = [](const QueueStats& s) {
      return Json{{"ready", s.ready},
                  {"leased", s.leased},
                  {"dead", s.dead},
                  {"enqueued_total", s.enqueued_total},
                  {"acked_total", s.acked_total}};
    };
    Json dead = Json::array();
    for (const auto& d : st->dead_letters) dead.push_back(scoring::to_json(d));
    fmt::print("{}\n", Json{{"schema", "atrex.sweep-status/1"},
                            {"sweep_id", m.sweep_id},
                            {"status", sweep_status_name(m.status)},
                            {"operators_done", st->done},
                            {"operators_total", st->total},
                            {"eval_queue", q(st->eval)},
                            {"agent_queue", q(st->agent)},
                            {"dead_letters", dead},
                            {"workers_alive", st->workers_alive},
                            {"sandbox", sandbox_mode_name(m.cluster ? m.cluster->sandbox
                                                                    : SandboxMode::kBwrap)}}
                           .dump(2));
    return 0;
  }
  fmt::print("sweep {} ({}): {}\n", m.name, m.sweep_id, sweep_status_name(m.status));
  fmt::print("  operators finished: {}/{}\n", st->done, st->total);
  fmt::print("  evaluations: {} queued, {} running, {} done, {} dead-lettered (of {} enqueued)\n",
             st->eval.ready, st->eval.leased, st->eval.acked_total, st->eval.dead,
             st->eval.enqueued_total);
  fmt::print("  agent tasks: {} queued, {} running, {} done, {} dead-lettered\n", st->agent.ready,
             st->agent.leased, st->agent.acked_total, st->agent.dead);
  for (const auto& d : st->dead_letters) {
    fmt::print("  dead-lettered {} task: {} {}{} after {} deliveries: {}\n", d.kind, d.agent, d.op,
               d.candidate.empty() ? "" : " " + d.candidate, d.deliveries, d.error);
  }
  fmt::print("  workers: {}\n", st->workers_text);
  if (m.cluster && m.cluster->sandbox == SandboxMode::kNone) {
    fmt::print("  sandbox: none (submitted with --no-sandbox: candidates run unsandboxed)\n");
  }
  return 0;
}

int wait(const GlobalOptions& g, const std::string& dir, int timeout_s,
         const std::string& metrics_listen) {
  auto listen = metrics_listen_flag(metrics_listen);
  if (!listen) return fail(listen.error());
  std::unique_ptr<metrics::Exposition> exposition;
  std::optional<metrics::SweepMetrics> sm;
  if (*listen) {
    auto m = read_manifest_file(dir);
    if (!m) return fail(m.error());
    // The workers' target folder: the results folder's, or the site's shared one
    // (cluster.metrics_targets).
    const std::string shared = m->cluster ? m->cluster->metrics_targets.string() : std::string();
    auto e = metrics::start_exposition(
        **listen, shared.empty() ? metrics::metrics_targets_dir(dir) : fs::path(shared), m->name,
        "sweep", "sweep-wait", shared.empty() ? "sweep-wait" : m->sweep_id + "-sweep-wait");
    if (!e) return fail(e.error());
    exposition = std::move(*e);
    sm.emplace(*exposition->registry);
    fmt::print(stderr, "atrex: metrics at http://{}/metrics\n", exposition->server->target());
  }
  install_stop_handlers();
  ProgressOptions po;
  po.what = "sweep wait";
  po.unit = "operators";
  po.terminal = progress_to_terminal();
  po.every = progress_every(std::chrono::seconds(30));
  ProgressMeter meter(po, 0);
  std::mutex meter_mu;
  auto say = [&](const std::string& line) {
    std::lock_guard lock(meter_mu);
    meter.print(fmt::format("atrex: {}", line));
  };
  auto counts = [&](int done, int total) {
    std::lock_guard lock(meter_mu);
    meter.set_total(total);
    meter.update(done);
  };
  auto out = scheduler::wait_sweep(dir, std::chrono::seconds(timeout_s), say, &g_stop,
                                   sm ? &*sm : nullptr, scheduler::ClusterEnv::redis_and_launchers(),
                                   counts);
  meter.finish();
  if (!out) return fail(out.error());
  if (g.json) {
    auto report = read_json_file(out->report_json);
    if (!report) return fail(report.error());
    fmt::print("{}\n", report->dump(2));
    return every_agent_task_failed(out->agents) ? 1 : 0;
  }
  for (const auto& a : out->agents)
    fmt::print("\nagent {}\n{}", a.agent, scoring::agent_table_text(a));
  fmt::print("\nreports: {} and {}\n", out->report_md.string(), out->report_json.string());
  return every_agent_task_failed(out->agents) ? 1 : 0;
}

}  // namespace

void add_cluster_commands(CLI::App& sweep, GlobalOptions& g, int& rc) {
  static SubmitArgs a;
  auto* submit_cmd =
      sweep.add_subcommand("submit",
                           "Submit a sweep to a cluster: tasks through Redis, workers started "
                           "by a launcher (local processes or Slurm job arrays)");
  submit_cmd->add_option("file", a.file, "Sweep file (YAML); without it the embedded default");
  submit_cmd
      ->add_option("--redis", a.redis_url,
                   "redis://[[user]:password@]host[:port][/db], or a comma-separated list of them: "
                   "the sweep "
                   "goes to one, picked from its sweep id and kept in its manifest")
      ->envname("ATREX_REDIS_URL")
      ->required();
  submit_cmd->add_option("--out", a.out, "Results folder (shared by all workers)");
  submit_cmd->add_option("--backend", a.backend, "Override the sweep's backend");
  submit_cmd->add_option("--hardware", a.hardware, "Override the sweep's hardware profile");
  submit_cmd
      ->add_option("--kernels-from", a.kernels_from,
                   "Add the agent `best` (provider fixed): the best kernel per operator of the "
                   "sweep in this results folder (sweeps/nightly.yaml)")
      ->check(CLI::ExistingDirectory);
  // These override the sweep file's `cluster:` section (docs/sweeps.md "Cluster sweeps").
  auto flag = [&](CLI::Option* opt, const char* key) { a.cluster_flags.emplace_back(opt, key); };
  flag(submit_cmd->add_option("--launcher", a.launcher, "local or slurm")
           ->check(CLI::IsMember({"local", "slurm"}))
           ->capture_default_str(),
       "launcher");
  flag(submit_cmd
           ->add_option("--runners", a.cluster.runners,
                        "Runner processes (local) / runner array tasks (slurm)")
           ->check(CLI::PositiveNumber)
           ->capture_default_str(),
       "runners");
  flag(submit_cmd
           ->add_option(
               "--lease-timeout", a.cluster.lease_timeout_s,
               "Seconds without a heartbeat after which a worker's task goes to another worker")
           ->check(CLI::Range(3, 86400))
           ->capture_default_str(),
       "lease_timeout_s");
  flag(submit_cmd
           ->add_option(
               "--max-deliveries", a.cluster.max_deliveries,
               "Deliveries of a task (its workers died or failed it) before it is dead-lettered")
           ->check(CLI::Range(1, 100))
           ->capture_default_str(),
       "max_deliveries");
  flag(submit_cmd
           ->add_option("--prefetch", a.cluster.prefetch,
                        "Tasks a runner claims ahead and compiles while it measures the current "
                        "one (0 = none)")
           ->check(CLI::Range(0, 16))
           ->capture_default_str(),
       "prefetch");
  flag(
      submit_cmd
          ->add_option(
              "--metrics", a.cluster.metrics,
              "ADDR:PORT every worker serves Prometheus metrics on (port 0: any free port; default "
              "none); their file_sd targets go to <results>/metrics/targets/")
          ->check([](const std::string& v) {
            auto r = metrics::parse_listen_address(v, "--metrics");
            return r ? std::string() : r.error().message;
          }),
      "metrics");
  flag(submit_cmd->add_option(
           "--metrics-targets", a.cluster.metrics_targets,
           "Folder a Prometheus watches (file_sd) for the workers' target files, shared by sweeps "
           "(files <sweep id>-<worker>.json; default <results>/metrics/targets/<worker>.json)"),
       "metrics_targets");
  flag(submit_cmd
           ->add_option("--agent-workers", a.cluster.agent_workers,
                        "Agent worker processes / array tasks")
           ->check(CLI::PositiveNumber)
           ->capture_default_str(),
       "agent_workers");
  flag(submit_cmd->add_option("--gpu-partition", a.cluster.gpu_partition,
                              "slurm: partition of the runners of GPU sweeps"),
       "gpu_partition");
  flag(submit_cmd->add_option(
           "--cpu-partition", a.cluster.cpu_partition,
           "slurm: partition of the agent workers and of the runners of cpu sweeps"),
       "cpu_partition");
  flag(submit_cmd
           ->add_option("--gpus-per-runner", a.cluster.gpus_per_runner,
                        "slurm: GPUs per runner array task (--gres=gpu:N), one runner process each")
           ->check(CLI::PositiveNumber)
           ->capture_default_str(),
       "gpus_per_runner");
  flag(
      submit_cmd->add_option("--time", a.cluster.time_limit, "slurm: time limit of each array task")
          ->capture_default_str(),
      "time_limit");
  flag(submit_cmd
           ->add_option("--throttle", a.cluster.array_throttle,
                        "slurm: at most N tasks of each array at once (%N)")
           ->check(CLI::NonNegativeNumber),
       "array_throttle");
  flag(submit_cmd
           ->add_option(
               "--sbatch-arg", a.cluster.sbatch_args,
               "slurm: extra sbatch option for both arrays, repeatable (--sbatch-arg=--account=X)")
           ->allow_extra_args(false),
       "sbatch_args");
  flag(submit_cmd
           ->add_option(
               "--job-template", a.cluster.job_template,
               "slurm: job script template replacing the built-in deploy/slurm/worker.sbatch")
           ->check(CLI::ExistingFile),
       "job_template");
  add_no_sandbox_flag(*submit_cmd, a.no_sandbox,
                      "Every runner of the sweep runs candidates WITHOUT the evaluation sandbox "
                      "(no namespaces, no seccomp: they can reach the runner user's files and the "
                      "network; the manifest's cluster.sandbox: none), for nodes where bwrap cannot "
                      "make user namespaces. Default from $ATREX_NO_SANDBOX=1. Records say "
                      "`sandbox: none`");
  submit_cmd->add_flag("--json", g.json, "Machine-readable output");
  submit_cmd->callback([&] { rc = submit(g, a); });

  static std::string dir, wait_metrics_listen;
  static int timeout_s = 7 * 24 * 3600;
  auto* status_cmd =
      sweep.add_subcommand("status", "Progress of a submitted sweep: operators, queues, workers");
  status_cmd->add_option("results", dir, "The sweep's results folder")->required();
  status_cmd->add_flag("--json", g.json, "Machine-readable output (atrex.sweep-status/1)");
  status_cmd->callback([&] { rc = status(g, dir); });
  auto* wait_cmd =
      sweep.add_subcommand("wait", "Wait for a submitted sweep, then write and print its reports");
  wait_cmd->add_option("results", dir, "The sweep's results folder")->required();
  wait_cmd->add_option("--timeout", timeout_s, "Give up after this many seconds (exit 1)")
      ->check(CLI::Range(0, 10'000'000));
  wait_cmd->add_flag("--json", g.json, "Print the atrex.report/1 JSON");
  wait_cmd->add_option(
      "--metrics-listen", wait_metrics_listen,
      "Serve the sweep's Prometheus metrics (progress, queues, S_agg) at http://ADDR:PORT/metrics "
      "while waiting (port 0: any free port)");
  wait_cmd->callback([&] { rc = wait(g, dir, timeout_s, wait_metrics_listen); });
  auto* cancel_cmd = sweep.add_subcommand("cancel", "Stop a submitted sweep's workers");
  cancel_cmd->add_option("results", dir, "The sweep's results folder")->required();
  cancel_cmd->callback([&] {
    auto r = scheduler::cancel_sweep(dir);
    rc = r ? 0 : fail(r.error());
  });
  auto* resume_cmd =
      sweep.add_subcommand("resume",
                           "Re-enqueue what is neither done nor in flight; restart workers "
                           "when none is alive");
  resume_cmd->add_option("results", dir, "The sweep's results folder")->required();
  resume_cmd->callback([&] {
    auto r = scheduler::resume_sweep(
        dir, [](const std::string& line) { fmt::print(stderr, "atrex: {}\n", line); });
    rc = r ? 0 : fail(r.error());
  });
}

}  // namespace atrex::cli
