// What a cli agent's workspace holds and the prompt its CLI gets (docs/agents.md "What the CLI
// sees"). Only agent-visible facts: the operator's signature and semantics as `atrex problems
// show` prints them, the shape ids measured, the correctness settings, the reference candidate,
// the ABI headers and knowledge-base notes. Never metadata.json, roofline.json or roofline
// counts, and no path of the host.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "atrex/agent/knowledge_base.h"
#include "atrex/agent/provider.h"
#include "atrex/agent/target.h"

namespace atrex::agent::cli {

// The reference's Python signature in a Python target's workspace (target.h python_signature).
inline constexpr const char* kSignatureFile = "reference/signature.py";

// (path relative to the workspace, content): TASK.md, reference/<file>, the candidate ABI
// include/atrex/*.h (native target) or reference/signature.py (Python targets), kb/<note>.md.
// The candidate is workspace_candidate_name(target, ctx.backend).
using TaskFiles = std::vector<std::pair<std::string, std::string>>;
TaskFiles task_files(const ProposalContext& ctx, const std::vector<const KbNote*>& notes,
                     Target target, int evals_per_run);

// The short instruction the CLI is started with (TASK.md has the rest).
std::string cli_prompt(const ProposalContext& ctx, Target target, int evals_per_run);

}  // namespace atrex::agent::cli
