#include "atrex/scoring/report.h"

#include <fmt/format.h>

namespace atrex::scoring {

namespace {

// "correct", plus a warning when S_j was capped on some shapes and a flag for ghost kernels.
std::string status_text(const OperatorScore& o) {
  std::string text = o.status;
  if (o.shapes_above_roofline > 0) {
    text += fmt::format(" ({} shape(s) capped at S_j = 1: measured faster than the roofline)",
                        o.shapes_above_roofline);
  }
  if (!o.unlaunched_kernels.empty()) {
    std::string names;
    for (size_t i = 0; i < o.unlaunched_kernels.size() && i < 3; ++i)
      names += (i ? ", " : "") + o.unlaunched_kernels[i];
    text +=
        fmt::format(" [{} kernel(s) defined but never launched: {}{}]", o.unlaunched_kernels.size(),
                    names, o.unlaunched_kernels.size() > 3 ? ", ..." : "");
  }
  return text;
}

std::string opt_pct(const std::optional<double>& v) {
  return v ? fmt::format("{:.1f}%", 100 * *v) : "n/a";
}

std::string not_attempted(const AgentScore& a) {
  std::string names;
  for (const auto& o : a.operators) {
    if (!o.attempted) names += (names.empty() ? "" : ", ") + o.name;
  }
  return names;
}

}  // namespace

std::string markdown_cell(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    switch (const char c = text[i]) {
      case '|': out += "\\|"; break;
      case '\\': out += "\\\\"; break;
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\r':
        if (i + 1 < text.size() && text[i + 1] == '\n') ++i;  // CRLF is one break
        out += "<br>";
        break;
      case '\n': out += "<br>"; break;
      default: out += c;
    }
  }
  return out;
}

DeadLetterSummary summarize_dead_letter(std::string_view stream, const DeadLetter& d) {
  DeadLetterSummary s;
  s.queue = std::string(stream);
  s.message_id = d.message_id;
  s.deliveries = d.delivery_count;
  s.error = d.last_error;
  const Json& b = d.body;
  auto str = [](const Json& j, const char* key) {
    return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>()
                                                                  : std::string();
  };
  s.kind = str(b, "kind");
  s.op = str(b, "operator");
  if (s.kind == "eval") {
    const Json c = b.is_object() && b.contains("candidate") ? b["candidate"] : Json::object();
    s.agent = str(c, "agent");
    s.task_id = str(b, "task_id");
    s.purpose = str(b, "purpose");
    s.candidate = str(c, "file_name");
    s.candidate_sha256 = str(c, "sha256");
  } else {
    const Json a = b.is_object() && b.contains("agent") ? b["agent"] : Json::object();
    s.agent = str(a, "name");
    if (b.is_object() && b.contains("generation") && b["generation"].is_number_integer()) {
      s.generation = b["generation"].get<int>();
    }
  }
  return s;
}

Json to_json(const DeadLetterSummary& d) {
  Json j{{"queue", d.queue},
         {"message_id", d.message_id},
         {"deliveries", d.deliveries},
         {"error", d.error},
         {"kind", d.kind},
         {"operator", d.op},
         {"agent", d.agent}};
  if (d.kind == "eval") {
    j["task_id"] = d.task_id;
    j["purpose"] = d.purpose;
    j["candidate"] = d.candidate;
    j["candidate_sha256"] = d.candidate_sha256;
  } else {
    j["generation"] = d.generation;
  }
  return j;
}

std::string usage_text(const TokenUsage& u) {
  // requests: HTTP requests of a model server, or runs of a coding-agent CLI (cli provider),
  // whose own turns follow.
  return fmt::format("model usage: {} prompt + {} completion tokens, {:.4f} USD, {} requests{}",
                     u.prompt_tokens, u.completion_tokens, u.cost_usd, u.requests,
                     u.turns > 0 ? fmt::format(", {} agent turns", u.turns) : "");
}

