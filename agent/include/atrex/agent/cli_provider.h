// The `cli` provider (DESIGN.md §7, docs/agents.md "The cli provider"): a coding-agent CLI
// (Claude Code, Codex, Gemini CLI, or any command) run headless, once per AKA iteration, in a
// staged workspace under bubblewrap. The workspace holds only agent-visible files: TASK.md (the
// operator's public facts as `atrex problems show` prints them, the shapes measured, how to
// measure), the reference candidate (the semantics), the candidate ABI headers, knowledge-base
// excerpts, the best kernel so far, the last evaluation's feedback, and the candidate file the
// CLI writes. Inside, `atrex-eval` quick-evaluates the candidate through a unix socket the
// agent worker serves (its EvalFn: the queue), so neither the queue's address nor its
// credentials, nor metadata.json / roofline.json, nor the results folder are ever in reach.
//
// One workspace per generation (a dropout starts a fresh one); one CLI run per iteration,
// killed with its whole sandbox at `timeout_s`; the candidate is the workspace's candidate file
// when the run ends. Turns, tokens and cost come from the CLI's result output (claude, codex,
// gemini formats), or from `price` when the CLI reports tokens but no cost.
#pragma once

#include <memory>

#include "atrex/agent/provider_registry.h"

namespace atrex::agent {

// The registry entry ("cli"). Errors: the embedded knowledge base does not parse.
Result<std::shared_ptr<ProviderFactory>> make_cli_provider_factory();

}  // namespace atrex::agent
