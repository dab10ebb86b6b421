#include "openai/prompt.h"

#include <fmt/format.h>

#include "atrex/common/embedded.h"
#include "atrex/problems/operator.h"

namespace atrex::agent::openai {

// Provided by the generated sources of atrex_embed_files (agent/CMakeLists.txt).
namespace reference_data {
std::span<const EmbeddedFile> embedded_files();
}
namespace abi_data {
std::span<const EmbeddedFile> embedded_files();
}

namespace {

const char* fence(Backend b) { return candidate_fence(Target::kNative, b); }

std::string language(Backend b) {
  switch (b) {
    case Backend::kCuda: return "CUDA C++ (.cu, compiled by nvcc into a shared object)";
    case Backend::kHip: return "HIP C++ (.hip, compiled by hipcc into a shared object)";
    case Backend::kCpu: return "C++20 (.cpp, compiled by the host c++ into a shared object)";
  }
  return "";
}

std::string dims(const std::vector<std::string>& d) {
  std::string s;
  for (const auto& x : d) s += (s.empty() ? "" : ", ") + x;
  return "[" + s + "]";
}

std::string block(const std::string& lang, std::string_view text) {
  return fmt::format("```{}\n{}{}```\n", lang, text, text.ends_with('\n') ? "" : "\n");
}

std::string notes_text(const std::vector<const KbNote*>& notes) {
  std::string s;
  for (const KbNote* n : notes) s += fmt::format("### {}\n\n{}\n\n", n->title, n->body);
  return s;
}

std::string shape_line(const EvalRecord& r) {
  std::string s = fmt::format("- shape {}: {}", r.shape_id, eval_status_name(r.status));
  if (r.status == EvalStatus::kOk) {
    const double t = r.timing ? r.timing->time_us_median : 0;
    s += fmt::format(
        ", time {:.2f} us (median; IQR {:.2f} us), roofline time {:.2f} us, S_j {:.4f}", t,
        r.timing ? r.timing->time_us_iqr : 0.0, r.t_roofline_us, r.s_j.value_or(0.0));
    if (r.dsl_share) {
      s += fmt::format(", {:.0f}% of the GPU time in your own kernels", *r.dsl_share * 100);
    }
  } else if (r.status == EvalStatus::kWrongResult) {
    s += fmt::format(" (max abs error {:.4g}, max rel error {:.4g}): {}", r.max_abs_error,
                     r.max_rel_error, r.error.substr(0, 1500));
  } else if (r.status != EvalStatus::kCompileError) {
    s += ": " + r.error.substr(0, 1500);
  }
  return s + "\n";
}

}  // namespace

std::string operator_facts(const std::string& op) {
  const problems::OperatorDef* def = problems::find_native_operator(op);
  if (!def) return "";
  std::string s = def->semantics + "\n\ninputs (read-only):\n";
  for (const auto& t : def->inputs) {
    s += fmt::format("  {:<16} {:<8} {:<32} {}\n", t.name, problems::dtype_name(t.dtype),
                     dims(t.dims), t.doc);
  }
  s += "outputs (poisoned before each call, so write every element, unless they start as an "
       "input):\n";
  for (const auto& t : def->outputs) {
    s += fmt::format(
        "  {:<16} {:<8} {:<32} {}{}\n", t.name, problems::dtype_name(t.dtype), dims(t.dims), t.doc,
        t.initial_from.empty()
            ? ""
            : " (starts as a copy of input " + t.initial_from + "; update it in place)");
  }
  s += "parameters:\n";
  for (const auto& p : def->params) {
    s += fmt::format("  {:<22} {}{}\n", p.name, p.doc,
                     p.required ? "" : fmt::format(" (default {})", p.default_value.dump()));
  }
  if (def->atol || def->rtol) {
    s += fmt::format("tolerances for this operator: atol {}, rtol {}\n",
                     def->atol ? fmt::format("{}", *def->atol) : "as the sweep's",
                     def->rtol ? fmt::format("{}", *def->rtol) : "as the sweep's");
  }
  return s;
}

std::optional<std::pair<std::string, std::string>> reference_source(const std::string& op,
                                                                    Backend backend) {
  const std::string path = op + (backend == Backend::kCpu ? "/naive.cpp" : "/naive.cu");
  auto text = find_embedded(reference_data::embedded_files(), path);
  if (!text) return std::nullopt;
  return std::pair{"kernels/reference/" + path, std::string(*text)};
}

namespace {

std::string python_system_message(Backend backend, Target target) {
  return fmt::format(
      "You are an expert GPU kernel engineer. You write one candidate for one operator of the "
      "Atrex-Bench suite at a time, and it is measured against the hardware roofline ({} "
      "backend).\n\n"
      "Produce exactly {}\n\n"
      "Put the whole file in ONE fenced code block tagged ```python; keep explanations short "
      "and outside the block. Each candidate is imported, checked on fresh random inputs against "
      "the reference, and timed on the shapes listed; you then get the results and write an "
      "improved complete file. Per shape, S_j = T_roofline / T (1.0 = at the roofline); the goal "
      "is the highest median S_j with every shape correct.",
      backend_name(backend), python_format_text(target));
}

}  // namespace

std::string system_message(Backend backend, Target target) {
  if (is_python(target)) return python_system_message(backend, target);
  return fmt::format(
      "You are an expert GPU kernel engineer. You write one candidate kernel for one operator "
      "of the Atrex-Bench suite at a time, and it is measured against the hardware roofline.\n\n"
      "Produce exactly one complete source file in {lang}. It includes \"atrex/candidate.h\" "
      "(and optionally \"atrex/candidate_util.h\"; nothing else from the project exists), and "
      "exports the C entry point `ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const "
      "AtrexLaunch* launch)` that computes every output for the launch's tensors and parameters "
      "on the launch's stream and returns 0 (non-zero with an error message on failure). The "
      "kernels must be your own: time spent in vendor libraries counts as a fallback.\n\n"
      "Put the whole file in ONE fenced code block tagged ```{fence}; keep explanations short "
      "and outside the block. Each candidate is compiled, checked on fresh random inputs against "
      "the reference, and timed on the shapes listed; you then get the results and write an "
      "improved complete file. Per shape, S_j = T_roofline / T (1.0 = at the roofline); the "
      "goal is the highest median S_j with every shape correct.",
      fmt::arg("lang", language(backend)), fmt::arg("fence", fence(backend)));
}

std::string problem_message(const ProposalContext& ctx, const std::vector<const KbNote*>& notes,
                            Target target) {
  const bool python = is_python(target);
  const char* tag = candidate_fence(target, ctx.backend);
  std::string s = fmt::format("# Operator `{}` ({} backend", ctx.op, backend_name(ctx.backend));
  if (ctx.task) s += fmt::format(", hardware profile {}", ctx.task->hardware);
  s += ")\n\n";
  const std::string facts = operator_facts(ctx.op);
  s += facts.empty() ? "(no native definition: see the reference below)\n" : facts;
  if (ctx.task) {
    s += fmt::format(
        "\nQuick evaluations measure shapes {}; the final evaluation shapes {} (shape ids of "
        "`atrex problems show {}`). Correctness: {} seeds, atol {}, rtol {} unless the operator "
        "says otherwise.\n",
        fmt::join(ctx.task->quick_shapes, ", "), fmt::join(ctx.task->full_shapes, ", "), ctx.op,
        ctx.task->quick_settings.seeds, ctx.task->quick_settings.atol,
        ctx.task->quick_settings.rtol);
  }
  if (python) {
    const std::string sig = python_signature(ctx.op);
    if (!sig.empty()) {
      s += "\n## The reference's signature (your Model keeps it)\n\n" + block("python", sig);
    }
  }
  if (auto ref = reference_source(ctx.op, ctx.backend)) {
    s += fmt::format("\n## Reference semantics ({}: correct, not fast)\n\n", ref->first);
    s += block(ctx.backend == Backend::kCpu ? "cpp" : "cuda", ref->second);
  }
  for (const char* header : {"candidate.h", "candidate_util.h"}) {
    if (python) break;
    if (auto text = find_embedded(abi_data::embedded_files(), header)) {
      s += fmt::format("\n## The candidate ABI: atrex/{}\n\n", header) + block("c", *text);
    }
  }
  if (!notes.empty()) s += "\n## Optimisation notes\n\n" + notes_text(notes);
  if (ctx.direction && !ctx.direction->text.empty()) {
    s += fmt::format(
        "\n## This attempt's optimisation direction\n\n{}\n\n{}\n\nBuild the kernel around "
        "this technique (other attempts explore other directions).\n",
        ctx.direction->title, ctx.direction->text);
  }
  if (ctx.best && ctx.best->valid()) {
    s += fmt::format(
        "\n## The best kernel so far (quick median S_j {:.4f})\n\nAn earlier attempt stopped "
        "improving on it. Start from it, but take the direction above rather than the one it "
        "embodies{}.\n\n",
        ctx.best->score,
        ctx.direction || notes.empty()
            ? ""
            : fmt::format(" (for example: {})", notes[ctx.generation % notes.size()]->title));
    s += block(tag, ctx.best->source);
  }
  s += fmt::format("\nWrite the candidate now: the complete file in one ```{} block.\n", tag);
  return s;
}

std::optional<Bottleneck> measured_bottleneck(const Attempt& attempt) {
  if (attempt.records.empty()) return std::nullopt;
  for (const auto& r : attempt.records) {
    if (r.status != EvalStatus::kOk || !r.timing || r.timing->time_us_median >= 15.0)
      return std::nullopt;
  }
  return Bottleneck::kLatency;
}

std::string feedback_message(const Attempt& attempt, const ProposalContext& ctx,
                             const std::vector<const KbNote*>& notes, Target target) {
  if (!attempt.failure.empty()) return attempt.failure;
  std::string s = fmt::format("Results of your candidate (iteration {}):\n", attempt.iteration);
  s += results_text(attempt, ctx);
  if (!notes.empty()) s += "\n## More optimisation notes\n\n" + notes_text(notes);
  s += fmt::format("\n{} Reply with the complete new file in one ```{} block.\n",
                   attempt.correct ? "Make it faster while keeping every shape correct."
                                   : "Fix the candidate first: it must be correct on every shape.",
                   candidate_fence(target, ctx.backend));
  return s;
}

std::string results_text(const Attempt& attempt, const ProposalContext& ctx) {
  std::string s;
  std::string compile_error;
  for (const auto& r : attempt.records) {
    s += shape_line(r);
    if (r.status == EvalStatus::kCompileError && compile_error.empty()) compile_error = r.error;
  }
  if (!compile_error.empty()) {
    s += "\nThe compiler said:\n" + block("", compile_error.substr(0, 6000));
  }
  s += fmt::format("\nSummary: {}.\n", attempt.summary);
  if (ctx.best && ctx.best->valid()) {
    s += fmt::format("Best correct candidate so far: median S_j {:.4f}.\n", ctx.best->score);
  }
  return s;
}

}  // namespace atrex::agent::openai
