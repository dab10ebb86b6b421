// The `cli` provider's sweep-file fields (docs/agents.md "The cli provider"):
//   preset: claude | codex | gemini     (or `command:`; exactly one of the two)
//   command: [prog, arg, ...]           (a template: {prompt}, {model}, {candidate} are replaced)
//   output_format: claude | codex | gemini | text   (default: the preset's; text for command)
//   model: claude-sonnet-4-5            (optional; presets pass it as --model/-m)
//   extra_args: [--max-turns, "40"]     (optional; appended to the preset's arguments)
//   timeout_s: 1800                     (wall time of one CLI run; its sandbox is killed then)
//   evals_per_run: 8                    (atrex-eval calls one CLI run may make)
//   network: false                      (true: the host's network, for a CLI's model API)
//   ro_binds: [/opt/node]               (extra host paths visible read-only in the sandbox)
//   env: [ANTHROPIC_API_KEY]            (NAMES of worker environment variables passed in)
//   price: {prompt_per_mtok, completion_per_mtok}   (USD; used when the CLI reports no cost)
//   target: cuda | triton | torch       (what it writes: atrex's native candidate, default, or a
//                                        Python module in Atrex-Bench's format; atrex/agent/target.h)
// Parsing is strict: an unknown key, a wrong type or a bad value is an error naming the sweep
// file, the field and the value (exit code 2).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "atrex/agent/target.h"
#include "atrex/common/error.h"
#include "atrex/common/json_io.h"

namespace atrex::agent::cli {

enum class OutputFormat { kClaude, kCodex, kGemini, kText };
const char* output_format_name(OutputFormat f);

struct CliOptions {
  std::string preset;                 // "" when `command` is given
  std::vector<std::string> command;   // the template, preset expanded (never empty after parse)
  OutputFormat output_format = OutputFormat::kText;
  std::string model;                  // "" = the CLI's default
  double timeout_s = 1800;
  int evals_per_run = 8;
  bool network = false;
  std::vector<std::string> ro_binds;  // absolute host paths
  std::vector<std::string> env;       // variable names
  double prompt_usd_per_mtok = 0;
  double completion_usd_per_mtok = 0;
  Target target = Target::kNative;
};

// The sweep-file keys of a cli agent entry.
std::vector<std::string> option_keys();

// Validates a cli agent entry into the normalised options kept in AgentSpec::options (the
// preset expanded into `command`, relative ro_binds made absolute against the sweep file).
Result<Json> parse_options(const JsonField& agent);

Json to_json(const CliOptions& o);
Result<CliOptions> options_from_json(const Json& options, const std::string& source);

// The command template's arguments with {prompt}, {model} and {candidate} replaced. A preset
// argument pair that names the model ("--model", "{model}") is dropped when no model is set.
std::vector<std::string> expand_command(const CliOptions& o, const std::string& prompt,
                                        const std::string& candidate);

}  // namespace atrex::agent::cli
