#include "atrex/common/json_io.h"

#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "atrex/common/untrusted_json.h"

namespace atrex {
namespace fs = std::filesystem;

Result<std::string> read_text_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found(fmt::format("{}: no such file", path.string()));
  if (fs::is_directory(path, ec))
    return invalid_input(fmt::format("{}: is a directory, expected a file", path.string()));
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(fmt::format("{}: cannot open for reading", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return io_error(fmt::format("{}: read failed", path.string()));
  return ss.str();
}

Result<Json> read_json_file(const fs::path& path) {
  auto text = read_text_file(path);
  if (!text) return tl::unexpected(text.error());
  try {
    return Json::parse(*text);
  } catch (const Json::parse_error& e) {
    return invalid_input(fmt::format("{}: not valid JSON: {}", path.string(), e.what()));
  }
}

Result<void> write_text_file_atomic(const fs::path& path, std::string_view text) {
  std::error_code ec;
  // rename(2) over a folder fails with an errno that reads "Success" through error_code here.
  if (fs::is_directory(path, ec))
    return invalid_input(fmt::format("{}: is a folder; expected the path of a file", path.string()));
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  thread_local std::mt19937_64 rng{std::random_device{}()};
  fs::path tmp = path;
  tmp += fmt::format(".tmp.{:x}", rng());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return io_error(fmt::format("{}: cannot open for writing", tmp.string()));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!out) return io_error(fmt::format("{}: write failed", tmp.string()));
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return io_error(fmt::format("{}: rename failed: {}", path.string(), ec.message()));
  }
  return ok();
}

namespace {

Json yaml_scalar_to_json(const YAML::Node& node) {
  const std::string& s = node.Scalar();
  if (node.Tag() == "!") return s;  // explicitly quoted: keep as string
  int64_t i = 0;
  if (YAML::convert<int64_t>::decode(node, i) && s.find_first_of(".eE") == std::string::npos)
    return i;
  double d = 0;
  if (YAML::convert<double>::decode(node, d)) return d;
  bool b = false;
  if (YAML::convert<bool>::decode(node, b)) return b;
  if (s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  return s;
}

Json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return nullptr;
    case YAML::NodeType::Scalar: return yaml_scalar_to_json(node);
    case YAML::NodeType::Sequence: {
      Json arr = Json::array();
      for (const auto& child : node) arr.push_back(yaml_to_json(child));
      return arr;
    }
    case YAML::NodeType::Map: {
      Json obj = Json::object();
      for (const auto& kv : node) obj[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      return obj;
    }
  }
  return nullptr;
}

// At most 80 characters of `v`; a value too deep to serialise safely is described instead.
std::string short_value(const Json& v) {
  if (json_deeper_than(v, kUntrustedJsonDepth))
    return fmt::format("{} nested deeper than {} levels", v.is_array() ? "an array" : "an object",
                       kUntrustedJsonDepth);
  std::string s = v.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

}  // namespace

bool json_deeper_than(const Json& v, int limit) {
  std::vector<std::pair<const Json*, int>> todo{{&v, 0}};
  while (!todo.empty()) {
    const auto [j, depth] = todo.back();
    todo.pop_back();
    if (!j->is_structured()) continue;
    if (depth + 1 > limit) return true;
    for (const auto& child : *j) todo.emplace_back(&child, depth + 1);
  }
  return false;
}

Result<Json> parse_untrusted_json(std::string_view text, int max_depth) {
  bool too_deep = false;
  // The callback sees every value with its depth (0: the root); one past the limit is dropped
  // (returning false discards it) and remembered.
  const Json::parser_callback_t limit = [&](int depth, Json::parse_event_t, Json&) {
    if (depth > max_depth) too_deep = true;
    return depth <= max_depth;
  };
  Json j;
  try {
    j = Json::parse(text.begin(), text.end(), limit);
  } catch (const Json::exception&) {
    return invalid_input("not JSON");
  }
  if (too_deep) return invalid_input(fmt::format("nested deeper than {} levels", max_depth));
  return j;
}

Result<Json> parse_yaml_to_json(std::string_view text, const std::string& source) {
  try {
    YAML::Node root = YAML::Load(std::string(text));
    return yaml_to_json(root);
  } catch (const YAML::Exception& e) {
    return invalid_input(fmt::format("{}: not valid YAML: line {}, column {}: {}", source,
                                     e.mark.line + 1, e.mark.column + 1, e.msg));
  }
}

bool JsonField::has(std::string_view key) const {
  return value_->is_object() && value_->contains(key);
}

Result<JsonField> JsonField::at(std::string_view key) const {
  if (!value_->is_object()) return fail("expected an object");
  auto it = value_->find(key);
  std::string child = path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  if (it == value_->end()) {
    return invalid_input(fmt::format("{}: field \"{}\" is missing", source_, child));
  }
  return JsonField(*it, source_, child);
}

JsonField JsonField::element(size_t index) const {
  return JsonField((*value_)[index], source_, fmt::format("{}[{}]", path_, index));
}

tl::unexpected<Error> JsonField::fail(std::string_view what) const {
  return invalid_input(fmt::format("{}: field \"{}\": {}; got {}", source_,
                                   path_.empty() ? "<root>" : path_, what, short_value(*value_)));
}

Result<std::string> JsonField::as_string() const {
  if (!value_->is_string()) return fail("expected a string");
  return value_->get<std::string>();
}

Result<int64_t> JsonField::as_int() const {
  if (value_->is_number_integer()) return value_->get<int64_t>();
  if (value_->is_number_float()) {
    double d = value_->get<double>();
    if (d == static_cast<double>(static_cast<int64_t>(d))) return static_cast<int64_t>(d);
  }
  return fail("expected an integer");
}

Result<double> JsonField::as_number() const {
  if (!value_->is_number()) return fail("expected a number");
  return value_->get<double>();
}

Result<bool> JsonField::as_bool() const {
  if (!value_->is_boolean()) return fail("expected true or false");
  return value_->get<bool>();
}

Result<void> JsonField::expect_object() const {
  if (!value_->is_object()) return fail("expected an object");
  return ok();
}

Result<void> JsonField::expect_array() const {
  if (!value_->is_array()) return fail("expected a list");
  return ok();
}

}  // namespace atrex
