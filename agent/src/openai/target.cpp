#include "openai/target.h"

#include <fmt/format.h>

#include "atrex/problems/operator.h"

namespace atrex::agent {

const char* target_name(Target t) {
  switch (t) {
    case Target::kNative: return "cuda";
    case Target::kTriton: return "triton";
    case Target::kTorch: return "torch";
  }
  return "cuda";
}

Result<Target> parse_target(const JsonField& f) {
  ATREX_ASSIGN_OR_RETURN(std::string s, f.as_string());
  if (s == "cuda") return Target::kNative;
  if (s == "triton") return Target::kTriton;
  if (s == "torch") return Target::kTorch;
  return f.fail("expected cuda, triton or torch");
}

Target target_of(const Json& options) {
  if (!options.is_object() || !options.contains("target") || !options["target"].is_string())
    return Target::kNative;
  const std::string s = options["target"].get<std::string>();
  return s == "triton" ? Target::kTriton : s == "torch" ? Target::kTorch : Target::kNative;
}

std::string candidate_extension(Target t, Backend backend) {
  return is_python(t) ? ".py" : source_extension(backend);
}

std::string python_signature(const std::string& op) {
  const problems::OperatorDef* def = problems::find_native_operator(op);
  if (!def) return "";
  auto sizes_a_tensor = [&](const std::string& name) {
    for (const auto* list : {&def->inputs, &def->outputs}) {
      for (const auto& t : *list) {
        for (const auto& d : t.dims) {
          if (d.find(name) != std::string::npos) return true;
        }
      }
    }
    return false;
  };
  std::string init;
  for (const auto& p : def->params) {
    if (sizes_a_tensor(p.name)) continue;
    init += ", " + p.name;
    if (!p.required) init += "=" + p.default_value.dump();
  }
  auto dims = [](const std::vector<std::string>& d) {
    std::string s;
    for (const auto& x : d) s += (s.empty() ? "" : ", ") + x;
    return "[" + s + "]";
  };
  std::string args, doc, outs;
  for (const auto& t : def->inputs) {
    args += ", " + t.name;
    doc += fmt::format("        #   {}: {} {}\n", t.name, problems::dtype_name(t.dtype), dims(t.dims));
  }
  for (const auto& t : def->outputs) {
    outs += (outs.empty() ? "" : ", ") + t.name;
    doc += fmt::format("        # returns {}: {} {}{}\n", t.name, problems::dtype_name(t.dtype),
                       dims(t.dims),
                       t.initial_from.empty()
                           ? ""
                           : " (forward receives it in place of input " + t.initial_from +
                                 "; update it in place, return it or leave it out)");
  }
  return fmt::format(
      "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
      "    def __init__(self{}):\n        super().__init__()\n        ...\n\n"
      "    def forward(self{}):\n{}        return {}\n",
      init, args, doc, outs);
}

}  // namespace atrex::agent
