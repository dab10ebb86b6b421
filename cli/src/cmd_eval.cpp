// `atrex eval FILE --operator OP`: the three gates for one candidate on this machine.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "atrex/common/hash.h"
#include "atrex/problems/hardware.h"
#include "atrex/problems/operator.h"
#include "atrex/problems/shape_select.h"
#include "atrex/runner/evaluator.h"
#include "atrex/runner/host_measure.h"
#include "atrex/scoring/aggregate.h"
#include "cli.h"

namespace atrex::cli {
namespace {
namespace fs = std::filesystem;

std::atomic<bool> g_eval_stop{false};
std::atomic<int> g_eval_signal{0};

// SIGINT and SIGTERM stop the evaluation after the shape in progress (the evaluator checks
// between shapes and tells the child through its stop pipe): both are blocked in every thread,
// so the evaluation children inherit them blocked and a Ctrl-C at the terminal, which reaches
// the whole foreground process group, does not kill the child mid-shape; one thread takes them
// with sigwait. What finished is printed and written to --out, and the exit code is 128 + the
// signal (130, 143).
void stop_after_the_current_shape_on_signals() {
  static sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([] {
    for (int sig = 0;;) {
      if (sigwait(&set, &sig) != 0) continue;
      if (g_eval_signal.exchange(sig) == 0) {
        fmt::print(stderr,
                   "atrex: {}: stopping after the shape in progress; what is done will be "
                   "printed\n",
                   sig == SIGINT ? "SIGINT" : "SIGTERM");
      }
      g_eval_stop = true;
    }
  }).detach();
}

// `--out`: a file path. A folder (or a path whose parent is a file) is bad input, found before
// anything runs.
Result<void> check_out_file(const std::string& out) {
  if (out.empty()) return ok();
  std::error_code ec;
  const fs::path p(out);
  if (fs::is_directory(p, ec)) {
    return invalid_input(fmt::format(
        "--out {}: is a folder; expected the path of a file for the atrex.eval/1 records "
        "(e.g. {}/records.jsonl)",
        out, out));
  }
  for (fs::path parent = p.parent_path(); !parent.empty(); parent = parent.parent_path()) {
    if (fs::exists(parent, ec)) {
      if (!fs::is_directory(parent, ec))
        return invalid_input(fmt::format("--out {}: {} is a file, not a folder", out,
                                         parent.string()));
      break;
    }
    if (parent == parent.parent_path()) break;
  }
  return ok();
}

struct EvalArgs {
  std::string file;
  std::string op;
  std::string backend = "auto";
  std::string shapes = "all";
  std::string hardware = "auto";
  int seeds = 5;
  std::string timing_mode = "auto";
  bool no_perf = false;
  double timeout_s = 180;
  std::string out;
  std::string roofline = "released";
  int unseen_shapes = 2;
  bool no_range_probe = false;
  bool no_edge_cases = false;
  bool no_sandbox = false;
};

// The cause of a failed shape, first and short (the full text is in the record): the signal that
// killed the child, the compiler's first `error:` line, the judge's finding without its
// "seed N, call M: " context, and the first line of anything else.
std::string note_of(const EvalRecord& r) {
  const std::string& e = r.error;
  if (e.empty()) return "";
  std::string note;
  static const std::regex signal(R"(\(SIG[A-Z0-9]+\))");
  std::smatch m;
  if (const size_t at = e.find(": error: "); r.status == EvalStatus::kCompileError &&
                                              at != std::string::npos) {
    const size_t start = e.rfind('\n', at);
    const size_t end = e.find('\n', at);
    note = e.substr(start == std::string::npos ? 0 : start + 1,
                    end == std::string::npos ? std::string::npos
                                             : end - (start == std::string::npos ? 0 : start + 1));
    // The candidate's path in the compile folder says nothing: its file name is kept.
    if (const size_t slash = note.rfind('/', note.find(':')); slash != std::string::npos)
      note = note.substr(slash + 1);
  } else if (r.status == EvalStatus::kCrashed && std::regex_search(e, m, signal)) {
    std::string rest = e.substr(0, static_cast<size_t>(m.position(0))) +
                       e.substr(static_cast<size_t>(m.position(0) + m.length(0)));
    note = m[0].str().substr(1, m[0].length() - 2) + ": " + rest;
  } else if (const size_t mod = e.find("modified its input"); mod != std::string::npos) {
    note = e.substr(mod);
  } else {
    note = e;
  }
  if (const size_t nl = note.find('\n'); nl != std::string::npos) note = note.substr(0, nl);
  if (note.size() > 110) note = note.substr(0, 107) + "...";
  return note;
}

void print_table(const std::vector<EvalRecord>& recs) {
  fmt::print("{:>5}  {:<13} {:>12} {:>9} {:>13} {:>7}  {}\n", "shape", "status", "time us",
             "IQR us", "T_roofline us", "S_j", "note");
  for (const auto& r : recs) {
    std::string note = note_of(r);
    if (r.above_roofline)
      note = "faster than the roofline: check the profile or the timing; " + note;
    if (!r.low_signal_outputs.empty()) note += " (low-signal outputs judged relatively)";
    fmt::print("{:>5}  {:<13} {:>12} {:>9} {:>13.4g} {:>7}  {}\n", r.shape_id,
               eval_status_name(r.status),
               r.timing ? fmt::format("{:.3f}", r.timing->time_us_median) : "-",
               r.timing ? fmt::format("{:.3f}", r.timing->time_us_iqr) : "-", r.t_roofline_us,
               r.s_j ? fmt::format("{:.4f}", *r.s_j) : "-", note);
  }
}

// What the reward-hack defenses checked (docs/evaluation.md): the unseen shapes (the same list
// in every record of the task), the range probe, and kernels that never ran.
void print_defenses(const std::vector<EvalRecord>& recs, const scoring::OperatorScore& os) {
  if (recs.empty()) return;
  for (const auto& u : recs.front().unseen_shapes) {
    fmt::print("unseen shape {}: {}\n", u.shape, eval_status_name(u.status));
  }
  std::string probed;
  for (const auto& r : recs) {
    if (!r.range_probe.empty()) probed = r.range_probe;
  }
  if (!probed.empty()) fmt::print("range probe: {}\n", probed);
  std::string edge;
  for (const auto& r : recs) {
    if (!r.edge_case.empty()) edge = r.edge_case;
  }
  if (!edge.empty()) fmt::print("edge cases: {}\n", edge);
  if (!os.unlaunched_kernels.empty()) {
    fmt::print("kernels defined but launched on none of the timed shapes: {}\n",
               fmt::join(os.unlaunched_kernels, ", "));
  }
}

int run_eval(const GlobalOptions& g, const EvalArgs& a) {
  if (auto out = check_out_file(a.out); !out) return fail(out.error());
  // First, so that every thread and child process started from here on has them blocked.
  stop_after_the_current_shape_on_signals();
  auto source = read_text_file(a.file);
  if (!source) return fail(source.error());
  auto backend = backend_for(a.backend, a.file);
  if (!backend) return fail(backend.error());
  auto suite = load_suite(g);
  if (!suite) return fail(suite.error());
  auto op = suite->require(a.op);
  if (!op) return fail(op.error());
  auto def = problems::require_native_operator(a.op);
  if (!def) return fail(def.error());
  auto ids = problems::select_shapes(**op, **def, a.shapes);
  if (!ids) return fail(ids.error());
  auto hw = runner::choose_hardware(a.hardware, *backend, *suite);
  if (!hw) return fail(hw.error());
  EvalTask t;
  t.candidate.source = *source;
  t.candidate.sha256 = sha256_hex(*source);
  t.candidate.backend = *backend;
  t.candidate.agent = "manual";
  t.candidate.file_name = fs::path(a.file).filename().string();
  t.task_id = "manual-" + t.candidate.sha256.substr(0, 16);
  t.operator_name = a.op;
  t.shape_ids = *ids;
  t.hardware = hw->name;
  t.purpose = EvalPurpose::kManual;
  t.settings.seeds = a.seeds;
  t.settings.performance = !a.no_perf;
  t.settings.shape_timeout_s = a.timeout_s;
  t.settings.roofline =
      a.roofline == "analytic" ? RooflineSource::kAnalytic : RooflineSource::kReleased;
  auto mode = parse_timing_mode(a.timing_mode);  // CLI11 checked the spelling
  ATREX_ASSERT(mode.has_value());
  t.settings.timing_mode = *mode;
  t.settings.unseen_shapes = a.unseen_shapes;
  t.settings.range_probe = !a.no_range_probe;
  t.settings.edge_cases = !a.no_edge_cases;
  runner::EvaluatorOptions o;
  o.suite = &*suite;
  o.hardware = *hw;
  o.sandbox = a.no_sandbox ? SandboxMode::kNone : SandboxMode::kBwrap;
  o.stop = &g_eval_stop;
  if (auto ready = runner::sandbox_ready(o.sandbox); !ready) return fail(ready.error());
  runner::Evaluator ev(o);
  // Said before the records (stdout may be JSON): every shape will be `rejected`.
  const auto available = runner::backend_available(*backend);
  // Printed now (stdout may be JSON); its exit code is returned after the records.
  if (!available) (void)fail(available.error());
  if (!g.json) {
    fmt::print("evaluating {} ({}) on {} shape(s) of {}; hardware profile {}\n", a.file,
               backend_name(*backend), ids->size(), a.op, hw->name);
  }
  std::vector<EvalRecord> done;  // what finished, kept when a signal stops the evaluation
  auto recs = ev.evaluate(t, [&](const EvalRecord& r) {
    done.push_back(r);
    if (!g.json) fmt::print(stderr, "  shape {:>4}: {}\n", r.shape_id, eval_status_name(r.status));
  });
  const int stopped_by = g_eval_signal.load();
  if (!recs && stopped_by == 0) return fail(recs.error());
  if (!recs) {
    fmt::print(stderr, "atrex: {}\n", recs.error().message);
    recs = std::move(done);
  }
  if (!a.out.empty()) {
    std::string lines;
    for (const auto& r : *recs) lines += to_json(r).dump() + "\n";
    if (auto w = write_text_file_atomic(a.out, lines); !w) return fail(w.error());
  }
  if (stopped_by != 0) {
    // The gates of the shapes that finished are valid; the rest were not evaluated.
    if (!g.json) {
      fmt::print("interrupted by {}: {} of {} shape(s) evaluated{}\n",
                 stopped_by == SIGINT ? "SIGINT" : "SIGTERM", recs->size(), ids->size(),
                 a.out.empty() ? "" : fmt::format("; records in {}", a.out));
    }
  }
  auto score = scoring::score_agent(*suite, "manual", *recs);
  const auto& os = *std::find_if(score.operators.begin(), score.operators.end(),
                                 [&](auto& x) { return x.name == a.op; });
  if (g.json) {
    Json arr = Json::array();
    for (const auto& r : *recs) arr.push_back(to_json(r));
    fmt::print("{}\n", Json{{"schema", "atrex.eval-summary/1"},
                            {"operator", a.op},
                            {"interrupted", stopped_by == 0 ? ""
                                            : stopped_by == SIGINT ? "SIGINT"
                                                                   : "SIGTERM"},
                            {"shapes_requested", ids->size()},
                            {"s_i", os.s_i},
                            {"shapes_correct", os.shapes_correct},
                            {"shapes_evaluated", os.shapes_evaluated},
                            {"records", arr}}
                           .dump(2));
  } else {
    print_table(*recs);
    print_defenses(*recs, os);
    fmt::print("S_i({}) = {:.4f}  (median S_j over {} of {} correct shapes; device {})\n", a.op,
               os.s_i, os.shapes_correct, os.shapes_evaluated,
               recs->empty() ? "" : recs->front().device);
  }
  if (stopped_by != 0) return 128 + stopped_by;
  // With a named profile the shapes were recorded `rejected` (and written to --out); the exit
  // code still says that this machine cannot run the backend, not that the candidate failed.
  if (!available) return exit_code_for(available.error());
  // Exit code from the gates themselves, so that --no-perf (no S_j) still reports correctness.
  const bool all_ok = std::all_of(recs->begin(), recs->end(),
                                  [](const EvalRecord& r) { return r.status == EvalStatus::kOk; });
  return all_ok && !recs->empty() ? 0 : 1;
}

}  // namespace

Result<Backend> backend_for(const std::string& flag, const std::string& file) {
  ATREX_ASSIGN_OR_RETURN(BackendChoice choice, parse_backend_choice(flag, "--backend"));
  return runner::backend_for_file(choice, file);
}

void add_eval_command(CLI::App& app, GlobalOptions& g, int& rc) {
  static EvalArgs a;
  auto* e = app.add_subcommand(
      "eval",
      "Run the compile, correctness and performance gates for one candidate. "
      "Exit code 0: every shape passed; 1: some failed; 2: bad input; 3: the backend "
      "cannot run here (cuda without a GPU, hip without an AMD GPU)");
  e->add_option("file", a.file, "Candidate source (.cu cuda, .cpp cpu, .hip hip, .py Python: cuda with a GPU, else cpu)")->required();
  e->add_option("--operator", a.op, "Operator (see `atrex problems list`)")->required();
  e->add_option("--backend", a.backend, "auto (from the extension), cpu, cuda or hip")
      ->capture_default_str();
  e->add_option(
       "--shapes", a.shapes,
       "`all`, `smallest[:N]`, `largest[:N]` (by input elements) or comma-separated shape ids")
      ->capture_default_str();
  e->add_option("--hardware", a.hardware,
                "Profile for T_roofline: auto or a name from `atrex hardware list`")
      ->capture_default_str();
  e->add_option("--seeds", a.seeds, "Correctness seeds per shape")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  e->add_flag("--no-perf", a.no_perf, "Skip the performance gate");
  e->add_option("--timeout", a.timeout_s, "Wall-clock limit of one shape, seconds")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  e->add_option("--out", a.out, "Also write the atrex.eval/1 records (JSONL) here");
  e->add_option("--roofline", a.roofline,
                "W/Q for T_roofline: released (roofline.json) or analytic")
      ->check(CLI::IsMember({"released", "analytic"}))
      ->capture_default_str();
  e->add_option("--timing-mode", a.timing_mode,
                "GPU timing: auto (CUPTI kernel spans where CUPTI loads, else CUDA-graph replay "
                "when the call can be "
                "captured, else eager events), cupti, graph or eager")
      ->check(CLI::IsMember({"auto", "cupti", "graph", "eager"}))
      ->capture_default_str();
  e->add_option(
       "--unseen-shapes", a.unseen_shapes,
       "Shapes the suite does not hold, derived from the chosen ones by changing a free dimension "
       "(the token count), checked for correctness first; a failure fails every shape (0: none)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  e->add_flag("--no-range-probe", a.no_range_probe,
              "Skip the range probe (an input set scaled past the fp16 range, for the operators "
              "that define one)");
  e->add_flag("--no-edge-cases", a.no_edge_cases,
              "Skip the edge-case input set (ties at the k-th value, all-zero rows, empty experts, "
              "permuted block tables, ...: for the operators that define one)");
  add_no_sandbox_flag(*e, a.no_sandbox);
  e->add_flag("--json", g.json, "Machine-readable output (atrex.eval-summary/1)");
  e->callback([&] { rc = run_eval(g, a); });
}

}  // namespace atrex::cli
