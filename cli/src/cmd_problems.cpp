// `atrex problems list|show`: agent-visible facts only (never metadata.json or roofline.json).
// `atrex problems dump`: evaluator-side developer command that writes generated inputs and
// reference outputs (for the cross-check against PyTorch, docs/evaluation.md).
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "atrex/problems/operator.h"
#include "atrex/runner/evaluator.h"
#include "atrex/runner/subprocess.h"
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

struct SizedShape {
  int64_t elements = 0;  // input elements: the order of `smallest` and `xcheck`
  int64_t bytes = 0;     // input bytes: the cap of `xcheck`
  std::string id;
};

// The operator's shapes by ascending input elements (ties keep the id order).
Result<std::vector<SizedShape>> sized_shapes(const problems::OperatorInfo& op,
                                             const problems::OperatorDef& def) {
  std::vector<SizedShape> sized;
  for (const auto& s : op.shapes) {
    ATREX_ASSIGN_OR_RETURN(problems::ResolvedShape r, problems::resolve_shape(def, s));
    int64_t elements = 0;
    for (const auto& d : r.inputs) elements += d.numel();
    sized.push_back(SizedShape{elements, input_bytes(r), s.id});
  }
  std::stable_sort(sized.begin(), sized.end(),
                   [](const auto& a, const auto& b) { return a.elements < b.elements; });
  return sized;
}

// `xcheck`: the smallest, a middle and the largest shape among those whose inputs fit in
// max_bytes. Where fewer than 3 fit, the smallest oversized ones (by bytes) join them, so every
// operator is checked on 3 shapes; the other oversized shapes go to `skipped`.
std::vector<std::string> xcheck_ids(const std::vector<SizedShape>& sized, int64_t max_bytes,
                                    std::vector<std::string>& skipped) {
  std::vector<SizedShape> pool, over;
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

// Comma-separated shape ids, each checked against the operator.
Result<std::vector<std::string>> listed_ids(const problems::OperatorInfo& op,
                                            const std::string& spec) {
  std::vector<std::string> ids;
  std::string cur;
  for (size_t i = 0; i <= spec.size(); ++i) {
    if (i < spec.size() && spec[i] != ',') {
      cur += spec[i];
      continue;
    }
    if (!cur.empty() && !op.find_shape(cur)) {
      return not_found(fmt::format(
          "--shapes: operator {} has no shape \"{}\" (ids 0..{}; see `atrex problems show {}`)",
          op.name, cur, op.shapes.size() - 1, op.name));
    }
    if (!cur.empty()) ids.push_back(cur);
    cur.clear();
  }
  if (ids.empty())
    return invalid_input(
        "--shapes: expected `all`, `smallest[:N]`, `xcheck` or comma-separated shape ids");
  return ids;
}

// Shapes of one operator for a dump: `all`, `smallest[:N]` (fewest input elements), `xcheck`
// (xcheck_ids) or comma-separated ids. `skipped` collects xcheck's oversized shapes.
Result<std::vector<std::string>> dump_shape_ids(const problems::OperatorInfo& op,
                                                const problems::OperatorDef& def,
                                                const std::string& spec, int64_t max_input_bytes,
                                                std::vector<std::string>& skipped) {
  std::vector<std::string> ids;
  if (spec == "all") {
    for (const auto& s : op.shapes) ids.push_back(s.id);
    return ids;
  }
  if (spec != "xcheck" && spec.rfind("smallest", 0) != 0) return listed_ids(op, spec);
  size_t n = 1;
  if (spec.size() > 8 && spec != "xcheck") {
    char* end = nullptr;
    const long v = spec[8] == ':' ? std::strtol(spec.c_str() + 9, &end, 10) : 0;
    if (v <= 0 || !end || *end != '\0') {
      return invalid_input(fmt::format(
          "--shapes: expected `smallest` or `smallest:N` with N >= 1; got \"{}\"", spec));
    }
    n = static_cast<size_t>(v);
  }
  ATREX_ASSIGN_OR_RETURN(auto sized, sized_shapes(op, def));
  if (spec == "xcheck") return xcheck_ids(sized, max_input_bytes, skipped);
  for (size_t i = 0; i < std::min(n, sized.size()); ++i) ids.push_back(sized[i].id);
  return ids;
}

// The dump request for the child: one item per (operator, shape), written to OUT/OP/SHAPE.
// `skipped` gets "OP shape ID (N GiB of inputs)" for the shapes `xcheck` leaves out.
Result<Json> dump_items(const problems::Suite& suite, const DumpArgs& a,
                        std::vector<std::string>& skipped) {
  std::vector<const problems::OperatorInfo*> ops;
  if (a.op == "all") {
    for (const auto& op : suite.operators()) ops.push_back(&op);
  } else {
    ATREX_ASSIGN_OR_RETURN(const problems::OperatorInfo* op, suite.require(a.op));
    ops.push_back(op);
  }
  Json items = Json::array();
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
      items.push_back(Json{{"operator", op->name},
                           {"shape_id", id},
                           {"params", s->params},
                           {"init_kwargs", s->init_kwargs},
                           {"input_kwargs", s->input_kwargs},
                           {"seed", a.seed},
                           {"backend", a.backend},
                           {"atol", 1e-2},
                           {"rtol", 5e-2},
                           {"input_bytes", tensor_bytes(r.inputs)},
                           {"output_bytes", tensor_bytes(r.outputs)},
                           {"out_dir", (fs::path(a.out) / op->name / id).string()}});
    }
  }
  return items;
}

