// `atrex problems signal`: where the correctness gate's absolute tolerance is a large fraction of
// an output's own scale (compare.h "Low-signal outputs"), measured on the CPU reference.
// Evaluator-side developer command: it prints reference magnitudes, never the outputs.
#include <fmt/format.h>

#include "atrex/problems/compare.h"
#include "atrex/problems/shape_select.h"
#include "atrex/problems/signal.h"
#include "cli.h"

namespace atrex::cli {
namespace {

struct SignalArgs {
  std::string op = "all";
  std::string shapes = "smallest";
  uint64_t seed = 1;
  double atol = 1e-2;
  double rtol = 5e-2;
};

struct SignalRow {
  std::string op, shape;
  problems::OutputSignal s;
};

Result<std::vector<SignalRow>> measure(const problems::Suite& suite, const SignalArgs& a) {
  std::vector<const problems::OperatorInfo*> ops;
  if (a.op == "all") {
    for (const auto& op : suite.operators()) ops.push_back(&op);
  } else {
    ATREX_ASSIGN_OR_RETURN(const problems::OperatorInfo* op, suite.require(a.op));
    ops.push_back(op);
  }
  std::vector<SignalRow> rows;
  for (const auto* op : ops) {
    ATREX_ASSIGN_OR_RETURN(const problems::OperatorDef* def,
                           problems::require_native_operator(op->name));
    ATREX_ASSIGN_OR_RETURN(auto ids, problems::select_shapes(*op, *def, a.shapes));
    for (const auto& id : ids) {
      ATREX_ASSIGN_OR_RETURN(problems::ResolvedShape r,
                             problems::resolve_shape(*def, *op->find_shape(id)));
      ATREX_ASSIGN_OR_RETURN(auto outs, problems::measure_output_signal(r, a.seed, a.atol, a.rtol));
      for (auto& s : outs) rows.push_back(SignalRow{op->name, id, std::move(s)});
    }
  }
  return rows;
}

int signal(const GlobalOptions& g, const SignalArgs& a) {
  auto suite = load_suite(g);
  if (!suite) return fail(suite.error());
  auto rows = measure(*suite, a);
  if (!rows) return fail(rows.error());
  if (g.json) {
    Json items = Json::array();
    for (const auto& r : *rows) {
      items.push_back(Json{{"operator", r.op},
                           {"shape_id", r.shape},
                           {"output", r.s.output},
                           {"dtype", r.s.dtype},
                           {"elements", r.s.elements},
                           {"ref_max", r.s.ref_max},
                           {"ref_rms", r.s.ref_rms},
                           {"atol", r.s.atol},
                           {"integer", r.s.integer},
                           {"zero_passes", r.s.zero_passes},
                           {"low_signal", r.s.low_signal},
                           {"custom_compare", r.s.custom_compare}});
    }
    fmt::print("{}\n", Json{{"schema", "atrex.signal/1"},
                            {"seed", a.seed},
                            {"low_signal_fraction", problems::kLowSignalFraction},
                            {"outputs", items}}
                           .dump(2));
    return 0;
  }
  fmt::print("{:<28} {:>6} {:<18} {:<8} {:>10} {:>10} {:>9} {}\n", "operator", "shape", "output",
             "dtype", "max|ref|", "rms(ref)", "atol/max", "judged");
  int low = 0;
  for (const auto& r : *rows) {
    const auto& s = r.s;
    std::string judged = s.integer          ? "exact (integer)"
                         : s.low_signal     ? (s.zero_passes ? "low-signal (zeros pass)"
                                                             : "low-signal (atol >= 0.1 max)")
                                            : "allclose";
    if (s.custom_compare) judged += ", custom comparison";
    low += s.low_signal;
    fmt::print("{:<28} {:>6} {:<18} {:<8} {:>10.4g} {:>10.4g} {:>9.3g} {}\n", r.op, r.shape,
               s.output, s.dtype, s.ref_max, s.ref_rms, s.ref_max > 0 ? s.atol / s.ref_max : 0.0,
               judged);
  }
  fmt::print("{} of {} outputs are low-signal (atol >= {} x max|ref|, or all zeros would pass); "
             "seed {}\n",
             low, rows->size(), problems::kLowSignalFraction, a.seed);
  return 0;
}

}  // namespace

void add_problems_signal_command(CLI::App& problems, GlobalOptions& g, int& rc) {
  static SignalArgs a;
  auto* s = problems.add_subcommand(
      "signal",
      "Evaluator-side: each output's reference magnitude on the CPU reference and whether the "
      "correctness gate judges it against its own scale (low-signal rule, docs/evaluation.md). "
      "Exit code 0, or 2 for an unknown operator or shape selector");
  s->add_option("operator", a.op, "Operator, or `all`")->capture_default_str();
  s->add_option("--shapes", a.shapes,
                "`all`, `smallest[:N]` or comma-separated shape ids (as `atrex eval --shapes`)")
      ->capture_default_str();
  s->add_option("--seed", a.seed, "Seed of the input generators (0 to 2^32-1)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{0xFFFFFFFF}))
      ->capture_default_str();
  s->add_option("--atol", a.atol, "Absolute tolerance (the operator's override wins)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  s->add_option("--rtol", a.rtol, "Relative tolerance (the operator's override wins)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  s->add_flag("--json", g.json, "Machine-readable output (atrex.signal/1)");
  s->callback([&] { rc = signal(g, a); });
}

}  // namespace atrex::cli
