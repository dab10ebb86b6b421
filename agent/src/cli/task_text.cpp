#include "cli/task_text.h"

#include <fmt/format.h>

#include "atrex/agent/direction.h"
#include "atrex/common/embedded.h"
#include "openai/prompt.h"

namespace atrex::agent::openai::abi_data {
std::span<const EmbeddedFile> embedded_files();  // agent/CMakeLists.txt (atrex_embed_files)
}

namespace atrex::agent::cli {

namespace {

// What to write and how it is measured: atrex's native candidate (the C ABI) or, for Python
// targets, Atrex-Bench's module (target.h).
std::string what_to_write(Target target, const std::string& candidate, int evals) {
  std::string s;
  if (is_python(target)) {
    s = "Write exactly " + python_format_text(target) + "\n\nThe file is `" + candidate +
        "` in this folder. ";
  } else {
    s = fmt::format(
        "Write ONE complete source file, `{}`, in this folder. It includes \"atrex/candidate.h\" "
        "(and optionally \"atrex/candidate_util.h\"; both are in include/atrex/ here, nothing "
        "else of the project exists) and exports `ATREX_CANDIDATE_EXPORT int "
        "atrex_candidate_run(const AtrexLaunch* launch)`, which computes every output for the "
        "launch's tensors and parameters on the launch's stream and returns 0. The kernels must "
        "be your own: time in vendor libraries counts as a fallback.\n\n",
        candidate);
  }
  s += fmt::format(
      "Measure it with `atrex-eval {cand}` (at most {evals} times in one session): it {build} "
      "the file, checks it on fresh random inputs against the reference and times it on the "
      "quick shapes, and prints per shape the status, the first errors, the time, the roofline "
      "time and S_j = T_roofline / T (1.0 = at the roofline). The goal is the highest median S_j "
      "with every shape correct. When you stop, `{cand}` must hold your best correct version: it "
      "is what gets scored (then on every shape of the sweep, all seeds).\n\n",
      fmt::arg("cand", candidate), fmt::arg("evals", evals),
      fmt::arg("build", is_python(target) ? "imports" : "compiles"));
  return s;
}

std::string task_md(const ProposalContext& ctx, const std::vector<const KbNote*>& notes,
                    Target target, const std::string& candidate, const std::string& reference,
                    int evals) {
  const std::string best = "best" + candidate_extension(target, ctx.backend);
  std::string s = fmt::format("# Task: a faster `{}` kernel ({} backend", ctx.op,
                              backend_name(ctx.backend));
  if (ctx.task) s += fmt::format(", hardware profile {}", ctx.task->hardware);
  s += ")\n\n";
  s += what_to_write(target, candidate, evals);
  s += "## Files here\n\n";
  s += fmt::format("- `{}`: your candidate (absent until you write it{})\n", candidate,
                   ctx.best && ctx.best->valid() ? "; it starts as the best kernel so far" : "");
  s += fmt::format("- `{}`: the reference semantics (correct, not fast)\n", reference);
  if (is_python(target)) {
    s += fmt::format("- `{}`: the reference's signature, which your Model keeps\n",
                     kSignatureFile);
  } else {
    s += "- `include/atrex/candidate.h`, `include/atrex/candidate_util.h`: the candidate ABI\n";
  }
  for (const KbNote* n : notes) s += fmt::format("- `kb/{}`: {}\n", n->path, n->title);
  s += "- `FEEDBACK.md` (from the second session on): the results of your last candidate\n";
  s += "- `" + best + "` (once one exists): the best correct candidate so far\n\n";
  s += "## The operator\n\n";
  const std::string facts = openai::operator_facts(ctx.op);
  s += facts.empty() ? "(no native definition: see the reference)\n" : facts;
  if (is_python(target)) {
    const std::string sig = python_signature(ctx.op);
    if (!sig.empty()) {
      s += "\nThe reference's signature (`" + std::string(kSignatureFile) +
           "`; your Model keeps it):\n\n```python\n" + sig + "```\n";
    }
  }
  if (ctx.task) {
    s += fmt::format(
        "\nQuick evaluations (atrex-eval) measure shapes {}; the final evaluation shapes {}. "
        "Correctness: {} seeds, atol {}, rtol {} unless the operator says otherwise.\n",
        fmt::join(ctx.task->quick_shapes, ", "), fmt::join(ctx.task->full_shapes, ", "),
        ctx.task->quick_settings.seeds, ctx.task->quick_settings.atol,
        ctx.task->quick_settings.rtol);
  }
  if (ctx.best && ctx.best->valid()) {
    s += fmt::format(
        "\n## Where you start\n\nAn earlier session reached a quick median S_j of {:.4f} with "
        "the candidate in `{}` and then stopped improving. Start from it, but take a different "
        "optimisation direction than the one it embodies.\n",
        ctx.best->score, best);
  }
  // The generation's direction (direction.h): chosen when it started, one the audit trail had
  // not tried, so parallel and later generations explore different techniques.
  if (ctx.direction && !ctx.direction->title.empty()) {
    s += fmt::format("\n## This attempt's optimisation direction\n\n{}\n", ctx.direction->title);
    if (!ctx.direction->text.empty()) s += "\n" + ctx.direction->text + "\n";
  }
  return s;
}

}  // namespace

TaskFiles task_files(const ProposalContext& ctx, const std::vector<const KbNote*>& notes,
                     Target target, int evals_per_run) {
  TaskFiles files;
  const std::string candidate = workspace_candidate_name(target, ctx.backend);
  std::string reference = "reference/(none)";
  if (auto ref = openai::reference_source(ctx.op, ctx.backend)) {
    reference = "reference/" + std::filesystem::path(ref->first).filename().string();
    files.emplace_back(reference, ref->second);
  }
  if (is_python(target)) {
    // The Python signature instead of the C ABI: the ABI is not the candidate's interface.
    if (std::string sig = python_signature(ctx.op); !sig.empty())
      files.emplace_back(kSignatureFile, std::move(sig));
  } else {
    for (const char* header : {"candidate.h", "candidate_util.h"}) {
      if (auto text = find_embedded(openai::abi_data::embedded_files(), header)) {
        files.emplace_back(std::string("include/atrex/") + header, std::string(*text));
      }
    }
  }
  for (const KbNote* n : notes) {
    files.emplace_back("kb/" + n->path, "# " + n->title + "\n\n" + n->body);
  }
  files.emplace(files.begin(), "TASK.md",
                task_md(ctx, notes, target, candidate, reference, evals_per_run));
  return files;
}

std::string cli_prompt(const ProposalContext& ctx, Target target, int evals_per_run) {
  const std::string candidate = workspace_candidate_name(target, ctx.backend);
  return fmt::format(
      "You are optimising the `{op}` kernel in this folder. Read TASK.md first{fb}. Write the "
      "complete candidate{what} to {cand}, measure it with `atrex-eval {cand}` (at most {n} times), "
      "and keep improving it. When you stop, {cand} must hold your best correct version; end "
      "with a short summary of what you tried and measured.",
      fmt::arg("op", ctx.op), fmt::arg("cand", candidate), fmt::arg("n", evals_per_run),
      fmt::arg("what", target == Target::kTriton  ? " (a Python module with Triton kernels)"
                       : target == Target::kTorch ? " (a Python module, PyTorch only)"
                                                  : ""),
      fmt::arg("fb", ctx.memory && !ctx.memory->empty()
                         ? ", then FEEDBACK.md (the results of your last candidate)"
                         : ""));
}

}  // namespace atrex::agent::cli