// `--list`: the selection and its sizes, nothing written.
int print_plan(const Json& items, const std::vector<std::string>& skipped, double max_input_mib) {
  double total = 0;
  for (const auto& s : skipped)
    fmt::print("{} skipped: inputs exceed --max-input-mib {}\n", s, max_input_mib);
  for (const auto& it : items) {
    const double in = it["input_bytes"].get<double>() / (1 << 20),
                 out = it["output_bytes"].get<double>() / (1 << 20);
    total += in + out;
    fmt::print("{} shape {}: {:.1f} MiB in, {:.1f} MiB out\n", it["operator"].get<std::string>(),
               it["shape_id"].get<std::string>(), in, out);
  }
  fmt::print("{} dumps, {:.1f} MiB in all\n", items.size(), total);
  return 0;
}

// Runs the backend's evaluation child on the dump request; returns its response.
Result<Json> run_dump_child(const DumpArgs& a, const Json& items) {
  std::error_code ec;
  fs::create_directories(a.out, ec);
  if (ec) return invalid_input(fmt::format("--out {}: {}", a.out, ec.message()));
  const std::string stem = (fs::path(a.out) / fmt::format(".dump-{}", ::getpid())).string();
  const fs::path req = stem + ".request.json", resp = stem + ".response.json";
  ATREX_TRY(write_text_file_atomic(
      req, Json{{"schema", "atrex.child-request/1"}, {"mode", "dump"}, {"items", items}}.dump()));
  runner::SubprocessOptions opt;
  opt.argv = {
      (runner::default_child_dir() / (a.backend == "cuda" ? "atrex-eval-cuda" : "atrex-eval-cpu"))
          .string(),
      "--request",
      req.string(),
      "--response",
      resp.string(),
      "--device",
      std::to_string(a.device)};
  opt.timeout = std::chrono::milliseconds(static_cast<int64_t>(a.timeout_s * 1000));
  auto proc = runner::run_subprocess(opt);
  auto response = read_json_file(resp);
  fs::remove(req, ec);
  fs::remove(resp, ec);
  if (!proc) return tl::unexpected(proc.error());
  if (!response) {
    return make_error(ErrorCode::kInternal,
                      fmt::format("the {} evaluation child gave no result ({}): {}", a.backend,
                                  proc->describe(), proc->output_tail));
  }
  return response;
}

int dump(const GlobalOptions& g, const DumpArgs& a) {
  if (a.backend != "cpu" && a.backend != "cuda") {
    return fail(Error{ErrorCode::kInvalidInput,
                      fmt::format("--backend: expected cpu or cuda; got \"{}\"", a.backend)});
  }
  auto suite = load_suite(g);
  if (!suite) return fail(suite.error());
  std::vector<std::string> skipped;
  auto items = dump_items(*suite, a, skipped);
  if (!items) return fail(items.error());
  if (a.list) return print_plan(*items, skipped, a.max_input_mib);
  if (a.backend == "cuda" && !runner::probe_environment().has_gpu()) {
    return fail(Error{ErrorCode::kUnavailable,
                      fmt::format("--backend cuda needs a CUDA GPU and this machine has none ({})",
                                  runner::probe_environment().gpu_probe_error)});
  }
  auto response = run_dump_child(a, *items);
  if (!response) return fail(response.error());
  const Json& results = (*response)["items"];
  const auto bad = std::count_if(results.begin(), results.end(),
                                 [](const Json& r) { return r.value("status", "") != "ok"; });
  if (g.json) {
    fmt::print("{}\n", Json{{"schema", "atrex.dump-summary/1"},
                            {"backend", a.backend},
                            {"device", response->value("device", "")},
                            {"items", results},
                            {"skipped", skipped}}
                           .dump(2));
    return bad == 0 ? 0 : 1;
  }
  for (const auto& s : skipped)
    fmt::print("{} skipped: inputs exceed --max-input-mib {}\n", s, a.max_input_mib);
  for (const auto& r : results) {
    const bool ok = r.value("status", "") == "ok";
    fmt::print("{} shape {}: {}{}\n", r.value("operator", ""), r.value("shape_id", ""),
               ok ? r.value("out_dir", "") : r.value("status", ""),
               ok ? "" : ": " + r.value("error", ""));
  }
  fmt::print("{} of {} dumps written on {} ({})\n", results.size() - static_cast<size_t>(bad),
             results.size(), response->value("device", ""), a.backend);
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
  dp->add_option("--seed", d.seed, "Seed of the input generators")->capture_default_str();
  dp->add_option("--backend", d.backend,
                 "cpu or cuda: where inputs are drawn and the reference runs")
      ->capture_default_str();
  dp->add_option("--out", d.out, "Folder for the dumps (OUT/OPERATOR/SHAPE/manifest.json)")
      ->required();
  dp->add_option("--max-input-mib", d.max_input_mib,
                 "`--shapes xcheck`: skip shapes with more input MiB")
      ->capture_default_str();
  dp->add_option("--device", d.device, "GPU index for --backend cuda")->capture_default_str();
  dp->add_option("--timeout", d.timeout_s, "Wall-clock limit of the child, seconds")
      ->capture_default_str();
  dp->add_flag("--json", g.json, "Machine-readable summary (atrex.dump-summary/1)");
  dp->add_flag("--list", d.list, "Only list the selected shapes and their sizes; write nothing");
  dp->callback([&] { rc = dump(g, d); });
}

}  // namespace atrex::cli
