// `atrex sweep run [FILE]` (`atrex report DIR` is in cmd_report.cpp).
#include <csignal>
#include <mutex>

#include <fmt/format.h>

#include "atrex/agent/provider_registry.h"
#include "atrex/common/progress.h"
#include "atrex/runner/environment.h"
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

// `atrex sweep plan [FILE]`: the sweep as it would run (omitted fields at their documented
// defaults, the shape rules applied), without running it. Estimated work: per (agent, operator)
// `iterations` quick evaluations on its quick shapes plus one final evaluation on its shapes;
// the time assumes the per-candidate and per-shape costs printed with it (measured orders of
// magnitude of this project's CPU and H200 runs, docs/sweeps.md "Plan"), one runner, no cache.
struct PlanCosts {
  double compile_s;    // one candidate's compile
  double shape_s;      // one shape: correctness seeds + timing
  double agent_turn_s; // one agent iteration's own time (model call, search step)
};

std::string human_duration(double s) {
  if (s < 120) return fmt::format("{:.0f} s", s);
  if (s < 7200) return fmt::format("{:.0f} min", s / 60);
  return fmt::format("{:.1f} h", s / 3600);
}

PlanCosts plan_costs(Backend backend) {
  switch (backend) {
    case Backend::kCpu: return {1.5, 1.0, 0.5};
    case Backend::kCuda:
    case Backend::kHip: return {20.0, 0.8, 0.5};
  }
  return {20.0, 1.0, 0.5};
}

int sweep_plan(const GlobalOptions& g, const SweepArgs& a) {
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
  if (!a.backend.empty()) {
    auto b = parse_backend_choice(a.backend, "--backend");
    if (!b) return fail(b.error());
    ov.backend = *b;
  }
  if (!a.hardware.empty()) ov.hardware = a.hardware;
  if (!g.suite_dir.empty()) ov.suite_dir = g.suite_dir;
  // A plan is for any machine: a cuda sweep is planned on a CPU-only host too.
  ov.remote_runners = true;
  if (spec->hardware == "auto" && !ov.hardware && spec->backend.backend &&
      *spec->backend.backend != Backend::kCpu && !runner::probe_environment().has_gpu()) {
    ov.hardware = "H200-SXM";  // hardware: auto without a GPU here: the plan names its guess
  }
  auto resolved = scheduler::resolve_sweep(*spec, ov);
  if (!resolved) return fail(resolved.error());
  const Manifest& m = resolved->manifest;
  const PlanCosts costs = plan_costs(m.backend);
  int64_t shapes_final = 0, shapes_quick = 0, candidates = 0, iterations = 0;
  Json agents = Json::array(), operators = Json::array();
  for (const auto& op : m.operators) {
    shapes_final += static_cast<int64_t>(op.shapes.size());
    shapes_quick += static_cast<int64_t>(op.quick_shapes.size());
    operators.push_back(
        Json{{"name", op.name}, {"shapes", op.shapes}, {"quick_shapes", op.quick_shapes}});
  }
  const auto n_ops = static_cast<int64_t>(m.operators.size());
  for (const auto& ag : m.agents) {
    iterations += static_cast<int64_t>(ag.iterations) * n_ops;
    candidates += static_cast<int64_t>(ag.iterations + 1) * n_ops;
    agents.push_back(Json{{"name", ag.name},
                          {"provider", ag.provider},
                          {"iterations", ag.iterations},
                          {"patience", ag.patience},
                          {"max_generations", ag.max_generations},
                          {"parallel_generations", ag.parallel_generations}});
  }
  int64_t shape_evals = 0;
  for (const auto& ag : m.agents)
    shape_evals += static_cast<int64_t>(ag.iterations) * shapes_quick + shapes_final;
  const double seconds = static_cast<double>(candidates) * costs.compile_s +
                         static_cast<double>(shape_evals) * costs.shape_s +
                         static_cast<double>(iterations) * costs.agent_turn_s;
  if (g.json) {
    fmt::print("{}\n", Json{{"schema", "atrex.sweep-plan/1"},
                            {"sweep_id", m.sweep_id},
                            {"name", m.name},
                            {"backend", backend_name(m.backend)},
                            {"hardware", m.hardware.name},
                            {"output", m.output},
                            {"agents", agents},
                            {"operators", operators},
                            {"evaluation", to_json(resolved->spec.evaluation)},
                            {"estimate",
                             Json{{"candidates", candidates},
                                  {"shape_evaluations", shape_evals},
                                  {"seconds", seconds},
                                  {"assumed_compile_s", costs.compile_s},
                                  {"assumed_shape_s", costs.shape_s},
                                  {"assumed_agent_turn_s", costs.agent_turn_s}}}}
                           .dump(2));
    return 0;
  }
  fmt::print("sweep {} ({}), id {}: {} agent(s) x {} operator(s) x {} shape(s); backend {}, "
             "hardware {}; results in {}\n",
             m.name, resolved->spec.source, m.sweep_id, m.agents.size(), m.operators.size(),
             shapes_final, backend_name(m.backend), m.hardware.name, m.output);
  for (const auto& ag : m.agents) {
    fmt::print("  agent {:<16} provider {:<8} iterations {:>3}, patience {}, generations <= {}, "
               "parallel {}\n",
               ag.name, ag.provider, ag.iterations, ag.patience, ag.max_generations,
               ag.parallel_generations);
  }
  for (const auto& op : m.operators) {
    fmt::print("  operator {:<30} shapes {:<24} quick {}\n", op.name,
               fmt::format("{}", fmt::join(op.shapes, ",")), fmt::join(op.quick_shapes, ","));
  }
  fmt::print("evaluation: {} seeds, timing {} (quick: {} seeds), shape limit {:.0f} s\n",
             resolved->spec.evaluation.seeds,
             timing_mode_name(resolved->spec.evaluation.timing_mode),
             resolved->spec.quick_evaluation.seeds, resolved->spec.evaluation.shape_timeout_s);
  fmt::print("estimate: {} candidate(s) compiled, {} shape evaluation(s); about {} on one "
             "runner (assumed {:.1f} s a compile, {:.1f} s a shape, {:.1f} s an agent turn; no "
             "compile cache; not run)\n",
             candidates, shape_evals, human_duration(seconds), costs.compile_s, costs.shape_s,
             costs.agent_turn_s);
  return 0;
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
  run->add_option("--agent-workers", a.agent_workers, "Agent worker threads (default: automatic)")
      ->check(CLI::Range(0, 1024));
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
  auto* plan = sweep->add_subcommand(
      "plan",
      "Print the resolved plan of a sweep file (agents x operators x shapes, defaults filled "
      "in, estimated evaluations and time) without running it\n  example: atrex sweep plan "
      "sweeps/local-default.yaml");
  plan->add_option("file", a.file, "Sweep file (YAML, atrex.sweep/1; default: the embedded one)");
  plan->add_option("--backend", a.backend, "Override the sweep's backend: auto, cpu or cuda");
  plan->add_option("--hardware", a.hardware, "Override the sweep's hardware profile");
  plan->add_option("--kernels-from", a.kernels_from,
                   "As for `sweep run`: add the agent `best` from this results folder")
      ->check(CLI::ExistingDirectory);
  plan->add_flag("--json", g.json, "Machine-readable output (atrex.sweep-plan/1)");
  plan->callback([&] { rc = sweep_plan(g, a); });
  add_cluster_commands(*sweep, g, rc);
}

}  // namespace atrex::cli
