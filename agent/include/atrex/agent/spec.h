// The agents of a sweep file (docs/sweeps.md "agents"): each entry's common fields
// {name, provider, budget: {iterations}, dropout: {patience, max_generations, min_improvement}}
// and its provider's own keys, validated by the provider registry into an AgentSpec
// (common/wire/agent_task.h).
#pragma once

#include "atrex/agent/provider_registry.h"
#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/agent_task.h"

namespace atrex::agent {

// One agent entry. Errors (kInvalidInput) name the file, the field and the value: an unknown
// key (listing the common and the provider's keys), a bad name, an unsupported provider, a
// budget or dropout value out of range, a provider option the provider refuses.
Result<AgentSpec> agent_spec_from_json(const JsonField& f, const ProviderRegistry& providers);

}  // namespace atrex::agent
