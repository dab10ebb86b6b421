// The sweep report model (atrex.report/1): per agent S_agg, correctness rate, target-DSL
// adoption and the per-operator S_i breakdown with weights (the paper's headline view, §4), and
// the tasks the sweep completed without (dead letters). One model, several renderers:
// to_json (machines), render_markdown (people); HTML with plots and JUnit plug in beside them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "atrex/common/json_io.h"
#include "atrex/common/queue.h"
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
  std::string created_at;  // UTC, ISO 8601
};

// A task the sweep completed without: its workers failed or died on every delivery.
struct DeadLetterSummary {
  std::string queue;  // "eval" or "agent"
  std::string message_id;
  int deliveries = 0;
  std::string error;  // the last failure
  std::string kind;   // "eval", "agent", or "" when the body is not a task at all
  std::string op;
  std::string agent;
  // eval tasks
  std::string task_id, purpose, candidate, candidate_sha256;
  // agent tasks
  int generation = 0;
};
// What a dead letter of `stream` says, read leniently: a body that could not be parsed as a
// task is exactly what may end up dead-lettered, and its report entry must still be written.
DeadLetterSummary summarize_dead_letter(std::string_view stream, const DeadLetter& d);
Json to_json(const DeadLetterSummary& d);

struct Report {
  ReportContext context;
  std::vector<AgentScore> agents;
  std::vector<DeadLetterSummary> dead_letters;
};

Json to_json(const Report& report);

// Markdown: a headline table (one row per agent), one per-operator table per agent (operators
// not attempted summarised in one line), and the dead-lettered tasks.
std::string render_markdown(const Report& report);

// `text` as the content of one Markdown (GFM) table cell: `|` and `\` escaped, `&`, `<`, `>` as
// entities (compiler logs hold `#include <...>`, which would render as an HTML tag), and each
// line break as `<br>`, so that free text (errors, agent names) never splits or ends a row.
std::string markdown_cell(std::string_view text);

// "model usage: P prompt + C completion tokens, X USD, R requests".
std::string usage_text(const TokenUsage& u);

// The per-operator table of one agent as fixed-width text (terminal output); the model usage
// line when the agent's provider sent requests.
std::string agent_table_text(const AgentScore& agent);

}  // namespace atrex::scoring
