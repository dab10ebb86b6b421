#include "atrex/common/wire/reader.h"

#include <limits>

#include <fmt/format.h>

namespace atrex {

Result<void> read_value(const JsonField& f, std::string& out) {
  ATREX_ASSIGN_OR_RETURN(out, f.as_string());
  return ok();
}

Result<void> read_value(const JsonField& f, bool& out) {
  ATREX_ASSIGN_OR_RETURN(out, f.as_bool());
  return ok();
}

Result<void> read_value(const JsonField& f, int& out) {
  ATREX_ASSIGN_OR_RETURN(int64_t v, f.as_int());
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    return f.fail("expected a 32-bit integer");
  }
  out = static_cast<int>(v);
  return ok();
}

Result<void> read_value(const JsonField& f, int64_t& out) {
  ATREX_ASSIGN_OR_RETURN(out, f.as_int());
  return ok();
}

Result<void> read_value(const JsonField& f, uint64_t& out) {
  const Json& v = f.value();
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return ok();
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(v.get<int64_t>());
    return ok();
  }
  return f.fail("expected a non-negative integer");
}

Result<void> read_value(const JsonField& f, double& out) {
  ATREX_ASSIGN_OR_RETURN(out, f.as_number());
  return ok();
}

Result<void> read_value(const JsonField& f, Json& out) {
  out = f.value();
  return ok();
}

Result<ObjectReader> ObjectReader::open(const JsonField& f) {
  ATREX_TRY(f.expect_object());
  return ObjectReader(f);
}

Result<JsonField> ObjectReader::take(std::string_view key) {
  known_.emplace(key);
  return field_.at(key);
}

Result<void> ObjectReader::schema(std::string_view expected) {
  return constant("schema", expected);
}

Result<void> ObjectReader::constant(std::string_view key, std::string_view expected) {
  ATREX_ASSIGN_OR_RETURN(JsonField child, take(key));
  ATREX_ASSIGN_OR_RETURN(std::string v, child.as_string());
  if (v != expected) return child.fail(fmt::format("expected \"{}\"", expected));
  return ok();
}

Result<void> ObjectReader::finish() const {
  for (const auto& [key, _] : field_.value().items()) {
    if (known_.count(key)) continue;
    const std::string& path = field_.path();
    return invalid_input(fmt::format("{}: field \"{}{}{}\" is not a known field here (known: {})",
                                     field_.source(), path, path.empty() ? "" : ".", key,
                                     fmt::join(known_, ", ")));
  }
  return ok();
}

}  // namespace atrex
