// JSON that another process wrote and may have crafted (docs/evaluation.md "Threat model").
#pragma once

#include <string_view>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"

namespace atrex {

// Parses one JSON text that another process wrote and may have crafted (a child's result line, a
// message to the judge). kInvalidInput "not JSON", or "nested deeper than <max_depth> levels":
// nlohmann's parser is iterative but its serializer recurses, and a value a few hundred
// thousand levels deep (an 800 KB line) overflowed the stack of the first dump() of it, in the
// runner's own process (attack round 9, docs/evaluation.md "Threat model"). Values below the
// limit are never stored, so the refusal costs no memory.
inline constexpr int kUntrustedJsonDepth = 32;
// What agents write (a coding-agent CLI's output, its requests to the evaluation socket, an LLM
// server's replies): their documents nest more (tool calls with JSON arguments), still far from
// what the recursion needs to overflow.
inline constexpr int kAgentJsonDepth = 128;
Result<Json> parse_untrusted_json(std::string_view text, int max_depth = kUntrustedJsonDepth);

// Whether `v` nests deeper than `limit` levels (a scalar is depth 0), without recursion.
bool json_deeper_than(const Json& v, int limit);

}  // namespace atrex
