// `atrex sweep run [FILE]` (`atrex report DIR` is in cmd_report.cpp).
#include <csignal>
#include <mutex>

#include <fmt/format.h>

#include "atrex/agent/provider_registry.h"
#include "atrex/common/progress.h"
#include "atrex/runner/evaluator.h"
#include "atrex/scheduler/local_sweep.h"
#include "atrex/scoring/report.h"
#include "cli.h"

namespace atrex::cli {
namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted = true; }

struct SweepArgs {
  std::string file;
  std::string out;
  std::string backend;
  std::string hardware;
  int agent_workers = 0;
  std::string metrics_listen;
  bool no_sandbox = false;
  std::string kernels_from;
};

void print_scores(const std::vector<scoring::AgentScore>& agents) {
  for (const auto& a : agents) {
    fmt::print("\nagent {}\n{}", a.agent, scoring::agent_table_text(a));
  }
}

}  // namespace

// No (agent, operator) got a final evaluation (every agent task ended in an error or without a
// correct candidate): the sweep ran, but measured nothing, and says so by its exit code.
bool every_agent_task_failed(const std::vector<scoring::AgentScore>& agents) {
  bool attempted = false;
  for (const auto& a : agents) {
    for (const auto& o : a.operators) {
      if (o.shapes_evaluated > 0) return false;
      attempted |= o.attempted;
    }
  }
  if (attempted) {
    fmt::print(stderr, "atrex: every agent task of the sweep failed: no (agent, operator) has a "
                       "final evaluation (the reports say why); exit code 1\n");
  }
  return attempted;
}

namespace {

int sweep_run(const GlobalOptions& g, const SweepArgs& a) {
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
  scheduler::SweepOverrides ov;
  if (!a.out.empty()) ov.output = a.out;
  if (!a.backend.empty()) {
    auto b = parse_backend_choice(a.backend, "--backend");
    if (!b) return fail(b.error());
    ov.backend = *b;
  }
  if (!a.hardware.empty()) ov.hardware = a.hardware;
  if (!g.suite_dir.empty()) ov.suite_dir = g.suite_dir;
  auto listen = metrics_listen_flag(a.metrics_listen);
  if (!listen) return fail(listen.error());
  auto resolved = scheduler::resolve_sweep(*spec, ov);
  if (!resolved) return fail(resolved.error());
  std::unique_ptr<metrics::Exposition> exposition;
  if (*listen) {
    auto e = metrics::start_exposition(**listen, metrics::metrics_targets_dir(resolved->output()),
                                       resolved->spec.name, "sweep", "sweep-run");
    if (!e) return fail(e.error());
    exposition = std::move(*e);
    fmt::print(stderr, "atrex: metrics at http://{}/metrics\n", exposition->server->target());
  }
  std::signal(SIGINT, on_sigint);
  std::signal(SIGTERM, on_sigint);
  scheduler::LocalSweepOptions opt;
  opt.agent_workers = a.agent_workers;
  opt.sandbox = a.no_sandbox ? SandboxMode::kNone : SandboxMode::kBwrap;
  if (auto ready = runner::sandbox_ready(opt.sandbox); !ready) return fail(ready.error());
  opt.stop = &g_interrupted;
  opt.metrics = exposition ? exposition->registry.get() : nullptr;
  ProgressOptions po;
  po.what = "sweep " + resolved->spec.name;
  po.unit = "operators";
  po.terminal = progress_to_terminal();
  po.every = progress_every(std::chrono::seconds(30));
  ProgressMeter meter(po, 0);
  std::mutex meter_mu;  // the follower and the worker threads both report
  opt.progress = [&](const std::string& line) {
    std::lock_guard lock(meter_mu);
    meter.print(fmt::format("atrex: {}", line));
  };
  opt.progress_counts = [&](int done, int total) {
    std::lock_guard lock(meter_mu);
    meter.set_total(total);
    meter.update(done);
  };
  auto outcome = scheduler::run_local_sweep(*resolved, opt);
  meter.finish();
  if (!outcome) return fail(outcome.error());
  if (outcome->interrupted) {
    fmt::print(stderr,
               "atrex: interrupted; everything evaluated so far is in {}; run the same command "
               "again to resume\n",
               resolved->output().string());
    return 130;
  }
  if (g.json) {
    auto report = read_json_file(outcome->report_json);
    if (!report) return fail(report.error());
    fmt::print("{}\n", report->dump(2));
    return every_agent_task_failed(outcome->agents) ? 1 : 0;
  }
  print_scores(outcome->agents);
  fmt::print("\nreports: {} and {}\n", outcome->report_md.string(), outcome->report_json.string());
  return every_agent_task_failed(outcome->agents) ? 1 : 0;
}

}  // namespace

void add_sweep_commands(CLI::App& app, GlobalOptions& g, int& rc) {
  static SweepArgs a;
  auto* sweep = app.add_subcommand("sweep", "Sweeps: agents x operators x shapes");
  sweep->require_subcommand(1);
  auto* run =
      sweep->add_subcommand("run",
                            "Run a whole sweep on this machine (in-process queue, local runner); "
                            "without FILE, the embedded default sweep");
  run->add_option("file", a.file, "Sweep file (YAML, atrex.sweep/1)");
  run->add_option("--out", a.out, "Results folder (default: the sweep file's `output`)");
  run->add_option("--backend", a.backend, "Override the sweep's backend: auto, cpu or cuda");
  run->add_option("--hardware", a.hardware, "Override the sweep's hardware profile");
  run->add_option("--agent-workers", a.agent_workers, "Agent worker threads (default: automatic)");
  run->add_option("--metrics-listen", a.metrics_listen,
                  "Serve Prometheus metrics at http://ADDR:PORT/metrics while the sweep runs (port "
                  "0: any free port; "
                  "its file_sd target goes to <results>/metrics/targets/)");
  run->add_option("--kernels-from", a.kernels_from,
                  "Add the agent `best` (provider fixed): the best kernel per operator of the "
                  "sweep in this results folder, re-measured (sweeps/nightly.yaml)")
      ->check(CLI::ExistingDirectory);
  add_no_sandbox_flag(*run, a.no_sandbox);
  run->add_flag("--json", g.json, "Print the atrex.report/1 JSON at the end");
  run->callback([&] { rc = sweep_run(g, a); });
  add_cluster_commands(*sweep, g, rc);
}

}  // namespace atrex::cli
