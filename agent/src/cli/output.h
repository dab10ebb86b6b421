// What a coding-agent CLI's output says about its run (anchors-agents.md §3):
//  - claude `-p --output-format json`: one result object {type: "result", subtype, is_error,
//    num_turns, result, total_cost_usd (older: cost_usd), usage: {input_tokens,
//    cache_creation_input_tokens, cache_read_input_tokens, output_tokens}}; also accepted: a
//    JSON array of messages or stream-json lines, whose last `result` object counts;
//  - codex `exec --json`: JSONL events; turn.completed {usage: {input_tokens,
//    cached_input_tokens, output_tokens}} per turn, item.completed with an agent_message item
//    {text}, error / turn.failed {error: {message}};
//  - gemini `-p --output-format json`: {response, stats: {models: {<name>: {api:
//    {totalRequests}, tokens: {prompt, candidates, thoughts}}}}, error: {message}};
//  - text: nothing is parsed (the output's tail is the final text).
#pragma once

#include <optional>
#include <string>

#include "cli/options.h"

namespace atrex::agent::cli {

struct CliRunReport {
  int64_t turns = 0;
  int64_t prompt_tokens = 0;      // input tokens, cached ones included
  int64_t completion_tokens = 0;  // output tokens (thoughts included where reported)
  std::optional<double> cost_usd;  // when the CLI reports it (claude)
  std::string final_text;          // the agent's last message
  std::string error;               // what the CLI reported as its failure ("" = none)
  bool parsed = false;             // the output had the format's result (false: garbage, cut off)
};

// `output` is the CLI's stdout (and stderr: codex prints progress there, and the JSON parts are
// found by structure, not position).
CliRunReport parse_cli_output(OutputFormat format, const std::string& output);

}  // namespace atrex::agent::cli
