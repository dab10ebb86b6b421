// `atrex problems list|show`: agent-visible facts only (never metadata.json or roofline.json).
// `atrex problems dump`: evaluator-side developer command that writes generated inputs and
// reference outputs (for the cross-check against PyTorch, docs/evaluation.md).
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "atrex/problems/operator.h"
#include "atrex/problems/shape_select.h"
#include "atrex/runner/dump.h"
#include "atrex/runner/evaluator.h"
#include "atrex/common/process/subprocess.h"
#include "cli.h"

namespace atrex::cli {
namespace {
namespace fs = std::filesystem;

std::string dtype_summary(const std::string& op, const problems::OperatorDef* def) {
  if (!def) {
    auto d = problems::operator_primary_dtype(op);
    return d.empty() ? "-" : std::string(d);
  }
  std::string s;
  for (const auto& t : def->inputs) {
    std::string d(problems::dtype_name(t.dtype));
    if (s.find(d) == std::string::npos) s += (s.empty() ? "" : ",") + d;
  }
  return s;
}

int list(const GlobalOptions& g) {
  auto suite = load_suite(g);
  if (!suite) return fail(suite.error());
  if (g.json) {
    Json ops = Json::array();
    for (const auto& op : suite->operators()) {
      const auto* def = problems::find_native_operator(op.name);
      ops.push_back(Json{{"operator", op.name},
                         {"weight", op.weight},
                         {"importance_score", op.importance_score},
                         {"phase", op.phase},
                         {"shapes", op.shapes.size()},
                         {"native", def != nullptr},
                         {"dtypes", dtype_summary(op.name, def)}});
    }
    fmt::print("{}\n", Json{{"schema", "atrex.problems/1"}, {"operators", ops}}.dump(2));
    return 0;
  }
  fmt::print("{:<4} {:<30} {:>7} {:<15} {:>7} {:<10} {}\n", "#", "operator", "weight", "phase",
             "shapes", "dtype", "native");
  int i = 0;
  for (const auto& op : suite->operators()) {
    const auto* def = problems::find_native_operator(op.name);
    fmt::print("{:<4} {:<30} {:>7.4f} {:<15} {:>7} {:<10} {}\n", ++i, op.name, op.weight, op.phase,
               op.shapes.size(), dtype_summary(op.name, def), def ? "yes" : "not yet");
  }
  fmt::print("{} operators, {} shapes; weights are normalised importance scores (sum 1).\n",
             suite->operators().size(), suite->num_shapes());
  return 0;
}

std::string dims(const std::vector<std::string>& d) {
  std::string s;
  for (const auto& x : d) s += (s.empty() ? "" : ", ") + x;
  return "[" + s + "]";
}

int show(const GlobalOptions& g, const std::string& name) {
  auto suite = load_suite(g);
  if (!suite) return fail(suite.error());
  auto op = suite->require(name);
  if (!op) return fail(op.error());
  const auto* def = problems::find_native_operator(name);
  if (g.json) {
    Json shapes = Json::array();
    for (const auto& s : (*op)->shapes) shapes.push_back(Json{{"id", s.id}, {"params", s.params}});
    Json j{{"schema", "atrex.problem/1"},
           {"operator", name},
           {"weight", (*op)->weight},
           {"phase", (*op)->phase},
           {"shapes", shapes}};
    if (!(*op)->reduced_shapes.empty()) {
      Json reduced = Json::array();
      for (const auto& s : (*op)->reduced_shapes)
        reduced.push_back(Json{{"id", s.id}, {"params", s.params}});
      j["reduced_shapes"] = reduced;
    }
    if (def) {
      auto tensors = [](const std::vector<problems::TensorSpec>& ts) {
        Json a = Json::array();
        for (const auto& t : ts)
          a.push_back(Json{{"name", t.name},
                           {"dtype", problems::dtype_name(t.dtype)},
                           {"dims", t.dims},
                           {"doc", t.doc}});
        return a;
      };
      j["semantics"] = def->semantics;
      j["inputs"] = tensors(def->inputs);
      j["outputs"] = tensors(def->outputs);
    }
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("operator {}   weight {:.4f}   phase {}   {} shapes\n", name, (*op)->weight,
             (*op)->phase, (*op)->shapes.size());
  if (def) {
    fmt::print("\n{}\n\ninputs (read-only):\n", def->semantics);
    for (const auto& t : def->inputs)
      fmt::print("  {:<16} {:<6} {:<36} {}\n", t.name, problems::dtype_name(t.dtype), dims(t.dims),
                 t.doc);
    fmt::print(
        "outputs (poisoned before each call, so write every element, unless they start as an "
        "input):\n");
    for (const auto& t : def->outputs) {
      fmt::print("  {:<16} {:<6} {:<36} {}{}\n", t.name, problems::dtype_name(t.dtype),
                 dims(t.dims), t.doc,
                 t.initial_from.empty()
                     ? ""
                     : " (starts as a copy of input " + t.initial_from + "; update it in place)");
    }
    fmt::print("parameters:\n");
    for (const auto& p : def->params) {
      fmt::print("  {:<22} {}{}\n", p.name, p.doc,
                 p.required ? "" : fmt::format(" (default {})", p.default_value.dump()));
    }
  } else {
    fmt::print("\n(no native definition yet: this operator cannot be evaluated by this build)\n");
  }
  fmt::print("\nshapes:\n");
  for (const auto& s : (*op)->shapes) fmt::print("  {:>4}  {}\n", s.id, s.params.dump());
  if (!(*op)->reduced_shapes.empty()) {
    fmt::print("\nreduced shapes (atrex's own, for the CPU backend: docs/sweeps.md \"Reduced shapes\"):\n");
    for (const auto& s : (*op)->reduced_shapes)
      fmt::print("  {}  {}\n", s.id, s.params.dump());
  }
  return 0;
}

struct DumpArgs {
  std::string op;
  std::string shapes = "smallest";
  uint64_t seed = 1;
  std::string backend = "cpu";
  std::string out;
  double max_input_mib = 2048;
  int device = 0;
  double timeout_s = 1800;
  bool list = false;
};

int64_t tensor_bytes(const std::vector<problems::TensorDesc>& ts) {
  int64_t b = 0;
  for (const auto& t : ts) b += static_cast<int64_t>(t.bytes());
  return b;
}
int64_t input_bytes(const problems::ResolvedShape& r) { return tensor_bytes(r.inputs); }

struct DumpSizedShape {
  int64_t elements = 0;  // input elements: the order of `smallest` and `xcheck`
  int64_t bytes = 0;     // input bytes: the cap of `xcheck`
  std::string id;
};

// The operator's shapes by ascending input elements (ties keep the id order).
Result<std::vector<DumpSizedShape>> dump_sized_shapes(const problems::OperatorInfo& op,
                                                      const problems::OperatorDef& def) {
  std::vector<DumpSizedShape> sized;
  for (const auto& s : op.shapes) {
    ATREX_ASSIGN_OR_RETURN(problems::ResolvedShape r, problems::resolve_shape(def, s));
    int64_t elements = 0;
    for (const auto& d : r.inputs) elements += d.numel();
    sized.push_back(DumpSizedShape{elements, input_bytes(r), s.id});
  }
  std::stable_sort(sized.begin(), sized.end(),
                   [](const auto& a, const auto& b) { return a.elements < b.elements; });
  return sized;
}

// `xcheck`: the smallest, a middle and the largest shape among those whose inputs fit in
// max_bytes. Where fewer than 3 fit, the smallest oversized ones (by bytes) join them, so every
// operator is checked on 3 shapes; the other oversized shapes go to `skipped`.
std::vector<std::string> xcheck_ids(const std::vector<DumpSizedShape>& sized, int64_t max_bytes,
                                    std::vector<std::string>& skipped) {
  std::vector<DumpSizedShape> pool, over;
  for (const auto& s : sized) (s.bytes <= max_bytes ? pool : over).push_back(s);
  std::stable_sort(over.begin(), over.end(),
                   [](const auto& a, const auto& b) { return a.bytes < b.bytes; });
  size_t taken = 0;
  while (pool.size() < 3 && taken < over.size()) pool.push_back(over[taken++]);
  for (size_t i = taken; i < over.size(); ++i) {
    skipped.push_back(fmt::format("{} ({:.2f} GiB of inputs)", over[i].id,
                                  static_cast<double>(over[i].bytes) / (1 << 30)));
  }
  std::stable_sort(pool.begin(), pool.end(),
                   [](const auto& a, const auto& b) { return a.elements < b.elements; });
  std::vector<std::string> ids;
  if (pool.empty()) return ids;
  for (size_t i : {size_t{0}, (pool.size() - 1) / 2, pool.size() - 1}) {
    if (std::find(ids.begin(), ids.end(), pool[i].id) == ids.end()) ids.push_back(pool[i].id);
  }
  return ids;
}

// Shapes of one operator for a dump: `xcheck` (xcheck_ids), else a selector as `atrex eval
// --shapes` takes it (problems/shape_select.h). `skipped` collects xcheck's oversized shapes.
Result<std::vector<std::string>> dump_shape_ids(const problems::OperatorInfo& op,
                                                const problems::OperatorDef& def,
                                                const std::string& spec, int64_t max_input_bytes,
                                                std::vector<std::string>& skipped) {
  if (spec != "xcheck") return problems::select_shapes(op, def, spec);
  ATREX_ASSIGN_OR_RETURN(auto sized, dump_sized_shapes(op, def));
  return xcheck_ids(sized, max_input_bytes, skipped);
}

// One planned dump: what the child gets, and its sizes for `--list`.
struct PlannedDump {
  runner::DumpItem item;
  int64_t input_bytes = 0;
  int64_t output_bytes = 0;
};

// The dump request for the child: one item per (operator, shape), written to OUT/OP/SHAPE.
// `skipped` gets "OP shape ID (N GiB of inputs)" for the shapes `xcheck` leaves out.
Result<std::vector<PlannedDump>> dump_items(const problems::Suite& suite, const DumpArgs& a,
                                            std::vector<std::string>& skipped) {
  std::vector<const problems::OperatorInfo*> ops;
  if (a.op == "all") {
    for (const auto& op : suite.operators()) ops.push_back(&op);
  } else {
    ATREX_ASSIGN_OR_RETURN(const problems::OperatorInfo* op, suite.require(a.op));
    ops.push_back(op);
  }
  std::vector<PlannedDump> items;
  const auto max_bytes = static_cast<int64_t>(a.max_input_mib * 1024 * 1024);
  for (const auto* op : ops) {
    ATREX_ASSIGN_OR_RETURN(const problems::OperatorDef* def,
                           problems::require_native_operator(op->name));
    std::vector<std::string> left_out;
    ATREX_ASSIGN_OR_RETURN(auto ids, dump_shape_ids(*op, *def, a.shapes, max_bytes, left_out));
    for (const auto& s : left_out) skipped.push_back(fmt::format("{} shape {}", op->name, s));
    for (const auto& id : ids) {
      const problems::Shape* s = op->find_shape(id);
      ATREX_ASSIGN_OR_RETURN(problems::ResolvedShape r, problems::resolve_shape(*def, *s));
      runner::DumpItem item{op->name,
                            id,
                            s->params,
                            s->init_kwargs,
                            s->input_kwargs,
                            a.seed,
                            a.backend,
                            (fs::path(a.out) / op->name / id).string(),
                            1e-2,
                            5e-2};
      items.push_back(
          PlannedDump{std::move(item), tensor_bytes(r.inputs), tensor_bytes(r.outputs)});
    }
  }
  return items;
}

// `--list`: the selection and its sizes, nothing written.
int print_plan(const std::vector<PlannedDump>& items, const std::vector<std::string>& skipped,
               double max_input_mib) {
  double total = 0;
  for (const auto& s : skipped)
    fmt::print("{} skipped: inputs exceed --max-input-mib {}\n", s, max_input_mib);
  for (const auto& it : items) {
    const double in = static_cast<double>(it.input_bytes) / (1 << 20),
                 out = static_cast<double>(it.output_bytes) / (1 << 20);
    total += in + out;
    fmt::print("{} shape {}: {:.1f} MiB in, {:.1f} MiB out\n", it.item.operator_name,
               it.item.shape_id, in, out);
  }
  fmt::print("{} dumps, {:.1f} MiB in all\n", items.size(), total);
  return 0;
}

int dump(const GlobalOptions& g, const DumpArgs& a) {
  if (a.backend != "cpu" && a.backend != "cuda") {
    return fail(Error{ErrorCode::kInvalidInput,
                      fmt::format("--backend: expected cpu or cuda; got \"{}\"", a.backend)});
  }
  const Backend backend = *parse_backend(a.backend);
  auto suite = load_suite(g);
  if (!suite) return fail(suite.error());
  std::vector<std::string> skipped;
  auto planned = dump_items(*suite, a, skipped);
  if (!planned) return fail(planned.error());
  if (a.list) return print_plan(*planned, skipped, a.max_input_mib);
  if (backend == Backend::kCuda && !runner::probe_environment().has_gpu()) {
    return fail(Error{ErrorCode::kUnavailable,
                      fmt::format("--backend cuda needs a CUDA GPU and this machine has none ({})",
                                  runner::probe_environment().gpu_probe_error)});
  }
  std::vector<runner::DumpItem> items;
  for (const auto& p : *planned) items.push_back(p.item);
  auto response =
      runner::run_dump(backend, a.device, items, a.out,
                       std::chrono::milliseconds(static_cast<int64_t>(a.timeout_s * 1000)));
  if (!response) return fail(response.error());
  const auto& results = response->items;
  const auto bad = std::count_if(results.begin(), results.end(),
                                 [](const runner::DumpItemResult& r) { return r.status != "ok"; });
  if (g.json) {
    Json items_json = Json::array();
    for (const auto& r : results) {
      items_json.push_back(Json{{"operator", r.operator_name},
                                {"shape_id", r.shape_id},
                                {"status", r.status},
                                {"error", r.error},
                                {"out_dir", r.out_dir},
                                {"wall_s", r.wall_s}});
    }
    fmt::print("{}\n", Json{{"schema", "atrex.dump-summary/1"},
                            {"backend", a.backend},
                            {"device", response->device},
                            {"items", items_json},
                            {"skipped", skipped}}
                           .dump(2));
    return bad == 0 ? 0 : 1;
  }
  for (const auto& s : skipped)
    fmt::print("{} skipped: inputs exceed --max-input-mib {}\n", s, a.max_input_mib);
  for (const auto& r : results) {
    const bool good = r.status == "ok";
    fmt::print("{} shape {}: {}{}\n", r.operator_name, r.shape_id, good ? r.out_dir : r.status,
               good ? "" : ": " + r.error);
  }
  fmt::print("{} of {} dumps written on {} ({})\n", results.size() - static_cast<size_t>(bad),
             results.size(), response->device, a.backend);
  return bad == 0 ? 0 : 1;
}

}  // namespace

void add_problems_commands(CLI::App& app, GlobalOptions& g, int& rc) {
  auto* problems = app.add_subcommand(
      "problems", "The problem suite: operators, weights, shapes (agent-visible facts)");
  problems->require_subcommand(1);
  auto* l =
      problems->add_subcommand("list", "List operators with weight, phase, shape count and dtype");
  l->add_flag("--json", g.json, "Machine-readable output (atrex.problems/1)");
  l->callback([&] { rc = list(g); });
  auto* s = problems->add_subcommand("show", "Show one operator's signature, semantics and shapes");
  static std::string name;
  s->add_option("operator", name, "Operator name")->required();
  s->add_flag("--json", g.json, "Machine-readable output (atrex.problem/1)");
  s->callback([&] { rc = show(g, name); });
  static DumpArgs d;
  auto* dp = problems->add_subcommand(
      "dump",
      "Evaluator-side developer command: write the generated inputs of shapes (as a candidate "
      "receives them), "
      "their resolved parameters and reference outputs (after the reference ran; in-place outputs "
      "included) as raw "
      "little-endian tensor files plus manifest.json (atrex.dump/1) into OUT/OPERATOR/SHAPE. The "
      "reference "
      "outputs are the answers: never give them to an agent. Used by deploy/gpu/xcheck.py. Exit "
      "code 0: all "
      "written; 1: some failed; 2: bad input; 3: --backend cuda without a GPU");
  dp->add_option("operator", d.op, "Operator, or `all`")->required();
  dp->add_option("--shapes", d.shapes,
                 "`all`, `smallest[:N]` (fewest input elements), `xcheck` (smallest, middle and "
                 "largest by input "
                 "elements among the shapes within --max-input-mib, topped up to 3 with the "
                 "smallest larger ones) or "
                 "comma-separated shape ids")
      ->capture_default_str();
  dp->add_option("--seed", d.seed, "Seed of the input generators (0 to 2^32-1)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{0xFFFFFFFF}))
      ->capture_default_str();
  dp->add_option("--backend", d.backend,
                 "cpu or cuda: where inputs are drawn and the reference runs")
      ->capture_default_str();
  dp->add_option("--out", d.out, "Folder for the dumps (OUT/OPERATOR/SHAPE/manifest.json)")
      ->required();
  dp->add_option("--max-input-mib", d.max_input_mib,
                 "`--shapes xcheck`: skip shapes with more input MiB")
      ->check(CLI::Range(1.0, 1048576.0))
      ->capture_default_str();
  dp->add_option("--device", d.device, "GPU index for --backend cuda")
      ->check(CLI::Range(0, 1023))->capture_default_str();
  dp->add_option("--timeout", d.timeout_s, "Wall-clock limit of the child, seconds")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  dp->add_flag("--json", g.json, "Machine-readable summary (atrex.dump-summary/1)");
  dp->add_flag("--list", d.list, "Only list the selected shapes and their sizes; write nothing");
  dp->callback([&] { rc = dump(g, d); });
  add_problems_signal_command(*problems, g, rc);
}

}  // namespace atrex::cli
