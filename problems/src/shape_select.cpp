#include "atrex/problems/shape_select.h"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

namespace atrex::problems {

namespace {

// `shapes` with their sizes, smallest first (ties by id, as strings).
Result<std::vector<SizedShape>> sized(const OperatorDef& def,
                                      const std::vector<const Shape*>& shapes) {
  std::vector<SizedShape> out;
  for (const Shape* s : shapes) {
    ATREX_ASSIGN_OR_RETURN(ResolvedShape r, resolve_shape(def, *s));
    int64_t n = 0;
    for (const auto& d : r.inputs) n += d.numel();
    out.push_back(SizedShape{n, s->id});
  }
  // (elements, id) order, as the shapes of a sweep have always been picked: sweep ids depend on it.
  std::stable_sort(out.begin(), out.end());
  return out;
}

}  // namespace

Result<std::vector<SizedShape>> sized_shapes(const OperatorInfo& info, const OperatorDef& def) {
  std::vector<const Shape*> hot;
  for (const auto& s : info.shapes) hot.push_back(&s);
  return sized(def, hot);
}

std::vector<std::string> spread(const std::vector<SizedShape>& items, size_t k) {
  std::vector<std::string> out;
  if (items.empty() || k == 0) return out;
  if (k >= items.size()) {
    for (const auto& i : items) out.push_back(i.id);
    return out;
  }
  for (size_t j = 0; j < k; ++j) {
    const size_t idx = k == 1 ? 0 : j * (items.size() - 1) / (k - 1);
    if (out.empty() || out.back() != items[idx].id) out.push_back(items[idx].id);
  }
  return out;
}

namespace {

// `picked` in the suite's id order (reports list shapes that way).
std::vector<std::string> in_suite_order(const OperatorInfo& info,
                                        const std::vector<std::string>& picked) {
  std::vector<std::string> ordered;
  for (const auto& s : info.shapes) {
    if (std::find(picked.begin(), picked.end(), s.id) != picked.end()) ordered.push_back(s.id);
  }
  return ordered;
}

}  // namespace

Result<std::vector<std::string>> apply_shape_rule(const ShapeRule& rule, const OperatorInfo& info,
                                                  const OperatorDef& def,
                                                  const std::string& source) {
  if (auto ids = rule.ids.find(info.name); ids != rule.ids.end()) {
    for (const auto& id : ids->second) {
      if (!info.find_shape(id)) {
        return invalid_input(
            fmt::format("{}: field \"shapes.*.ids.{}\": operator {} has no shape \"{}\"", source,
                        info.name, info.name, id));
      }
    }
    return ids->second;
  }
  if (rule.all) {
    std::vector<std::string> all;
    for (const auto& s : info.shapes) all.push_back(s.id);
    return all;
  }
  ATREX_ASSIGN_OR_RETURN(std::vector<SizedShape> sized, sized_shapes(info, def));
  std::vector<SizedShape> fit;
  for (const auto& s : sized) {
    if (rule.max_input_elements == 0 || s.input_elements <= rule.max_input_elements) {
      fit.push_back(s);
    }
  }
  if (fit.empty() && rule.reduced && !info.reduced_shapes.empty()) {
    std::vector<std::string> reduced;
    for (const auto& s : info.reduced_shapes) reduced.push_back(s.id);
    if (rule.max_per_operator > 0 && reduced.size() > static_cast<size_t>(rule.max_per_operator))
      reduced.resize(static_cast<size_t>(rule.max_per_operator));
    return reduced;
  }
  if (fit.empty() && rule.at_least > 0) {
    fit.assign(sized.begin(),
               sized.begin() + std::min<size_t>(sized.size(), static_cast<size_t>(rule.at_least)));
  }
  const size_t k =
      rule.max_per_operator > 0 ? static_cast<size_t>(rule.max_per_operator) : fit.size();
  return in_suite_order(info, spread(fit, k));
}

Result<std::vector<std::string>> quick_shapes(const OperatorInfo& info, const OperatorDef& def,
                                              const std::vector<std::string>& chosen, size_t k) {
  std::vector<const Shape*> in_plan;
  for (const auto& id : chosen) {
    if (const Shape* s = info.find_shape(id)) in_plan.push_back(s);
  }
  ATREX_ASSIGN_OR_RETURN(std::vector<SizedShape> by_size, sized(def, in_plan));
  return spread(by_size, k);
}

Result<std::vector<std::string>> select_shapes(const OperatorInfo& info, const OperatorDef& def,
                                               std::string_view spec, std::string_view what) {
  std::vector<std::string> ids;
  if (spec == "all") {
    for (const auto& s : info.shapes) ids.push_back(s.id);
    return ids;
  }
  const bool smallest = spec.rfind("smallest", 0) == 0, largest = spec.rfind("largest", 0) == 0;
  if (smallest || largest) {
    const std::string_view word = smallest ? "smallest" : "largest";
    size_t n = 1;
    if (spec.size() > word.size()) {
      const std::string count(spec.substr(word.size()));
      char* end = nullptr;
      const long v = count[0] == ':' ? std::strtol(count.c_str() + 1, &end, 10) : 0;
      if (count[0] != ':' || v <= 0 || !end || *end != '\0') {
        return invalid_input(fmt::format("{0}: expected `{2}` or `{2}:N` with N >= 1; got \"{1}\"",
                                         what, spec, word));
      }
      n = static_cast<size_t>(v);
    }
    ATREX_ASSIGN_OR_RETURN(std::vector<SizedShape> sized, sized_shapes(info, def));
    if (largest) std::reverse(sized.begin(), sized.end());
    for (size_t i = 0; i < std::min(n, sized.size()); ++i) ids.push_back(sized[i].id);
    return ids;
  }
  std::string cur;
  for (size_t i = 0; i <= spec.size(); ++i) {
    if (i < spec.size() && spec[i] != ',') {
      cur += spec[i];
      continue;
    }
    if (!cur.empty() && !info.find_shape(cur)) {
      return not_found(fmt::format(
          "{}: operator {} has no shape \"{}\" (ids 0..{}; see `atrex problems show {}`)", what,
          info.name, cur, info.shapes.size() - 1, info.name));
    }
    if (!cur.empty()) ids.push_back(cur);
    cur.clear();
  }
  if (ids.empty()) {
    return invalid_input(fmt::format(
        "{}: expected `all`, `smallest[:N]`, `largest[:N]` or a comma-separated list of shape ids",
        what));
  }
  return ids;
}

}  // namespace atrex::problems