std::string agent_table_text(const AgentScore& a) {
  std::string out = fmt::format("{:<30} {:>7} {:>8} {:>9} {:>9}  {}\n", "operator", "weight", "S_i",
                                "correct", "w*S_i", "status");
  int skipped = 0;
  double skipped_weight = 0;
  for (const auto& o : a.operators) {
    if (!o.attempted) {
      ++skipped;
      skipped_weight += o.weight;
      continue;
    }
    out += fmt::format("{:<30} {:>7.4f} {:>8.4f} {:>9} {:>9.5f}  {}\n", o.name, o.weight, o.s_i,
                       fmt::format("{}/{}", o.shapes_correct, o.shapes_evaluated), o.weight * o.s_i,
                       status_text(o));
  }
  if (skipped > 0) {
    out += fmt::format("{:<30} {:>7.4f} {:>8.4f} {:>9} {:>9.5f}  not attempted (count as 0)\n",
                       fmt::format("({} other operators)", skipped), skipped_weight, 0.0, "-", 0.0);
    out += fmt::format("not attempted: {}\n", not_attempted(a));
  }
  out += fmt::format(
      "S_agg = {:.5f}   correctness rate = {:.1f}% ({}/{} operators)   DSL adoption = {}\n",
      a.s_agg, 100 * a.correctness_rate, a.operators_correct, a.operators_attempted,
      opt_pct(a.dsl_adoption_rate));
  if (a.usage.requests > 0) out += usage_text(a.usage) + "\n";
  return out;
}

namespace {

std::string dead_letters_markdown(const std::vector<DeadLetterSummary>& dead) {
  std::string md =
      "\n## Dead-lettered tasks\n\nThe sweep completed without these: their workers failed or died "
      "on every delivery.\n\n| queue | operator | agent | candidate | deliveries | last error |\n"
      "|---|---|---|---|---|---|\n";
  for (const auto& d : dead) {
    md += fmt::format("| {} | {} | {} | {} | {} | {} |\n", markdown_cell(d.queue),
                      markdown_cell(d.op), markdown_cell(d.agent), markdown_cell(d.candidate),
                      d.deliveries, markdown_cell(d.error));
  }
  return md;
}

// The paper's correctness-illusion view: correct operators that are fallbacks.
std::string illusion_markdown(const std::vector<AgentScore>& agents) {
  std::string md =
      "\n## Correctness illusion\n\nCorrect on every shape, but the target-DSL share of the GPU "
      "time is under the threshold: a fallback to a vendor library or to PyTorch (a Python "
      "candidate without target-DSL kernels; on the cpu backend every Python candidate).\n\n"
      "| agent | correct operators | "
      "share measured | fallbacks | fallback operators |\n|---|---:|---:|---:|---|\n";
  for (const auto& a : agents) {
    int measured = 0;
    for (const auto& o : a.operators) {
      if (o.status == "correct" && o.dsl_share) ++measured;
    }
    const std::string names = fallback_operators(a);
    md += fmt::format("| {} | {} | {} | {} | {} |\n", markdown_cell(a.agent), a.operators_correct,
                      measured, a.operators_fallback,
                      measured ? markdown_cell(names.empty() ? "-" : names)
                               : "not measured (no target-DSL share in the records)");
  }
  return md;
}

}  // namespace

