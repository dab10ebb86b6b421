// What the model sees (docs/agents.md "What the model sees"): a system message saying what to
// produce; a first user message with the agent-visible problem (the operator's signature and
// semantics as `atrex problems show` prints them, the shapes measured, the reference candidate
// source of the backend, the candidate ABI headers, knowledge-base excerpts for the operator's
// family, and, from the second generation on, the best kernel so far and a direction to try);
// then one user message of feedback per evaluated candidate. Nothing evaluator-side
// (metadata.json, roofline.json, roofline counts) is in any of them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "atrex/agent/knowledge_base.h"
#include "atrex/agent/provider.h"
#include "atrex/agent/target.h"

namespace atrex::agent::openai {

// The system message: one source file in the backend's language exporting the ABI entry point,
// in one fenced block of that language.
// `target` (target.h): what the model writes; Python targets get the release's format.
std::string system_message(Backend backend, Target target = Target::kNative);

// The first user message of a generation's conversation. `notes` are the knowledge-base
// excerpts to include.
std::string problem_message(const ProposalContext& ctx, const std::vector<const KbNote*>& notes,
                            Target target = Target::kNative);

// The feedback on the previous candidate (`attempt`): its failure text when it produced none;
// else per shape the status, the compile error or the first wrong elements, the time, the
// roofline time and S_j, the target-DSL share when measured; the summary and the best so far.
// `notes`: knowledge-base excerpts newly relevant (a measured bottleneck), appended.
std::string feedback_message(const Attempt& attempt, const ProposalContext& ctx,
                             const std::vector<const KbNote*>& notes,
                             Target target = Target::kNative);

// The body of feedback_message without its request for a reply: per shape the status, errors,
// times, roofline time and S_j, the compiler's message, the summary and the best so far (what
// the cli provider's `atrex-eval` prints).
std::string results_text(const Attempt& attempt, const ProposalContext& ctx);

// The bottleneck the attempt's records show, when they show one: latency when every shape is
// correct and each takes under 15 us (launches and barriers dominate); nullopt otherwise.
std::optional<Bottleneck> measured_bottleneck(const Attempt& attempt);

// The agent-visible facts of an operator (`atrex problems show OP`'s text without the shape
// table); "" for an operator without a native definition.
std::string operator_facts(const std::string& op);

// The embedded reference candidate of `op` for `backend` (kernels/reference/<op>/naive.cpp for
// cpu, naive.cu for cuda and hip) with its path; nullopt when there is none.
std::optional<std::pair<std::string, std::string>> reference_source(const std::string& op,
                                                                    Backend backend);

}  // namespace atrex::agent::openai
