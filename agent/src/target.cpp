#include "atrex/agent/target.h"

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

Result<void> parse_target_option(const JsonField& agent, Json& o) {
  if (!agent.has("target")) return ok();
  ATREX_ASSIGN_OR_RETURN(auto f, agent.at("target"));
  ATREX_ASSIGN_OR_RETURN(Target t, parse_target(f));
  if (t != Target::kNative) o["target"] = target_name(t);
  return ok();
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

std::string workspace_candidate_name(Target t, Backend backend) {
  return is_python(t) ? "generated_kernel.py" : "kernel" + std::string(source_extension(backend));
}

const char* candidate_fence(Target t, Backend backend) {
  if (is_python(t)) return "python";
  return backend == Backend::kCuda ? "cuda" : backend == Backend::kHip ? "hip" : "cpp";
}

std::optional<std::string> target_unsupported(Target t, Backend backend) {
  if (!is_python(t)) return std::nullopt;
  if (backend == Backend::kHip) {
    return fmt::format("the hip backend evaluates no Python candidates (target {} runs on cpu "
                       "or cuda; target cuda writes HIP on hip)",
                       target_name(t));
  }
  if (t == Target::kTriton && backend == Backend::kCpu) {
    return std::string("Triton kernels need the cuda backend (on cpu, target torch measures a "
                       "PyTorch-only module)");
  }
  return std::nullopt;
}

// The release's constraints (prompt/*/constraints.md), in atrex's words.
std::string python_format_text(Target t) {
  const char* compute =
      t == Target::kTriton
          ? "Its main compute path is your own Triton kernels (`@triton.jit` functions launched "
            "from `forward` with `kernel[grid](...)`): time in kernels Triton did not compile "
            "(PyTorch's, cuBLAS's, cuDNN's) counts as a PyTorch fallback, not as your kernel."
          : "Write it with PyTorch operations only (no custom kernels): this target measures a "
            "PyTorch implementation, which counts as a fallback (DSL share 0).";
  return fmt::format(
      "one complete Python file, generated_kernel.py, that defines `class "
      "Model(torch.nn.Module)` with the reference's `__init__` and `forward` signature (given "
      "below). {}\n\nRules: do not import or wrap the reference; no torch.compile, no CUDA "
      "graphs, no new processes or threads; `forward` receives the inputs as tensors on the "
      "device (contiguous, read-only: never write them) and returns the outputs (a tensor, or a "
      "tuple in the order listed) with the listed shapes and dtypes.",
      compute);
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
