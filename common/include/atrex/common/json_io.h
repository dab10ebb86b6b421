// JSON/YAML file loading with errors that name the file, the field and the value.
//
// Every loader of user or problem data goes through these helpers so that a malformed file
// yields one message like
//   problems/atrex-bench/data/rms_norm/shapes.json: field "3.input_kwargs.token_count":
//   expected an integer, got "abc"
// and never a library exception or a silent default.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "atrex/common/error.h"

namespace atrex {

using Json = nlohmann::json;

// Reads and parses a JSON file. Errors: kNotFound (missing file), kInvalidInput (parse error,
// with line/column from nlohmann), kIo.
Result<Json> read_json_file(const std::filesystem::path& path);

// Reads a whole file as text. Errors: kNotFound, kIo.
Result<std::string> read_text_file(const std::filesystem::path& path);

// Writes `text` to `path` atomically (temporary file in the same folder + rename).
Result<void> write_text_file_atomic(const std::filesystem::path& path, std::string_view text);

// Converts a YAML document (yaml-cpp) to JSON so YAML and JSON inputs share one validator.
// Scalars become int64, double, bool or string by their YAML form. `source` names the file.
Result<Json> parse_yaml_to_json(std::string_view text, const std::string& source);

// A cursor for validating one JSON document: remembers the file and the field path.
class JsonField {
 public:
  JsonField(const Json& value, std::string source, std::string path = "")
      : value_(&value), source_(std::move(source)), path_(std::move(path)) {}

  const Json& value() const { return *value_; }
  const std::string& source() const { return source_; }
  const std::string& path() const { return path_; }

  bool has(std::string_view key) const;
  // Child object member; error when missing or when this is not an object.
  Result<JsonField> at(std::string_view key) const;
  // Array element.
  JsonField element(size_t index) const;

  Result<std::string> as_string() const;
  Result<int64_t> as_int() const;
  Result<double> as_number() const;  // integers and floats
  Result<bool> as_bool() const;
  Result<void> expect_object() const;
  Result<void> expect_array() const;

  // "file: field \"a.b\": <what>; got <value>" as kInvalidInput.
  tl::unexpected<Error> fail(std::string_view what) const;

 private:
  const Json* value_;
  std::string source_;
  std::string path_;
};

}  // namespace atrex
