// `atrex bench timing` (calibration of the GPU timer) and `atrex bench eval` (cost of a full
// evaluation of one operator, cold and warm compile cache). docs/benchmarks.md.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>

#include <unistd.h>

#include <fmt/format.h>

#include "atrex/agent/templates.h"
#include "atrex/common/hash.h"
#include "atrex/common/json_io.h"
#include "atrex/common/sample_stats.h"
#include "atrex/problems/shape_select.h"
#include "atrex/runner/evaluator.h"
#include "atrex/runner/gpu_measure.h"
#include "cli.h"

namespace atrex::cli {
namespace {

namespace fs = std::filesystem;

// The operator's first built-in template for `backend`, at its default parameters.
Result<CandidateRef> default_candidate(const std::string& op, Backend backend) {
  ATREX_ASSIGN_OR_RETURN(auto catalog, agent::TemplateCatalog::embedded());
  const auto found = catalog.find(op, backend);
  if (found.empty()) {
    return not_found(
        fmt::format("no built-in {} template for {}; pass a candidate file with --candidate",
                    backend_name(backend), op));
  }
  CandidateRef c;
  c.source = agent::render(*found.front(), agent::default_params(*found.front()));
  c.sha256 = sha256_hex(c.source);
  c.backend = backend;
  c.agent = "bench";
  c.file_name = fs::path(found.front()->path).filename().string();
  return c;
}

Result<CandidateRef> candidate_from(const std::string& file, const std::string& op,
                                    Backend backend) {
  if (file.empty()) return default_candidate(op, backend);
  ATREX_ASSIGN_OR_RETURN(auto source, read_text_file(file));
  CandidateRef c;
  c.source = source;
  c.sha256 = sha256_hex(source);
  c.backend = backend;
  c.agent = "bench";
  c.file_name = fs::path(file).filename().string();
  return c;
}

struct TimingArgs {
  int device = 0;
  bool no_sandbox = false;
  int rounds = 3;
  std::string candidate;
  std::string shapes = "smallest:3";
};

// Calibration: the child's empty/copy kernels, then the rms_norm tiny shapes through the real
// evaluation path (a fresh child per round), eager against graph timing.
int run_bench_timing(const GlobalOptions& g, const TimingArgs& a) {
  auto suite = load_suite(g);
  if (!suite) return fail(suite.error());
  fmt::print(stderr, "calibrating the GPU timer on device {} (about a minute)...\n", a.device);
  auto cal = runner::run_cuda_bench("timing", a.device);
  if (!cal) return fail(cal.error());
  const std::string op = "rms_norm";
  const auto* info = suite->find(op);
  const auto* def = problems::find_native_operator(op);
  if (!info || !def) return fail(Error{ErrorCode::kNotFound, "rms_norm is missing from the suite"});
  auto ids = problems::select_shapes(*info, *def, a.shapes);
  if (!ids) return fail(ids.error());
  auto hw = runner::choose_hardware("auto", Backend::kCuda, *suite);
  if (!hw) return fail(hw.error());
  auto cand = candidate_from(a.candidate, op, Backend::kCuda);
  if (!cand) return fail(cand.error());
  runner::EvaluatorOptions o;
  o.suite = &*suite;
  o.hardware = *hw;
  o.device_index = a.device;
  o.sandbox = a.no_sandbox ? SandboxMode::kNone : SandboxMode::kBwrap;
  if (auto ready = runner::sandbox_ready(o.sandbox); !ready) return fail(ready.error());
  runner::Evaluator ev(o);
  // medians[mode][shape] = per-round medians
  std::map<std::string, std::map<std::string, std::vector<double>>> medians;
  std::map<std::string, double> roofline_us;
  std::map<std::string, std::string> methods;
  for (const std::string mode : {"eager", "graph", "cupti"}) {
    for (int r = 0; r < a.rounds; ++r) {
      EvalTask t;
      t.candidate = *cand;
      t.task_id = fmt::format("bench-timing-{}-{}", mode, r);
      t.operator_name = op;
      t.shape_ids = *ids;
      t.hardware = hw->name;
      t.purpose = EvalPurpose::kBench;
      t.settings.seeds = 1;
      t.settings.timing_mode = *parse_timing_mode(mode);
      t.settings.min_iterations = 100;
      t.settings.max_iterations = 2000;
      t.settings.min_time_s = 0.05;
      auto recs = ev.evaluate(t);
      if (!recs) return fail(recs.error());
      for (const auto& rec : *recs) {
        if (rec.status != EvalStatus::kOk || !rec.timing) {
          return fail(Error{ErrorCode::kInternal,
                            fmt::format("rms_norm shape {} ({} timing): {} {}", rec.shape_id, mode,
                                        eval_status_name(rec.status), rec.error)});
        }
        medians[mode][rec.shape_id].push_back(rec.timing->time_us_median);
        roofline_us[rec.shape_id] = rec.t_roofline_us;
        methods[mode] = rec.timing->method;
      }
    }
  }
  if (g.json) {
    Json rows = Json::array();
    for (const auto& id : *ids) {
      rows.push_back(Json{{"shape_id", id},
                          {"t_roofline_us", roofline_us[id]},
                          {"eager_round_medians_us", medians["eager"][id]},
                          {"graph_round_medians_us", medians["graph"][id]},
                          {"cupti_round_medians_us", medians["cupti"][id]},
                          {"eager_method", methods["eager"]},
                          {"graph_method", methods["graph"]},
                          {"cupti_method", methods["cupti"]}});
    }
    fmt::print(
        "{}\n",
        Json{{"schema", "atrex.bench-timing/1"}, {"calibration", *cal}, {"rms_norm", rows}}.dump(
            2));
    return 0;
  }
  const Json& dev = (*cal)["device"];
  const Json clocks = cal->value("clocks_before", Json::object());
  fmt::print(
      "timer calibration on {} (SM {} MHz, memory {} MHz, clocks as found; {} SMs, L2 {} MiB)\n",
      dev.value("name", "?"), clocks.value("sm_mhz", 0), clocks.value("mem_mhz", 0),
      dev.value("sm_count", 0), dev.value("l2_bytes", 0) >> 20);
  fmt::print("{:<34} {:<27} {:>11} {:>9}  {}\n", "kernel", "method", "median us", "spread", "note");
  const double b2b = cal->value("empty_kernel_back_to_back_us", 0.0);
  for (const auto& row : (*cal)["empty_kernel"]) {
    const double m = row["median_us"].get<double>();
    fmt::print("{:<34} {:<27} {:>11.3f} {:>8.2f}%  harness overhead (target <= 1 us): {:.3f} us\n",
               "empty kernel <<<1,32>>>", row["method"].get<std::string>(), m,
               100 * row["spread"].get<double>(), m);
  }
  fmt::print(
      "{:<34} {:<27} {:>11.3f} {:>9}  device time of the kernel alone (1000 back to back in a "
      "graph)\n",
      "empty kernel <<<1,32>>>", "graph, back to back", b2b, "");
  const double copy_bytes = cal->value("copy_kernel_bytes", 0.0);
  const double memcpy_bw = cal->value("memcpy_copy_bytes_per_s", 0.0);
  for (const auto& row : (*cal)["copy_kernel"]) {
    const double m = row["median_us"].get<double>();
    const double bw = 2 * copy_bytes / (m * 1e-6);
    fmt::print(
        "{:<34} {:<27} {:>11.1f} {:>8.2f}%  {:.2f} TB/s = {:.1f}% of cudaMemcpy's {:.2f} TB/s "
        "(target spread <= 1%)\n",
        fmt::format("copy kernel {:.0f} GiB", copy_bytes / (1 << 30)),
        row["method"].get<std::string>(), m, 100 * row["spread"].get<double>(), bw / 1e12,
        100 * bw / memcpy_bw, memcpy_bw / 1e12);
  }
  for (const auto& id : *ids) {
    for (const std::string mode : {"eager", "graph", "cupti"}) {
      const auto& v = medians[mode][id];
      fmt::print(
          "{:<34} {:<27} {:>11.3f} {:>8.2f}%  T_roofline {:.3f} us ({} rounds, fresh child each; "
          "target spread "
          "<= 3% below 10 us)\n",
          fmt::format("rms_norm shape {}", id), methods[mode], stats::median(v),
          100 * stats::relative_spread(v), roofline_us[id], v.size());
    }
  }
  const Json after = cal->value("clocks_after", Json::object());
  fmt::print("clocks after: SM {} MHz, {} C, {} W, throttle reasons {}\n", after.value("sm_mhz", 0),
             after.value("temperature_c", 0), after.value("power_w", 0.0),
             after.value("throttle", Json::array()).dump());
  return 0;
}

struct EvalBenchArgs {
  bool no_sandbox = false;
  std::string op = "fused_add_rms_norm";
  std::string candidate;
  std::string backend = "auto";
  std::string shapes = "all";
  int seeds = 5;
  int device = 0;
};

// Cost of a full evaluation (every shape, 5 seeds, performance gate) with a cold compile cache
// (a fresh folder) and again warm.
int run_bench_eval(const GlobalOptions& g, const EvalBenchArgs& a) {
  auto suite = load_suite(g);
  if (!suite) return fail(suite.error());
  const auto* info = suite->find(a.op);
  const auto* def = problems::find_native_operator(a.op);
  if (!info || !def)
    return fail(
        Error{ErrorCode::kNotFound, "no native operator " + a.op + " (see `atrex problems list`)"});
  auto choice = parse_backend_choice(a.backend, "--backend");
  if (!choice) return fail(choice.error());
  const Backend backend = runner::backend_for_machine(*choice);
  auto ids = problems::select_shapes(*info, *def, a.shapes);
  if (!ids) return fail(ids.error());
  auto hw = runner::choose_hardware("auto", backend, *suite);
  if (!hw) return fail(hw.error());
  auto cand = candidate_from(a.candidate, a.op, backend);
  if (!cand) return fail(cand.error());
  const fs::path cache = fs::temp_directory_path() / fmt::format("atrex-bench-eval-{}", ::getpid());
  std::error_code ec;
  fs::remove_all(cache, ec);
  Json runs = Json::array();
  if (!g.json) {
    fmt::print(
        "full evaluation of {} ({} shapes, {} seeds, performance gate) on the {} backend, "
        "candidate {}, sandbox {}\n",
        a.op, ids->size(), a.seeds, backend_name(backend), cand->file_name,
        a.no_sandbox ? "none" : "bwrap");
    fmt::print("{:<6} {:>9} {:>10} {:>12} {:>9}  {}\n", "cache", "wall s", "compile s",
               "per shape s", "ok", "per 15 shapes");
  }
  for (const std::string phase : {"cold", "warm"}) {
    runner::EvaluatorOptions o;
    o.suite = &*suite;
    o.hardware = *hw;
    o.cache_dir = cache;
    o.device_index = a.device;
    o.sandbox = a.no_sandbox ? SandboxMode::kNone : SandboxMode::kBwrap;
    if (auto ready = runner::sandbox_ready(o.sandbox); !ready) return fail(ready.error());
    runner::Evaluator ev(o);
    EvalTask t;
    t.candidate = *cand;
    t.task_id = "bench-eval-" + phase;
    t.operator_name = a.op;
    t.shape_ids = *ids;
    t.hardware = hw->name;
    t.purpose = EvalPurpose::kBench;
    t.settings.seeds = a.seeds;
    const auto t0 = std::chrono::steady_clock::now();
    // The compile gate on its own first, to split its cost out; evaluate() then hits the cache.
    const std::string arch = runner::default_arch(backend);
    auto compiled = ev.compile_cache().compile(t.candidate, arch, t.settings.compile_timeout_s);
    if (!compiled) return fail(compiled.error());
    if (!compiled->ok)
      return fail(
          Error{ErrorCode::kInvalidInput, "the candidate does not compile:\n" + compiled->log});
    const double compile_s = compiled->wall_s;
    auto recs = ev.evaluate(t);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!recs) return fail(recs.error());
    int ok = 0;
    std::map<std::string, double> phases;  // summed over shapes; "process" = child start/exit
    for (const auto& r : *recs) {
      ok += r.status == EvalStatus::kOk;
      double inside = 0;
      for (const auto& [k, v] : r.phases_s.items()) {
        phases[k] += v.get<double>();
        inside += v.get<double>();
      }
      phases["process"] += std::max(0.0, r.wall_s - inside);
    }
    const double per_shape = wall / static_cast<double>(recs->size());
    runs.push_back(Json{{"cache", phase},
                        {"wall_s", wall},
                        {"compile_s", compile_s},
                        {"shapes", recs->size()},
                        {"ok", ok},
                        {"phases_s", phases}});
    if (!g.json) {
      fmt::print(
          "{:<6} {:>9.2f} {:>10.2f} {:>12.3f} {:>5}/{:<3}  {:.2f} s (target: {} s on an H200)\n",
          phase, wall, compile_s, per_shape, ok, recs->size(), per_shape * 15,
          phase == "cold" ? 15 : 5);
      std::string split;
      for (const auto& [k, v] : phases)
        split += fmt::format("{}{} {:.2f} s", split.empty() ? "" : ", ", k, v);
      fmt::print("       where the shapes' time went: {}\n", split);
    }
  }
  fs::remove_all(cache, ec);
  if (g.json) {
    fmt::print("{}\n", Json{{"schema", "atrex.bench-eval/1"},
                            {"operator", a.op},
                            {"sandbox", a.no_sandbox ? "none" : "bwrap"},
                            {"backend", backend},
                            {"candidate", cand->file_name},
                            {"runs", runs}}
                           .dump(2));
  }
  return 0;
}

}  // namespace

