// Strict reads of the typed wire contracts (common/wire/): every member a type knows is read
// through ObjectReader::required() or optional(), and finish() refuses a member nobody asked
// for. A renamed field therefore fails at the first read, naming itself and the file it came
// from, instead of silently becoming a default:
//   eval task 1700000000-0: field "candidate.backend": expected cpu, cuda or hip; got "gpu"
//   manifest.json: field "operatorz" is not a known field here (known: agents, backend, ...)
// read_value() overloads convert one JSON value; the wire headers add overloads for their own
// enums and structs (same namespace, found by argument-dependent lookup).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"

namespace atrex {

Result<void> read_value(const JsonField& f, std::string& out);
Result<void> read_value(const JsonField& f, bool& out);
Result<void> read_value(const JsonField& f, int& out);
Result<void> read_value(const JsonField& f, int64_t& out);
Result<void> read_value(const JsonField& f, uint64_t& out);
Result<void> read_value(const JsonField& f, double& out);
// Any JSON value, kept as it is (free-form diagnostics such as NVML clock samples).
Result<void> read_value(const JsonField& f, Json& out);

template <class T>
Result<void> read_value(const JsonField& f, std::vector<T>& out) {
  ATREX_TRY(f.expect_array());
  out.clear();
  out.resize(f.value().size());
  for (size_t i = 0; i < out.size(); ++i) ATREX_TRY(read_value(f.element(i), out[i]));
  return ok();
}

// null is nullopt; anything else must read as T.
template <class T>
Result<void> read_value(const JsonField& f, std::optional<T>& out) {
  if (f.value().is_null()) {
    out.reset();
    return ok();
  }
  T v{};
  ATREX_TRY(read_value(f, v));
  out = std::move(v);
  return ok();
}

template <class T>
Result<void> read_value(const JsonField& f, std::map<std::string, T>& out) {
  ATREX_TRY(f.expect_object());
  out.clear();
  for (const auto& [key, _] : f.value().items()) {
    ATREX_ASSIGN_OR_RETURN(JsonField child, f.at(key));
    ATREX_TRY(read_value(child, out[key]));
  }
  return ok();
}

// An enum spelled as one of `name(v)` for v in `values`; else "expected <expected>".
template <class E>
Result<void> read_enum(const JsonField& f, E& out, std::initializer_list<E> values,
                       const char* (*name)(E), std::string_view expected) {
  if (f.value().is_string()) {
    const std::string& s = f.value().get_ref<const std::string&>();
    for (E v : values) {
      if (s == name(v)) {
        out = v;
        return ok();
      }
    }
  }
  return f.fail(std::string("expected ") + std::string(expected));
}

// Reads one JSON object member by member. Not thread-safe; cheap to construct.
class ObjectReader {
 public:
  // kInvalidInput (naming the field) when `f` is not an object.
  static Result<ObjectReader> open(const JsonField& f);

  const JsonField& field() const { return field_; }
  bool has(std::string_view key) const { return field_.has(key); }

  // The "schema" member must be `expected` ("atrex.eval/1"); a missing one is an error too.
  Result<void> schema(std::string_view expected);
  // The member `key` must hold the string `expected` (e.g. "kind": "eval").
  Result<void> constant(std::string_view key, std::string_view expected);

  // The member `key` must be present; read into `out` with read_value().
  template <class T>
  Result<void> required(std::string_view key, T& out) {
    ATREX_ASSIGN_OR_RETURN(JsonField child, take(key));
    return read_value(child, out);
  }
  // As required(), through `parse(const JsonField&) -> Result<T>` (nested types with options).
  template <class T, class Parse>
  Result<void> required(std::string_view key, T& out, Parse&& parse) {
    ATREX_ASSIGN_OR_RETURN(JsonField child, take(key));
    ATREX_ASSIGN_OR_RETURN(out, parse(child));
    return ok();
  }
  // Absent: `out` keeps its value (the type's default). Only for members that older writers
  // of the same schema version may leave out, or that are optional by the contract.
  template <class T>
  Result<void> optional(std::string_view key, T& out) {
    known_.emplace(key);
    if (!field_.has(key)) return ok();
    return required(key, out);
  }
  template <class T, class Parse>
  Result<void> optional(std::string_view key, T& out, Parse&& parse) {
    known_.emplace(key);
    if (!field_.has(key)) return ok();
    return required(key, out, std::forward<Parse>(parse));
  }
  // Marks `key` as known without reading it (a member another reader handles).
  void skip(std::string_view key) { known_.emplace(key); }

  // kInvalidInput naming the first member that no call above asked for, and the known ones.
  Result<void> finish() const;

 private:
  explicit ObjectReader(JsonField f) : field_(std::move(f)) {}
  Result<JsonField> take(std::string_view key);

  JsonField field_;
  std::set<std::string, std::less<>> known_;
};

}  // namespace atrex
