#include "atrex/common/wire/backend.h"

#include <fmt/format.h>

#include "atrex/common/wire/reader.h"

namespace atrex {

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kCpu: return "cpu";
    case Backend::kCuda: return "cuda";
    case Backend::kHip: return "hip";
  }
  ATREX_UNREACHABLE("Backend");
}

Result<Backend> parse_backend(std::string_view s) {
  for (Backend b : kAllBackends) {
    if (s == backend_name(b)) return b;
  }
  return invalid_input(fmt::format("expected cpu, cuda or hip; got \"{}\"", s));
}

Result<BackendChoice> parse_backend_choice(std::string_view s, std::string_view what) {
  if (s == "auto") return BackendChoice{};
  auto b = parse_backend(s);
  if (!b) {
    return invalid_input(fmt::format("{}: expected auto, cpu, cuda or hip; got \"{}\"", what, s));
  }
  return BackendChoice{*b};
}

std::string backend_choice_name(const BackendChoice& c) {
  return c.backend ? backend_name(*c.backend) : "auto";
}

const char* source_extension(Backend b) {
  switch (b) {
    case Backend::kCpu: return ".cpp";
    case Backend::kCuda: return ".cu";
    case Backend::kHip: return ".hip";
  }
  ATREX_UNREACHABLE("Backend");
}

std::optional<Backend> backend_for_extension(std::string_view ext) {
  if (ext == ".cu") return Backend::kCuda;
  if (ext == ".hip") return Backend::kHip;
  if (ext == ".cpp" || ext == ".cc" || ext == ".cxx") return Backend::kCpu;
  return std::nullopt;
}

std::string eval_child_name(Backend b) { return std::string("atrex-eval-") + backend_name(b); }

Result<void> read_value(const JsonField& f, Backend& out) {
  return read_enum(f, out, {Backend::kCpu, Backend::kCuda, Backend::kHip}, backend_name,
                   "cpu, cuda or hip");
}

}  // namespace atrex
