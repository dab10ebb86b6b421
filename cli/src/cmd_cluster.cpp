// Cluster sweeps: `atrex sweep submit|status|wait|cancel|resume` and the worker daemons
// `atrex runner` / `atrex agent-worker` that launchers start.
#include <unistd.h>

#include <csignal>
#include <thread>

#include <fmt/format.h>

#include "atrex/scheduler/cluster_sweep.h"
#include "atrex/scoring/report.h"
#include "cli.h"

namespace atrex::cli {
namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_stop_signal(int) { g_stop = true; }

// SIGTERM / SIGINT, and SIGUSR1 (what sbatch --signal=B:USR1@120 sends before the time limit):
// stop taking work, finish the current task, exit.
void install_stop_handlers() {
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGUSR1, on_stop_signal);
}

std::string default_name(const std::string& kind) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return fmt::format("{}-{}-{}", kind, host, ::getpid());
}

struct SubmitArgs {
  std::string file;
  std::string out;
  std::string backend;
  std::string hardware;
  scheduler::ClusterOptions cluster;
};

int submit(const GlobalOptions& g, SubmitArgs& a) {
  auto spec = a.file.empty() ? scheduler::parse_sweep(scheduler::embedded_default_sweep(), "<embedded default sweep>")
                             : scheduler::load_sweep_file(a.file);
  if (!spec) return fail(spec.error());
  scheduler::SweepOverrides ov;
  if (!a.out.empty()) ov.output = a.out;
  if (!a.backend.empty()) ov.backend = a.backend;
  if (!a.hardware.empty()) ov.hardware = a.hardware;
  if (!g.suite_dir.empty()) ov.suite_dir = g.suite_dir;
  // Runners run elsewhere (GPU nodes): this machine need not have the sweep's device.
  ov.remote_runners = a.cluster.launcher != "local";
  auto resolved = scheduler::resolve_sweep(*spec, ov);
  if (!resolved) return fail(resolved.error());
  auto say = [](const std::string& line) { fmt::print(stderr, "atrex: {}\n", line); };
  auto manifest = scheduler::submit_sweep(*resolved, a.cluster, say);
  if (!manifest) return fail(manifest.error());
  if (g.json) {
    fmt::print("{}\n", Json{{"schema", "atrex.submit/1"}, {"sweep_id", resolved->sweep_id},
                            {"results", resolved->output.string()}, {"workers", (*manifest)["workers"]}}.dump(2));
  } else {
    fmt::print("submitted sweep {} ({}); results in {}\nfollow it with: atrex sweep status {}\n", resolved->spec.name,
               resolved->sweep_id, resolved->output.string(), resolved->output.string());
  }
  return 0;
}

int status(const GlobalOptions& g, const std::string& dir) {
  auto st = scheduler::sweep_status(dir);
  if (!st) return fail(st.error());
  const Json& m = st->manifest;
  if (g.json) {
    auto q = [](const QueueStats& s) {
      return Json{{"ready", s.ready}, {"leased", s.leased}, {"dead", s.dead}, {"enqueued_total", s.enqueued_total},
                  {"acked_total", s.acked_total}};
    };
    fmt::print("{}\n", Json{{"schema", "atrex.sweep-status/1"}, {"sweep_id", m.value("sweep_id", "")},
                            {"status", m.value("status", "")}, {"operators_done", st->done}, {"operators_total", st->total},
                            {"eval_queue", q(st->eval)}, {"agent_queue", q(st->agent)},
                            {"workers_alive", st->workers_alive}}.dump(2));
    return 0;
  }
  fmt::print("sweep {} ({}): {}\n", m.value("name", ""), m.value("sweep_id", ""), m.value("status", ""));
  fmt::print("  operators finished: {}/{}\n", st->done, st->total);
  fmt::print("  evaluations: {} queued, {} running, {} done, {} dead-lettered (of {} enqueued)\n", st->eval.ready,
             st->eval.leased, st->eval.acked_total, st->eval.dead, st->eval.enqueued_total);
  fmt::print("  agent tasks: {} queued, {} running, {} done, {} dead-lettered\n", st->agent.ready, st->agent.leased,
             st->agent.acked_total, st->agent.dead);
  fmt::print("  workers: {}\n", st->workers_text);
  return 0;
}

int wait(const GlobalOptions& g, const std::string& dir, int timeout_s) {
  install_stop_handlers();
  auto say = [](const std::string& line) { fmt::print(stderr, "atrex: {}\n", line); };
  auto out = scheduler::wait_sweep(dir, std::chrono::seconds(timeout_s), say, &g_stop);
  if (!out) return fail(out.error());
  if (g.json) {
    auto report = read_json_file(out->report_json);
    if (!report) return fail(report.error());
    fmt::print("{}\n", report->dump(2));
    return 0;
  }
  for (const auto& a : out->agents) fmt::print("\nagent {}\n{}", a.agent, scoring::agent_table_text(a));
  fmt::print("\nreports: {} and {}\n", out->report_md.string(), out->report_json.string());
  return 0;
}

}  // namespace