void add_gpu_bench_commands(CLI::App& bench, GlobalOptions& g, int& rc) {
  static TimingArgs t;
  auto* tc = bench.add_subcommand("timing",
                                  "Calibrate the GPU timer (needs a GPU): harness overhead on an "
                                  "empty kernel, a 1 GiB copy kernel "
                                  "against cudaMemcpy's bandwidth, and rms_norm's tiny shapes, "
                                  "eager against CUDA-graph timing, with the "
                                  "run-to-run spread of each");
  tc->add_option("--device", t.device, "GPU index")
      ->check(CLI::Range(0, 1023))->capture_default_str();
  tc->add_option("--rounds", t.rounds, "Evaluation rounds per timing mode (a fresh child each)")
      ->capture_default_str()
      ->check(CLI::Range(1, 50));
  tc->add_option("--candidate", t.candidate,
                 "rms_norm CUDA candidate to time (default: the built-in template)");
  tc->add_option("--shapes", t.shapes, "rms_norm shapes (as `atrex eval --shapes`)")
      ->capture_default_str();
  add_no_sandbox_flag(*tc, t.no_sandbox);
  tc->add_flag("--json", g.json, "Machine-readable output (atrex.bench-timing/1)");
  tc->callback([&] { rc = run_bench_timing(g, t); });

  static EvalBenchArgs e;
  auto* ec = bench.add_subcommand("eval",
                                  "Cost of a full evaluation of one operator (every shape, all "
                                  "seeds, performance gate), with a cold "
                                  "compile cache and again warm");
  ec->add_option("--operator", e.op, "Operator")->capture_default_str();
  ec->add_option("--candidate", e.candidate,
                 "Candidate file (default: the operator's first built-in template)");
  ec->add_option("--backend", e.backend, "auto, cuda or cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  ec->add_option("--shapes", e.shapes, "Shapes (as `atrex eval --shapes`)")->capture_default_str();
  ec->add_option("--seeds", e.seeds, "Correctness seeds per shape")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  ec->add_option("--device", e.device, "GPU index")
      ->check(CLI::Range(0, 1023))->capture_default_str();
  add_no_sandbox_flag(*ec, e.no_sandbox);
  ec->add_flag("--json", g.json, "Machine-readable output (atrex.bench-eval/1)");
  ec->callback([&] { rc = run_bench_eval(g, e); });
}

}  // namespace atrex::cli
