// Sweep reports: atrex.report/1 (JSON, for machines) and Markdown (for people), with the
// paper's headline view: per agent S_agg, correctness rate, target-DSL adoption, and the
// per-operator S_i breakdown with weights.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "atrex/common/json_io.h"
#include "atrex/scoring/aggregate.h"

namespace atrex::scoring {

inline constexpr const char* kReportSchema = "atrex.report/1";

struct ReportContext {
  std::string sweep_id;
  std::string sweep_name;
  std::string suite_dir;
  std::string hardware;  // profile name
  std::string backend;
  std::string device;
  std::string created_at;
};

Json report_json(const ReportContext& ctx, const std::vector<AgentScore>& agents);

// Markdown: a headline table (one row per agent) and one per-operator table per agent.
// Operators not attempted are summarised in one line rather than listed as rows.
std::string report_markdown(const ReportContext& ctx, const std::vector<AgentScore>& agents);

// `text` as the content of one Markdown (GFM) table cell: `|` and `\` escaped, `&`, `<`, `>` as
// entities (compiler logs hold `#include <...>`, which would render as an HTML tag), and each
// line break as `<br>`, so that free text (errors, agent names) never splits or ends a row.
std::string markdown_cell(std::string_view text);

// The per-operator table of one agent as fixed-width text (terminal output).
std::string agent_table_text(const AgentScore& agent);

}  // namespace atrex::scoring
