// The sweep report model (atrex.report/1): per agent S_agg, correctness rate, target-DSL
// adoption and the per-operator S_i breakdown with weights (the paper's headline view, §4), and
// the tasks the sweep completed without (dead letters). One model, several renderers:
// to_json (machines), render_markdown (people); HTML with plots and JUnit plug in beside them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "atrex/common/error.h"
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

// One sweep a report was reduced from (a report may merge several: one per agent, other days).
struct SweepSummary {
  std::string sweep_id;
  std::string name;
  std::string source;  // the results folder, or "redis://host:port (sweep <id>)"
  std::string hardware;
  std::string backend;
  std::string device;
  std::string status;  // the manifest's: running, interrupted, complete ...
  int64_t records_read = 0;         // atrex.eval/1 records scored (final evaluations)
  int64_t lines_read = 0;           // entries read from the source
  int64_t duplicates_dropped = 0;   // entries whose key an earlier source already gave
  int64_t finals_expected = 0;      // agents x operators of its manifest
  int64_t finals_found = 0;         // atrex.final/1 markers read
  // The builds that wrote its results (wire/manifest.h describe(BuildRecord)), oldest first;
  // empty for manifests written before atrex recorded them.
  std::vector<std::string> builds;
};

// A baseline folder (reference kernels, a previous night): its best S_i per operator and its
// time per (operator, shape), shown as extra columns.
struct BaselineSummary {
  std::string label;
  std::string source;
  std::string sweep_id;
};

struct Report {
  ReportContext context;  // of the first sweep (sweeps[0]); kept for single-sweep readers
  std::vector<AgentScore> agents;
  std::vector<DeadLetterSummary> dead_letters;
  std::vector<SweepSummary> sweeps;
  std::vector<BaselineSummary> baselines;
  // True when some (agent, operator) of a manifest has no final marker yet (an interrupted or
  // running sweep): its scores are a lower bound. Renderers say so at the top.
  bool partial = false;
  std::vector<std::string> warnings;  // skipped truncated records, merged agent names ...
};

Json to_json(const Report& report);
// Strict read of an atrex.report/1 document (every member known; kInvalidInput naming `source`
// and the field).
Result<Report> report_from_json(const Json& j, const std::string& source);

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
