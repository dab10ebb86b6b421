#include "atrex/problems/suite.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include <fmt/format.h>

#include "atrex/problems/operator.h"

namespace atrex::problems {
namespace fs = std::filesystem;

const Shape* OperatorInfo::find_shape(std::string_view id) const {
  for (const auto* list : {&shapes, &reduced_shapes}) {
    for (const auto& s : *list) {
      if (s.id == id) return &s;
    }
  }
  return nullptr;
}

namespace {

bool numeric_id(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool shape_id_less(const Shape& a, const Shape& b) {
  if (numeric_id(a.id) && numeric_id(b.id)) return std::stoll(a.id) < std::stoll(b.id);
  return a.id < b.id;
}

// One shapes.json entry ({init_kwargs, input_kwargs}) as shape `id`; errors name `source`.
Result<Shape> shape_from_entry(const Json& entry, const std::string& source,
                               const std::string& id) {
  JsonField f(entry, source, id);
  ATREX_TRY(f.expect_object());
  Shape s;
  s.id = id;
  if (entry.contains("init_kwargs") && !entry["init_kwargs"].is_null()) {
    ATREX_ASSIGN_OR_RETURN(auto init, f.at("init_kwargs"));
    ATREX_TRY(init.expect_object());
    s.init_kwargs = entry["init_kwargs"];
  }
  ATREX_ASSIGN_OR_RETURN(auto input, f.at("input_kwargs"));
  ATREX_TRY(input.expect_object());
  s.input_kwargs = entry["input_kwargs"];
  s.params = s.input_kwargs;
  for (auto& [k, v] : s.init_kwargs.items()) {
    if (s.params.contains(k) && s.params[k] != v) {
      return invalid_input(
          fmt::format("{}: shape \"{}\": init_kwargs.{} = {} conflicts with input_kwargs.{} = {}",
                      source, id, k, v.dump(), k, s.params[k].dump()));
    }
    s.params[k] = v;
  }
  return s;
}

// The native operator's reduced shapes (operator.h ReducedShape) as shapes "reduced-<k>", each
// checked to resolve: they are atrex's own data, so a bad one is a defect named here.
Result<std::vector<Shape>> reduced_shapes_of(std::string_view op) {
  std::vector<Shape> out;
  const OperatorDef* def = find_native_operator(op);
  if (!def) return out;
  for (size_t k = 0; k < def->reduced_shapes.size(); ++k) {
    const std::string source = fmt::format("reduced shape {} of {}", k, op);
    Json entry = Json::parse(def->reduced_shapes[k].kwargs, nullptr, false);
    if (entry.is_discarded()) return invalid_input(source + ": not JSON");
    ATREX_ASSIGN_OR_RETURN(Shape s, shape_from_entry(entry, source, fmt::format("reduced-{}", k)));
    s.reduced = true;
    ATREX_TRY(resolve_shape(*def, s));
    out.push_back(std::move(s));
  }
  return out;
}

Result<std::vector<Shape>> load_shapes(const fs::path& file) {
  ATREX_ASSIGN_OR_RETURN(Json j, read_json_file(file));
  JsonField root(j, file.string());
  if (!j.is_object() || j.empty())
    return root.fail("expected a non-empty object of shape id -> shape");
  std::vector<Shape> shapes;
  for (auto& [id, entry] : j.items()) {
    ATREX_ASSIGN_OR_RETURN(Shape s, shape_from_entry(entry, file.string(), id));
    shapes.push_back(std::move(s));
  }
  std::sort(shapes.begin(), shapes.end(), shape_id_less);
  return shapes;
}

Result<std::map<std::string, RooflineCounts>> load_roofline(const fs::path& file) {
  ATREX_ASSIGN_OR_RETURN(Json j, read_json_file(file));
  JsonField root(j, file.string());
  ATREX_ASSIGN_OR_RETURN(auto shapes, root.at("shapes"));
  ATREX_TRY(shapes.expect_object());
  std::map<std::string, RooflineCounts> out;
  for (auto& [id, entry] : shapes.value().items()) {
    JsonField f(entry, file.string(), "shapes." + id);
    ATREX_TRY(f.expect_object());
    RooflineCounts c;
    ATREX_ASSIGN_OR_RETURN(auto w, f.at("semantic_W_flops"));
    ATREX_TRY(w.expect_object());
    for (auto& [dtype, flops] : w.value().items()) {
      JsonField wf(flops, file.string(), f.path() + ".semantic_W_flops." + dtype);
      ATREX_ASSIGN_OR_RETURN(double v, wf.as_number());
      if (v < 0) return wf.fail("expected a non-negative FLOP count");
      c.w_flops_by_dtype[dtype] = v;
    }
    ATREX_ASSIGN_OR_RETURN(auto qr, f.at("semantic_Q_read_bytes"));
    ATREX_ASSIGN_OR_RETURN(c.q_read_bytes, qr.as_number());
    ATREX_ASSIGN_OR_RETURN(auto qw, f.at("semantic_Q_write_bytes"));
    ATREX_ASSIGN_OR_RETURN(c.q_write_bytes, qw.as_number());
    if (c.q_read_bytes < 0) return qr.fail("expected a non-negative byte count");
    if (c.q_write_bytes < 0) return qw.fail("expected a non-negative byte count");
    out[id] = std::move(c);
  }
  return out;
}

}  // namespace

Result<Suite> Suite::load(const fs::path& dir) {
  Suite suite;
  suite.dir_ = dir;
  const fs::path importance_file = dir / "data" / "operator_importance.json";
  ATREX_ASSIGN_OR_RETURN(Json imp, read_json_file(importance_file));
  JsonField root(imp, importance_file.string());
  ATREX_ASSIGN_OR_RETURN(auto ops, root.at("operators"));
  ATREX_TRY(ops.expect_object());
  if (ops.value().empty()) return ops.fail("expected at least one operator");
  double total = 0;
  for (auto& [name, entry] : ops.value().items()) {
    JsonField f(entry, importance_file.string(), "operators." + name);
    OperatorInfo info;
    info.name = name;
    ATREX_ASSIGN_OR_RETURN(auto score, f.at("importance_score"));
    ATREX_ASSIGN_OR_RETURN(info.importance_score, score.as_number());
    if (!(info.importance_score >= 0)) return score.fail("expected a non-negative number");
    if (f.has("phase")) {
      ATREX_ASSIGN_OR_RETURN(auto phase, f.at("phase"));
      ATREX_ASSIGN_OR_RETURN(info.phase, phase.as_string());
    }
    if (f.has("num_profiles")) {
      ATREX_ASSIGN_OR_RETURN(auto np, f.at("num_profiles"));
      ATREX_ASSIGN_OR_RETURN(int64_t n, np.as_int());
      info.num_profiles = static_cast<int>(n);
    }
    total += info.importance_score;
    const fs::path op_dir = dir / "data" / name;
    ATREX_ASSIGN_OR_RETURN(info.shapes, load_shapes(op_dir / "shapes.json"));
    ATREX_ASSIGN_OR_RETURN(info.reduced_shapes, reduced_shapes_of(name));
    HiddenData hidden;
    ATREX_ASSIGN_OR_RETURN(hidden.metadata, read_json_file(op_dir / "metadata.json"));
    ATREX_ASSIGN_OR_RETURN(hidden.roofline, load_roofline(op_dir / "roofline.json"));
    for (const auto& s : info.shapes) {
      if (!hidden.roofline.count(s.id)) {
        return invalid_input(fmt::format(
            "{}: field \"shapes.{}\" is missing (shape {} of shapes.json has no roofline)",
            (op_dir / "roofline.json").string(), s.id, s.id));
      }
    }
    suite.hidden_[name] = std::move(hidden);
    suite.operators_.push_back(std::move(info));
  }
  if (!(total > 0)) return ops.fail("importance scores sum to zero");
  for (auto& op : suite.operators_) op.weight = op.importance_score / total;
  std::stable_sort(
      suite.operators_.begin(), suite.operators_.end(),
      [](const OperatorInfo& a, const OperatorInfo& b) { return a.weight > b.weight; });
  // Every operator folder must be listed in operator_importance.json, or its weight is unknown.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir / "data", ec)) {
    if (entry.is_directory() && !suite.find(entry.path().filename().string())) {
      return invalid_input(fmt::format("{}: operator folder \"{}\" has no entry in operators",
                                       importance_file.string(), entry.path().filename().string()));
    }
  }
  return suite;
}

const OperatorInfo* Suite::find(std::string_view name) const {
  for (const auto& op : operators_) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

Result<const OperatorInfo*> Suite::require(std::string_view name) const {
  if (const auto* op = find(name)) return op;
  std::vector<std::string> names;
  for (const auto& op : operators_) names.push_back(op.name);
  std::sort(names.begin(), names.end());
  return not_found(
      fmt::format("unknown operator \"{}\"; the suite has: {}", name, fmt::join(names, ", ")));
}

size_t Suite::num_shapes() const {
  size_t n = 0;
  for (const auto& op : operators_) n += op.shapes.size();
  return n;
}

const HiddenData& Suite::hidden(std::string_view op) const {
  static const HiddenData kEmpty;
  auto it = hidden_.find(op);
  return it == hidden_.end() ? kEmpty : it->second;
}

Result<RooflineCounts> Suite::roofline(std::string_view op, std::string_view shape_id) const {
  auto it = hidden_.find(op);
  if (it == hidden_.end()) return not_found(fmt::format("unknown operator \"{}\"", op));
  auto s = it->second.roofline.find(std::string(shape_id));
  if (s == it->second.roofline.end()) {
    return not_found(fmt::format("operator \"{}\" has no shape \"{}\"", op, shape_id));
  }
  return s->second;
}

fs::path executable_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::current_path() : exe.parent_path();
}

fs::path default_suite_dir() {
  if (const char* env = std::getenv("ATREX_SUITE_DIR"); env && *env) return env;
  fs::path staged = executable_dir().parent_path() / "share" / "atrex" / "problems" / "atrex-bench";
  std::error_code ec;
  if (fs::exists(staged / "data", ec)) return staged;
  return ATREX_SOURCE_SUITE_DIR;
}

fs::path default_hardware_dir() {
  if (const char* env = std::getenv("ATREX_HARDWARE_DIR"); env && *env) return env;
  fs::path staged = executable_dir().parent_path() / "share" / "atrex" / "hardware";
  std::error_code ec;
  if (fs::exists(staged, ec)) return staged;
  return ATREX_SOURCE_HARDWARE_DIR;
}

Result<Suite> load_suite_or_bundled(const std::filesystem::path& dir) {
  std::error_code ec;
  if (dir.empty() || !std::filesystem::exists(dir / "data", ec)) {
    return Suite::load(default_suite_dir());
  }
  return Suite::load(dir);
}

}  // namespace atrex::problems
