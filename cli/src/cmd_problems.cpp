// `atrex problems list|show`: agent-visible facts only (never metadata.json or roofline.json).
#include <fmt/format.h>

#include "atrex/problems/operator.h"
#include "cli.h"

namespace atrex::cli {
namespace {

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
      ops.push_back(Json{{"operator", op.name}, {"weight", op.weight}, {"importance_score", op.importance_score},
                         {"phase", op.phase}, {"shapes", op.shapes.size()}, {"native", def != nullptr},
                         {"dtypes", dtype_summary(op.name, def)}});
    }
    fmt::print("{}\n", Json{{"schema", "atrex.problems/1"}, {"operators", ops}}.dump(2));
    return 0;
  }
  fmt::print("{:<4} {:<30} {:>7} {:<15} {:>7} {:<10} {}\n", "#", "operator", "weight", "phase", "shapes", "dtype", "native");
  int i = 0;
  for (const auto& op : suite->operators()) {
    const auto* def = problems::find_native_operator(op.name);
    fmt::print("{:<4} {:<30} {:>7.4f} {:<15} {:>7} {:<10} {}\n", ++i, op.name, op.weight, op.phase, op.shapes.size(),
               dtype_summary(op.name, def), def ? "yes" : "not yet");
  }
  fmt::print("{} operators, {} shapes; weights are normalised importance scores (sum 1).\n", suite->operators().size(),
             suite->num_shapes());
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
    Json j{{"schema", "atrex.problem/1"}, {"operator", name}, {"weight", (*op)->weight}, {"phase", (*op)->phase},
           {"shapes", shapes}};
    if (def) {
      auto tensors = [](const std::vector<problems::TensorSpec>& ts) {
        Json a = Json::array();
        for (const auto& t : ts) a.push_back(Json{{"name", t.name}, {"dtype", problems::dtype_name(t.dtype)}, {"dims", t.dims}, {"doc", t.doc}});
        return a;
      };
      j["semantics"] = def->semantics;
      j["inputs"] = tensors(def->inputs);
      j["outputs"] = tensors(def->outputs);
    }
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("operator {}   weight {:.4f}   phase {}   {} shapes\n", name, (*op)->weight, (*op)->phase, (*op)->shapes.size());
  if (def) {
    fmt::print("\n{}\n\ninputs (read-only):\n", def->semantics);
    for (const auto& t : def->inputs) fmt::print("  {:<16} {:<6} {:<36} {}\n", t.name, problems::dtype_name(t.dtype), dims(t.dims), t.doc);
    fmt::print("outputs (poisoned before each call, so write every element, unless they start as an input):\n");
    for (const auto& t : def->outputs) {
      fmt::print("  {:<16} {:<6} {:<36} {}{}\n", t.name, problems::dtype_name(t.dtype), dims(t.dims), t.doc,
                 t.initial_from.empty() ? "" : " (starts as a copy of input " + t.initial_from + "; update it in place)");
    }
    fmt::print("parameters:\n");
    for (const auto& p : def->params) {
      fmt::print("  {:<22} {}{}\n", p.name, p.doc, p.required ? "" : fmt::format(" (default {})", p.default_value.dump()));
    }
  } else {
    fmt::print("\n(no native definition yet: this operator cannot be evaluated by this build)\n");
  }
  fmt::print("\nshapes:\n");
  for (const auto& s : (*op)->shapes) fmt::print("  {:>4}  {}\n", s.id, s.params.dump());
  return 0;
}

}  // namespace

void add_problems_commands(CLI::App& app, GlobalOptions& g, int& rc) {
  auto* problems = app.add_subcommand("problems", "The problem suite: operators, weights, shapes (agent-visible facts)");
  problems->require_subcommand(1);
  auto* l = problems->add_subcommand("list", "List operators with weight, phase, shape count and dtype");
  l->add_flag("--json", g.json, "Machine-readable output (atrex.problems/1)");
  l->callback([&] { rc = list(g); });
  auto* s = problems->add_subcommand("show", "Show one operator's signature, semantics and shapes");
  static std::string name;
  s->add_option("operator", name, "Operator name")->required();
  s->add_flag("--json", g.json, "Machine-readable output (atrex.problem/1)");
  s->callback([&] { rc = show(g, name); });
}

}  // namespace atrex::cli
