#include "atrex/common/wire/sandbox_mode.h"

#include <string>

#include <fmt/format.h>

#include "atrex/common/wire/reader.h"

namespace atrex {

const char* sandbox_mode_name(SandboxMode m) {
  switch (m) {
    case SandboxMode::kBwrap: return "bwrap";
    case SandboxMode::kNone: return "none";
  }
  ATREX_UNREACHABLE("SandboxMode");
}

Result<SandboxMode> parse_sandbox_mode(std::string_view s) {
  if (s == "bwrap") return SandboxMode::kBwrap;
  if (s == "none") return SandboxMode::kNone;
  return make_error(ErrorCode::kInvalidInput,
                    fmt::format("expected bwrap or none; got \"{}\"", std::string(s)));
}

Result<void> read_value(const JsonField& f, SandboxMode& out) {
  if (!f.value().is_string()) return f.fail("expected a string (bwrap or none)");
  auto m = parse_sandbox_mode(f.value().get<std::string>());
  if (!m) return f.fail(m.error().message);
  out = *m;
  return ok();
}

}  // namespace atrex
