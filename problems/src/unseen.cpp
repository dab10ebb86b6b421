#include "atrex/problems/unseen.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "atrex/problems/numeric.h"

namespace atrex::problems {
namespace {

// "token_count" -> (token_count, -1); "shape[0]" -> (shape, 0).
std::pair<std::string, int> split_param(const std::string& param) {
  const auto open = param.find('[');
  if (open == std::string::npos || param.back() != ']') return {param, -1};
  return {param.substr(0, open), std::stoi(param.substr(open + 1, param.size() - open - 2))};
}

// The integer at `param` in a shape's params, or nullptr.
const Json* find_value(const Json& params, const std::string& param) {
  const auto [name, index] = split_param(param);
  auto it = params.find(name);
  if (it == params.end()) return nullptr;
  if (index < 0) return it->is_number_integer() ? &*it : nullptr;
  if (!it->is_array() || index >= static_cast<int>(it->size())) return nullptr;
  const Json& v = (*it)[static_cast<size_t>(index)];
  return v.is_number_integer() ? &v : nullptr;
}

void set_value(Json& params, const std::string& param, int64_t value) {
  const auto [name, index] = split_param(param);
  auto it = params.find(name);
  if (it == params.end()) return;
  if (index < 0)
    *it = value;
  else
    (*it)[static_cast<size_t>(index)] = value;
}

double input_bytes_of(const OperatorDef& def, const Shape& s) {
  auto r = resolve_shape(def, s);
  if (!r) return -1;
  double b = 0;
  for (const auto& t : r->inputs) b += static_cast<double>(t.bytes());
  return b;
}

}  // namespace

std::string UnseenShape::describe() const {
  return fmt::format("{} = {} (hot shape {} has {})", param, value, base_shape_id, hot_value);
}

std::vector<int64_t> hot_values(const OperatorInfo& info, const std::string& param) {
  std::set<int64_t> values;
  for (const auto& s : info.shapes) {
    if (const Json* v = find_value(s.params, param)) values.insert(v->get<int64_t>());
  }
  return {values.begin(), values.end()};
}

Result<std::vector<UnseenShape>> derive_unseen_shapes(const OperatorDef& def,
                                                      const OperatorInfo& info,
                                                      std::span<const Shape* const> bases,
                                                      int count, uint64_t seed) {
  std::vector<UnseenShape> out;
  if (def.free_dims.empty() || count <= 0 || bases.empty()) return out;
  std::vector<std::pair<double, const Shape*>> sized;
  for (const Shape* s : bases) {
    const double b = input_bytes_of(def, *s);
    if (b >= 0) sized.emplace_back(b, s);
  }
  std::stable_sort(sized.begin(), sized.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  if (sized.empty()) return out;
  std::set<std::pair<std::string, int64_t>> taken;  // (param, value) already used
  for (int k = 0; k < count; ++k) {
    const Shape& base = *sized[static_cast<size_t>(k) % sized.size()].second;
    const FreeDim& dim = def.free_dims[static_cast<size_t>(k) % def.free_dims.size()];
    const Json* hot = find_value(base.params, dim.param);
    if (!hot) {
      return invalid_input(
          fmt::format("operator {}: free dimension \"{}\" is not an integer parameter of shape {}",
                      def.name, dim.param, base.id));
    }
    const int64_t v = hot->get<int64_t>();
    const std::vector<int64_t> hot_set = hot_values(info, dim.param);
    auto usable = [&](int64_t value) {
      return value >= dim.min_value && !std::binary_search(hot_set.begin(), hot_set.end(), value) &&
             !taken.count({dim.param, value});
    };
    const int64_t lo = std::max(dim.min_value, v - v / 4 - 1), hi = v + v / 4 + 1;
    const uint64_t span = static_cast<uint64_t>(hi - lo + 1);
    std::vector<int64_t> tries;
    for (uint64_t t = 0; t < 64; ++t)
      tries.push_back(lo + static_cast<int64_t>(num::mix64(seed ^ num::mix64(k * 977 + t)) % span));
    for (int64_t value = hi + 1; value < hi + 4096; ++value)
      tries.push_back(value);  // a dense hot range
    for (int64_t value : tries) {
      if (!usable(value)) continue;
      UnseenShape u;
      u.shape = base;
      u.shape.id = fmt::format("unseen-{}", k);
      set_value(u.shape.params, dim.param, value);
      if (find_value(u.shape.init_kwargs, dim.param))
        set_value(u.shape.init_kwargs, dim.param, value);
      if (find_value(u.shape.input_kwargs, dim.param))
        set_value(u.shape.input_kwargs, dim.param, value);
      if (!resolve_shape(def, u.shape)) continue;  // outside the operator's constraints
      u.base_shape_id = base.id;
      u.param = dim.param;
      u.hot_value = v;
      u.value = value;
      taken.insert({dim.param, value});
      out.push_back(std::move(u));
      break;
    }
  }
  return out;
}

}  // namespace atrex::problems