void add_cluster_commands(CLI::App& app, CLI::App& sweep, GlobalOptions& g, int& rc) {
  static SubmitArgs a;
  auto* submit_cmd = sweep.add_subcommand("submit", "Submit a sweep to a cluster: tasks through Redis, workers started "
                                                    "by a launcher (local processes or Slurm job arrays)");
  submit_cmd->add_option("file", a.file, "Sweep file (YAML); without it the embedded default");
  submit_cmd->add_option("--redis", a.cluster.redis_url, "redis://[[user]:password@]host[:port][/db]")->required();
  submit_cmd->add_option("--launcher", a.cluster.launcher, "local or slurm")->capture_default_str();
  submit_cmd->add_option("--runners", a.cluster.runners, "Runner processes (one per GPU)")->capture_default_str();
  submit_cmd->add_option("--agent-workers", a.cluster.agent_workers, "Agent worker processes")->capture_default_str();
  submit_cmd->add_option("--out", a.out, "Results folder (shared by all workers)");
  submit_cmd->add_option("--backend", a.backend, "Override the sweep's backend");
  submit_cmd->add_option("--hardware", a.hardware, "Override the sweep's hardware profile");
  submit_cmd->add_option("--gpu-partition", a.cluster.gpu_partition, "slurm: partition of the runners");
  submit_cmd->add_option("--cpu-partition", a.cluster.cpu_partition, "slurm: partition of the agent workers");
  submit_cmd->add_option("--time", a.cluster.time_limit, "slurm: job time limit")->capture_default_str();
  submit_cmd->add_option("--throttle", a.cluster.array_throttle, "slurm: at most N array tasks at once (%N)");
  submit_cmd->add_flag("--json", g.json, "Machine-readable output");
  submit_cmd->callback([&] { rc = submit(g, a); });

  static std::string dir;
  static int timeout_s = 7 * 24 * 3600;
  auto* status_cmd = sweep.add_subcommand("status", "Progress of a submitted sweep: operators, queues, workers");
  status_cmd->add_option("results", dir, "The sweep's results folder")->required();
  status_cmd->add_flag("--json", g.json, "Machine-readable output (atrex.sweep-status/1)");
  status_cmd->callback([&] { rc = status(g, dir); });
  auto* wait_cmd = sweep.add_subcommand("wait", "Wait for a submitted sweep, then write and print its reports");
  wait_cmd->add_option("results", dir, "The sweep's results folder")->required();
  wait_cmd->add_option("--timeout", timeout_s, "Give up after this many seconds (exit 1)");
  wait_cmd->add_flag("--json", g.json, "Print the atrex.report/1 JSON");
  wait_cmd->callback([&] { rc = wait(g, dir, timeout_s); });
  auto* cancel_cmd = sweep.add_subcommand("cancel", "Stop a submitted sweep's workers");
  cancel_cmd->add_option("results", dir, "The sweep's results folder")->required();
  cancel_cmd->callback([&] {
    auto r = scheduler::cancel_sweep(dir);
    rc = r ? 0 : fail(r.error());
  });
  auto* resume_cmd = sweep.add_subcommand("resume", "Re-enqueue what is neither done nor in flight; restart workers "
                                                    "when none is alive");
  resume_cmd->add_option("results", dir, "The sweep's results folder")->required();
  resume_cmd->callback([&] {
    auto r = scheduler::resume_sweep(dir, [](const std::string& line) { fmt::print(stderr, "atrex: {}\n", line); });
    rc = r ? 0 : fail(r.error());
  });

  static std::string redis_url, sweep_id, name;
  static int device = 0;
  auto* runner = app.add_subcommand("runner", "Runner daemon: evaluates tasks of one sweep from Redis on one GPU "
                                              "(or the CPU); SIGTERM/SIGUSR1 stop it after the current task");
  runner->add_option("--redis", redis_url, "redis://...")->required();
  runner->add_option("--sweep", sweep_id, "Sweep id")->required();
  runner->add_option("--device", device, "GPU index")->capture_default_str();
  runner->add_option("--name", name, "Consumer name (default: runner-<host>-<pid>)");
  runner->callback([&] {
    install_stop_handlers();
    rc = scheduler::run_runner_daemon(redis_url, sweep_id, device, name.empty() ? default_name("runner") : name, g_stop);
  });
  auto* worker = app.add_subcommand("agent-worker", "Agent worker daemon: runs AKA generations of one sweep from Redis");
  worker->add_option("--redis", redis_url, "redis://...")->required();
  worker->add_option("--sweep", sweep_id, "Sweep id")->required();
  worker->add_option("--name", name, "Consumer name (default: agent-worker-<host>-<pid>)");
  worker->callback([&] {
    install_stop_handlers();
    rc = scheduler::run_agent_worker_daemon(redis_url, sweep_id, name.empty() ? default_name("agent-worker") : name,
                                            g_stop);
  });
}

}  // namespace atrex::cli
