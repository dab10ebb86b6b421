// How an evaluation child ran (atrex.eval/1's `sandbox`; common/process/sandbox.h makes it).
#pragma once

#include <string_view>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"

namespace atrex {

// How an evaluation child ran: `bwrap` (namespaces, read-only view, seccomp) or `none` (the user
// passed --no-sandbox: no namespaces, no seccomp; the cleaned environment, the resource limits
// and the result channel's checks still apply). Every atrex.eval/1 record carries it.
enum class SandboxMode { kBwrap, kNone };
const char* sandbox_mode_name(SandboxMode m);
// kInvalidInput "expected bwrap or none; got "<s>"".
Result<SandboxMode> parse_sandbox_mode(std::string_view s);
Result<void> read_value(const JsonField& f, SandboxMode& out);
inline void to_json(Json& j, SandboxMode m) { j = sandbox_mode_name(m); }

}  // namespace atrex