std::string render_markdown(const Report& report) {
  const ReportContext& ctx = report.context;
  const std::vector<AgentScore>& agents = report.agents;
  std::string md = fmt::format("# atrex sweep report: {}\n\n",
                               ctx.sweep_name.empty() ? ctx.sweep_id : ctx.sweep_name);
  if (report.partial) {
    md += "> **Partial results**: some (agent, operator) pairs have no final evaluation yet (an "
          "interrupted or running sweep); they count as S_i = 0, so S_agg is a lower bound.\n\n";
  }
  md += fmt::format(
      "- sweep id: `{}`\n- hardware profile: `{}` (backend `{}`, device `{}`)\n- created: {}\n",
      ctx.sweep_id, ctx.hardware, ctx.backend, ctx.device, ctx.created_at);
  if (report.sweeps.size() > 1) {
    for (const auto& s : report.sweeps) {
      md += fmt::format("- merged sweep `{}` ({}, {}): `{}`, {} of {} final markers\n",
                        s.sweep_id, markdown_cell(s.name), s.status, markdown_cell(s.source),
                        s.finals_found, s.finals_expected);
    }
  }
  for (const auto& s : report.sweeps) {
    for (size_t i = 0; i < s.builds.size(); ++i) {
      md += fmt::format("- {} `{}`: {}\n", i == 0 ? "built by" : "resumed by", s.sweep_id,
                        markdown_cell(s.builds[i]));
    }
  }
  for (const auto& b : report.baselines) {
    md += fmt::format("- baseline `{}`: `{}`\n", markdown_cell(b.label), markdown_cell(b.source));
  }
  for (const auto& w : report.warnings) md += "- warning: " + markdown_cell(w) + "\n";
  md += "\n";
  md +=
      "| agent | S_agg | correctness rate | target-DSL adoption | operators correct "
      "|\n|---|---:|---:|---:|---:|\n";
  for (const auto& a : agents) {
    md += fmt::format("| {} | {:.5f} | {:.1f}% | {} | {}/{} |\n", markdown_cell(a.agent), a.s_agg,
                      100 * a.correctness_rate, opt_pct(a.dsl_adoption_rate), a.operators_correct,
                      a.operators_attempted);
  }
  md += illusion_markdown(agents);
  const bool base = !report.baselines.empty();
  for (const auto& a : agents) {
    md += fmt::format(
        "\n## {}\n\n| operator | weight | S_i | S_i 95% CI | {}shapes correct | noisy shapes | "
        "w·S_i | status |\n|---|---:|---:|---:|{}---:|---:|---:|---|\n",
        markdown_cell(a.agent), base ? "baseline S_i | " : "", base ? "---:|" : "");
    int skipped = 0;
    double skipped_weight = 0;
    for (const auto& o : a.operators) {
      if (!o.attempted) {
        ++skipped;
        skipped_weight += o.weight;
        continue;
      }
      std::string status = status_text(o);
      if (!o.first_error.empty()) status += " (" + o.first_error.substr(0, 120) + ")";
      std::string base_cell;
      if (base) base_cell = (o.baseline_s_i ? fmt::format("{:.4f}", *o.baseline_s_i) : "-") + " | ";
      const std::string ci = o.s_i_ci_low && o.s_i_ci_high
                                 ? fmt::format("{:.4f}–{:.4f}", *o.s_i_ci_low, *o.s_i_ci_high)
                                 : "-";
      md += fmt::format("| {} | {:.4f} | {:.4f} | {} | {}{}/{} | {} | {:.5f} | {} |\n",
                        markdown_cell(o.name), o.weight, o.s_i, ci, base_cell, o.shapes_correct,
                        o.shapes_evaluated, o.shapes_noisy, o.weight * o.s_i,
                        markdown_cell(status));
    }
    if (skipped > 0) {
      md += fmt::format(
          "\n{} operators (total weight {:.4f}) were not attempted and count as S_i = 0: {}.\n",
          skipped, skipped_weight, not_attempted(a));
    }
    md += "\nS_i 95% CI: a bootstrap over each shape's timing samples (docs/reports.md "
          "\"Noise\"); noisy shapes: relative standard error above the sweep's target_rse.\n";
    md += fmt::format("\n**S_agg = {:.5f}**\n", a.s_agg);
    if (a.usage.requests > 0) md += "\n" + usage_text(a.usage) + "\n";
  }
  if (!report.dead_letters.empty()) md += dead_letters_markdown(report.dead_letters);
  return md;
}

}  // namespace atrex::scoring
