#include "atrex/problems/operator.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <thread>

#include <fmt/format.h>

#include "ops/generate.h"

namespace atrex::problems {

int64_t TensorDesc::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

int64_t ResolvedShape::int_param(std::string_view name) const {
  auto it = params.find(name);
  return (it != params.end() && it->is_number()) ? it->get<int64_t>() : 0;
}

double ResolvedShape::float_param(std::string_view name) const {
  auto it = params.find(name);
  return (it != params.end() && it->is_number()) ? it->get<double>() : 0.0;
}

namespace {

// Evaluates a dim expression: IDENT | IDENT '[' INT ']', optionally followed by ('*'|'/') INT.
// The grammar is deliberately tiny: signatures are written by us, not by users.
Result<int64_t> eval_dim(std::string_view expr, const Json& params) {
  size_t pos = 0;
  auto ident_end =
      std::find_if(expr.begin(), expr.end(), [](char c) { return !(std::isalnum(c) || c == '_'); });
  std::string name(expr.begin(), ident_end);
  pos = name.size();
  auto it = params.find(name);
  if (name.empty() || it == params.end())
    return invalid_input(fmt::format("dim \"{}\": parameter \"{}\" is missing", expr, name));
  const Json* value = &*it;
  if (pos < expr.size() && expr[pos] == '[') {
    size_t close = expr.find(']', pos);
    if (close == std::string_view::npos)
      return internal_error(fmt::format("bad dim expression \"{}\"", expr));
    int64_t idx = std::stoll(std::string(expr.substr(pos + 1, close - pos - 1)));
    if (!value->is_array())
      return invalid_input(fmt::format("dim \"{}\": parameter \"{}\" must be a list", expr, name));
    const int64_t n = static_cast<int64_t>(value->size());
    if (idx < 0) idx += n;
    if (idx < 0 || idx >= n)
      return invalid_input(fmt::format("dim \"{}\": \"{}\" has {} entries", expr, name, n));
    value = &(*value)[static_cast<size_t>(idx)];
    pos = close + 1;
  }
  if (!value->is_number_integer())
    return invalid_input(
        fmt::format("dim \"{}\": expected an integer, got {}", expr, value->dump()));
  int64_t v = value->get<int64_t>();
  if (pos < expr.size()) {
    char op = expr[pos];
    int64_t k = std::stoll(std::string(expr.substr(pos + 1)));
    if (op == '/')
      v /= k;
    else if (op == '*')
      v *= k;
    else
      return internal_error(fmt::format("bad dim expression \"{}\"", expr));
  }
  return v;
}

Result<void> check_param(const ParamSpec& p, const Json& v) {
  switch (p.kind) {
    case ParamKind::kInt:
      if (!v.is_number_integer())
        return invalid_input(fmt::format("expected an integer; got {}", v.dump()));
      break;
    case ParamKind::kFloat:
      if (!v.is_number()) return invalid_input(fmt::format("expected a number; got {}", v.dump()));
      break;
    case ParamKind::kBool:
      if (!v.is_boolean())
        return invalid_input(fmt::format("expected true or false; got {}", v.dump()));
      break;
    case ParamKind::kString:
      if (!v.is_string()) return invalid_input(fmt::format("expected a string; got {}", v.dump()));
      break;
    case ParamKind::kIntList:
      if (!v.is_array() ||
          !std::all_of(v.begin(), v.end(), [](const Json& e) { return e.is_number_integer(); })) {
        return invalid_input(fmt::format("expected a list of integers; got {}", v.dump()));
      }
      break;
  }
  return ok();
}

Result<std::vector<TensorDesc>> resolve_tensors(const std::vector<TensorSpec>& specs,
                                                const Json& params) {
  std::vector<TensorDesc> out;
  for (const auto& spec : specs) {
    TensorDesc d{spec.name, spec.dtype, {}};
    for (const auto& expr : spec.dims) {
      if (!expr.empty() && expr[0] == '=') {  // computed by OperatorDef::resolve
        d.dims.push_back(-1);
        continue;
      }
      auto v = eval_dim(expr, params);
      if (!v) return invalid_input(fmt::format("tensor \"{}\": {}", spec.name, v.error().message));
      if (*v < 1)
        return invalid_input(
            fmt::format("tensor \"{}\": dim \"{}\" = {} must be positive", spec.name, expr, *v));
      d.dims.push_back(*v);
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace

Result<ResolvedShape> resolve_shape(const OperatorDef& def, const Shape& shape) {
  ResolvedShape r;
  r.def = &def;
  r.shape_id = shape.id;
  r.params = shape.params;
  auto where = [&](const std::string& what) {
    return invalid_input(fmt::format("operator {}, shape {}: {}", def.name, shape.id, what));
  };
  for (const auto& p : def.params) {
    auto it = r.params.find(p.name);
    if (it == r.params.end()) {
      if (p.required) return where(fmt::format("parameter \"{}\" is missing", p.name));
      r.params[p.name] = p.default_value;
      continue;
    }
    if (auto c = check_param(p, *it); !c)
      return where(fmt::format("parameter \"{}\": {}", p.name, c.error().message));
    if (p.kind == ParamKind::kInt && it->get<int64_t>() < 0) {
      return where(fmt::format("parameter \"{}\": expected a non-negative integer; got {}", p.name,
                               it->dump()));
    }
  }
  auto in = resolve_tensors(def.inputs, r.params);
  if (!in) return where(in.error().message);
  auto out = resolve_tensors(def.outputs, r.params);
  if (!out) return where(out.error().message);
  r.inputs = std::move(*in);
  r.outputs = std::move(*out);
  if (def.resolve) {
    if (auto h = def.resolve(r); !h) return where(h.error().message);
  }
  for (const auto* list : {&r.inputs, &r.outputs}) {
    for (const auto& t : *list) {
      for (int64_t dim : t.dims) {
        if (dim < 0)
          return internal_error(fmt::format(
              "operator {}: tensor {} has a dim its resolve hook did not set", def.name, t.name));
      }
    }
  }
  return r;
}

void parallel_for_cpu(int64_t n, const std::function<void(int64_t, int64_t)>& range_fn) {
  const int64_t threads =
      std::max<int64_t>(1, std::min<int64_t>(std::thread::hardware_concurrency(), n / 64));
  if (threads <= 1) {
    range_fn(0, n);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t chunk = (n + threads - 1) / threads;
  for (int64_t t = 0; t < threads; ++t) {
    const int64_t b = t * chunk, e = std::min(n, b + chunk);
    if (b < e) pool.emplace_back([&, b, e] { range_fn(b, e); });
  }
  for (auto& th : pool) th.join();
}

void generate_input_cpu(const ResolvedShape& shape, size_t index, uint64_t seed, void* data,
                        int scale_exponent) {
  const TensorSpec& spec = shape.def->inputs[index];
  if (spec.generate) {
    spec.generate(shape, index, seed, data);
    return;
  }
  const Distribution& d = spec.distribution;
  GenerateFn f{d.kind,
               static_cast<float>(d.scale),
               static_cast<float>(d.offset),
               d.lo,
               d.hi,
               gen_dtype(spec.dtype),
               data,
               seed,
               input_stream_id(index),
               std::ldexp(1.0f, scale_exponent)};
  const int64_t n = shape.inputs[index].numel();
  parallel_for_cpu(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i);
  });
}

int range_probe_exponent(const OperatorDef& def, size_t index) {
  if (!def.range_probe.enabled() || index >= def.inputs.size()) return 0;
  const auto& names = def.range_probe.inputs;
  return std::find(names.begin(), names.end(), def.inputs[index].name) != names.end()
             ? def.range_probe.exponent
             : 0;
}

Result<void> scale_by_power_of_two(DType dtype, void* data, int64_t n, int exponent) {
  const float m = std::ldexp(1.0f, exponent);
  switch (dtype) {
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        auto* p = static_cast<uint16_t*>(data) + i;
        *p = num::float_to_bf16(num::bf16_to_float(*p) * m);
      }
      return ok();
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        auto* p = static_cast<uint16_t*>(data) + i;
        *p = num::float_to_fp16(num::fp16_to_float(*p) * m);
      }
      return ok();
    case DType::kF32:
      for (int64_t i = 0; i < n; ++i) static_cast<float*>(data)[i] *= m;
      return ok();
    case DType::kF64:
      for (int64_t i = 0; i < n; ++i)
        static_cast<double*>(data)[i] = std::ldexp(static_cast<double*>(data)[i], exponent);
      return ok();
    default:
      return invalid_input(
          fmt::format("cannot scale a {} tensor by a power of two", dtype_name(dtype)));
  }
}

const OperatorDef* find_native_operator(std::string_view name) {
  for (const auto& op : native_operators()) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

Result<const OperatorDef*> require_native_operator(std::string_view name) {
  if (const auto* op = find_native_operator(name)) return op;
  std::vector<std::string> names;
  for (const auto& op : native_operators()) names.push_back(op.name);
  return not_found(fmt::format("operator \"{}\" has no native definition yet; covered: {}", name,
                               fmt::join(names, ", ")));
}

}  // namespace atrex::problems
