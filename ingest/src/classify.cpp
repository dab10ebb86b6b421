#include "classify.h"

#include <charconv>
#include <functional>

#include <fmt/format.h>

namespace atrex::ingest::detail {
namespace {

// The op whose inputs a source reads, and how to find another one (`from`).
struct SourceContext {
  const OpInputs* inputs = nullptr;
  std::string op_name;
  std::function<Result<SourceContext>(const Pattern&, int nth)> find;
};

Result<const std::vector<int64_t>*> input_dims(const ParamSource& src, const SourceContext& c) {
  if (c.inputs == nullptr) {
    return invalid_input(fmt::format("no record_shapes data on \"{}\"", c.op_name));
  }
  if (src.input >= static_cast<int>(c.inputs->dims.size())) {
    return invalid_input(fmt::format("\"{}\" has {} inputs, no input {}", c.op_name,
                                     c.inputs->dims.size(), src.input));
  }
  return &c.inputs->dims[src.input];
}

std::string dims_text(const std::vector<int64_t>& d) { return fmt::format("[{}]", fmt::join(d, ", ")); }

Result<Json> apply_modifiers(const ParamSource& src, Json v, const std::string& op) {
  if (src.mul == 1 && src.div == 1 && src.add == 0) return v;
  if (!v.is_number_integer()) {
    return invalid_input(fmt::format("mul/div/add on a non-integer value {} of \"{}\"", v.dump(), op));
  }
  int64_t x = 0, y = 0;
  if (__builtin_mul_overflow(v.get<int64_t>(), src.mul, &x)) {
    return invalid_input(fmt::format("{} * {} of \"{}\" is out of range", v.dump(), src.mul, op));
  }
  if (x % src.div != 0) {
    return invalid_input(fmt::format("{} of \"{}\" is not divisible by {}", x, op, src.div));
  }
  if (__builtin_add_overflow(x / src.div, src.add, &y)) {
    return invalid_input(fmt::format("{} + {} of \"{}\" is out of range", x / src.div, src.add, op));
  }
  return Json(y);
}

Result<Json> eval_in(const ParamSource& src, const SourceContext& outer) {
  SourceContext c = outer;
  if (src.from_op) {
    if (!outer.find) return invalid_input("\"from\" without an anchor op");
    ATREX_ASSIGN_OR_RETURN(c, outer.find(*src.from_op, src.from_nth));
  }
  Json v;
  switch (src.kind) {
    case ParamSource::Kind::kValue: v = src.value; break;
    case ParamSource::Kind::kDim: {
      ATREX_ASSIGN_OR_RETURN(const auto* d, input_dims(src, c));
      const int n = static_cast<int>(d->size());
      const int i = src.dim < 0 ? n + src.dim : src.dim;
      if (i < 0 || i >= n) {
        return invalid_input(fmt::format("input {} of \"{}\" is {}: no dim {}", src.input,
                                         c.op_name, dims_text(*d), src.dim));
      }
      v = (*d)[i];
      break;
    }
    case ParamSource::Kind::kProd: {
      ATREX_ASSIGN_OR_RETURN(const auto* d, input_dims(src, c));
      const int n = static_cast<int>(d->size());
      auto clamp = [n](int x) { return std::max(0, std::min(n, x < 0 ? n + x : x)); };
      const int a = clamp(src.from);
      const int b = src.to ? clamp(*src.to) : n;
      if (n == 0 || a >= b) {
        return invalid_input(fmt::format("input {} of \"{}\" is {}: empty slice", src.input,
                                         c.op_name, dims_text(*d)));
      }
      int64_t p = 1;
      for (int i = a; i < b; ++i) {
        if ((*d)[i] < 0 || __builtin_mul_overflow(p, (*d)[i], &p)) {
          return invalid_input(fmt::format("input {} of \"{}\" is {}: product out of range",
                                           src.input, c.op_name, dims_text(*d)));
        }
      }
      v = p;
      break;
    }
    case ParamSource::Kind::kDims: {
      ATREX_ASSIGN_OR_RETURN(const auto* d, input_dims(src, c));
      if (d->empty()) {
        return invalid_input(fmt::format("input {} of \"{}\" has no dims", src.input, c.op_name));
      }
      v = *d;
      break;
    }
    case ParamSource::Kind::kConcrete: {
      if (c.inputs == nullptr || src.input >= static_cast<int>(c.inputs->concrete.size()) ||
          c.inputs->concrete[src.input].empty()) {
        return invalid_input(fmt::format("no concrete input {} on \"{}\"", src.input, c.op_name));
      }
      const std::string& s = c.inputs->concrete[src.input];
      if (s == "True" || s == "False") {
        v = s == "True";
        break;
      }
      int64_t i = 0;
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), i);
      if (ec == std::errc() && p == s.data() + s.size()) {
        v = i;
        break;
      }
      double d = 0;
      auto [p2, ec2] = std::from_chars(s.data(), s.data() + s.size(), d);
      if (ec2 != std::errc() || p2 != s.data() + s.size()) {
        return invalid_input(fmt::format("concrete input {} of \"{}\" is \"{}\", not a number",
                                         src.input, c.op_name, s));
      }
      v = d;
      break;
    }
    case ParamSource::Kind::kDtype:
      if (c.inputs == nullptr || src.input >= static_cast<int>(c.inputs->types.size())) {
        return invalid_input(fmt::format("no input type {} on \"{}\"", src.input, c.op_name));
      }
      v = dtype_name(c.inputs->types[src.input]);
      break;
    case ParamSource::Kind::kList:
      v = Json::array();
      for (const auto& item : src.items) {
        ATREX_ASSIGN_OR_RETURN(Json x, eval_in(item, c));
        v.push_back(std::move(x));
      }
      break;
    case ParamSource::Kind::kRepeat: {
      ATREX_ASSIGN_OR_RETURN(Json x, eval_in(src.items[0], c));
      ATREX_ASSIGN_OR_RETURN(Json t, eval_in(src.items[1], c));
      if (!t.is_number_integer() || t.get<int64_t>() < 1 || t.get<int64_t>() > 1000000) {
        return invalid_input(fmt::format("repeat count {} of \"{}\" is not in 1..1000000",
                                         t.dump(), c.op_name));
      }
      v = Json::array();
      for (int64_t i = 0; i < t.get<int64_t>(); ++i) v.push_back(x);
      break;
    }
  }
  return apply_modifiers(src, std::move(v), c.op_name);
}

bool compare(const Json& a, const std::string& op, const Json& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    if (op == "eq") return x == y;
    if (op == "ne") return x != y;
    if (op == "lt") return x < y;
    if (op == "le") return x <= y;
    if (op == "gt") return x > y;
    return x >= y;
  }
  if (op == "eq") return a == b;
  if (op == "ne") return a != b;
  return false;
}

}  // namespace

std::string dtype_name(const std::string& t) {
  static const std::pair<const char*, const char*> kMap[] = {
      {"c10::BFloat16", "bf16"},     {"c10::Half", "fp16"},         {"float", "fp32"},
      {"double", "fp64"},            {"c10::Float8_e4m3fn", "fp8_e4m3"},
      {"c10::Float8_e5m2", "fp8_e5m2"}, {"int", "i32"},             {"long int", "i64"},
      {"long", "i64"},               {"unsigned char", "u8"},       {"signed char", "i8"},
      {"bool", "bool"}};
  for (const auto& [from, to] : kMap) {
    if (t == from) return to;
  }
  return t;
}

Result<Json> eval_source(const ParamSource& src, const OpInputs& in, const std::string& op_name) {
  SourceContext c{&in, op_name, nullptr};
  return eval_in(src, c);
}

namespace {
bool reads_from(const ParamSource& s) {
  if (s.from_op) return true;
  for (const auto& item : s.items) {
    if (reads_from(item)) return true;
  }
  return false;
}
}  // namespace

Classifier::Classifier(const Rules& rules, const StringPool& names) : rules_(rules), names_(names) {
  for (const auto& r : rules.rules) {
    bool from = false;
    for (const auto* list : {&r.init, &r.input, &r.hidden}) {
      for (const auto& [name, src] : *list) from = from || reads_from(src);
    }
    uses_from_.push_back(from);
  }
}

void Classifier::begin_file(const TraceFile& file, const FileIndex& idx) {
  file_ = &file;
  idx_ = &idx;
  shapes_.clear();
  phases_.clear();
  steps_.clear();
}

int8_t Classifier::match(const Pattern& p, int slot, uint32_t name) {
  if (cache_.size() <= static_cast<size_t>(slot)) cache_.resize(slot + 1);
  auto& c = cache_[slot];
  if (c.size() <= name) c.resize(names_.size(), -1);
  if (c[name] < 0) c[name] = p.search(names_.get(name)) ? 1 : 0;
  return c[name];
}

std::vector<int32_t> Classifier::chain_of(int32_t range) const {
  std::vector<int32_t> chain;
  for (int32_t r = range; r >= 0; r = idx_->parent[r]) chain.push_back(r);
  return chain;
}

const Shape& Classifier::shape_for(int rule_index, int32_t anchor, int32_t root) {
  // A rule that reads only its anchor's own record_shapes data gives the same shape for every call
  // of that op with the same inputs: one cache entry per (rule, op name, inputs), not per call
  // (the memory of a 100 MB trace). Rules < 2^8, names < 2^27, ranges and inputs < 2^28.
  uint64_t key = 0;
  if (!uses_from_[rule_index]) {
    const uint64_t name = anchor >= 0 ? file_->ranges[anchor].name + 1ull : 0;
    const uint64_t inputs = anchor >= 0 ? static_cast<uint64_t>(file_->ranges[anchor].inputs + 1) : 0;
    key = (static_cast<uint64_t>(rule_index) << 56) | (1ull << 55) | (name << 28) | inputs;
  } else {
    key = (static_cast<uint64_t>(rule_index) << 56) ^ (static_cast<uint64_t>(anchor + 1) << 28) ^
          static_cast<uint64_t>(root + 1);
  }
  auto it = shapes_.find(key);
  if (it != shapes_.end()) return it->second;
  Shape shape;
  const FamilyRule& rule = rules_.rules[rule_index];
  SourceContext ctx;
  if (anchor >= 0) {
    const CpuRange& a = file_->ranges[anchor];
    ctx.op_name = names_.get(a.name);
    ctx.inputs = a.inputs >= 0 ? &file_->inputs[a.inputs] : nullptr;
    const int32_t search_root = root >= 0 ? root : anchor;
    ctx.find = [this, search_root](const Pattern& p, int nth) -> Result<SourceContext> {
      SourceContext found;
      int seen = 0;
      for_each_descendant(*file_, *idx_, search_root, [&](int32_t r) {
        const CpuRange& c = file_->ranges[r];
        if (c.kind == RangeKind::kOp && p.search(names_.get(c.name)) && seen++ == nth) {
          found.op_name = names_.get(c.name);
          found.inputs = c.inputs >= 0 ? &file_->inputs[c.inputs] : nullptr;
          return false;
        }
        return true;
      });
      if (found.op_name.empty()) {
        return invalid_input(fmt::format("no op #{} matching /{}/ under \"{}\"", nth, p.text,
                                         names_.get(file_->ranges[search_root].name)));
      }
      return found;
    };
  } else {
    ctx.op_name = "(no launching op)";
  }
  if (rule.init.empty() && rule.input.empty()) {
    shape.reason = fmt::format("the rule ({}) reads no shape parameters; launched by \"{}\"",
                               rule.where, ctx.op_name);
    return shapes_.emplace(key, std::move(shape)).first->second;
  }
  shape.ok = true;
  for (auto [list, out] : {std::pair{&rule.input, &shape.input}, std::pair{&rule.init, &shape.init},
                           std::pair{&rule.hidden, &shape.hidden}}) {
    for (const auto& [name, src] : *list) {
      auto v = eval_in(src, ctx);
      if (!v) {
        shape.ok = false;
        shape.reason = fmt::format("{}: {}", name, v.error().message);
        break;
      }
      (*out)[name] = std::move(*v);
    }
    if (!shape.ok) break;
  }
  if (shape.ok) shape.key = Json{{"init", shape.init}, {"input", shape.input}}.dump();
  return shapes_.emplace(key, std::move(shape)).first->second;
}

int Classifier::step_phase(int32_t step) {
  auto it = steps_.find(step);
  if (it != steps_.end()) return it->second;
  const PhaseRules& pr = rules_.phases;
  const int slot = static_cast<int>(rules_.rules.size()) * 4 + 3;
  int phase = kUnknownPhase;
  for_each_descendant(*file_, *idx_, step, [&](int32_t r) {
    const CpuRange& c = file_->ranges[r];
    if (c.kind != RangeKind::kOp || c.inputs < 0 || !match(pr.tokens_op, slot, c.name)) return true;
    const auto& dims = file_->inputs[c.inputs].dims;
    if (pr.tokens_input >= static_cast<int>(dims.size()) || dims[pr.tokens_input].empty()) return true;
    phase = dims[pr.tokens_input].back() <= pr.decode_max_tokens ? kDecode : kPrefill;
    return false;
  });
  steps_[step] = phase;
  return phase;
}

int Classifier::phase_for(int32_t range) {
  if (range < 0) return kUnknownPhase;
  auto it = phases_.find(range);
  if (it != phases_.end()) return it->second;
  const PhaseRules& pr = rules_.phases;
  const int base = static_cast<int>(rules_.rules.size()) * 4;
  int phase = kUnknownPhase;
  int32_t step = -1;
  for (int32_t r = range; r >= 0; r = idx_->parent[r]) {
    const CpuRange& c = file_->ranges[r];
    if (c.kind == RangeKind::kAnnotation) {
      if (match(pr.prefill, base, c.name)) { phase = kPrefill; break; }
      if (match(pr.decode, base + 1, c.name)) { phase = kDecode; break; }
    }
    if (step < 0 && match(pr.step, base + 2, c.name)) step = r;
  }
  if (phase == kUnknownPhase && step >= 0) phase = step_phase(step);
  phases_[range] = phase;
  return phase;
}

KernelClass Classifier::classify(uint32_t kernel) {
  KernelClass out;
  const GpuKernel& k = file_->kernels[kernel];
  const int32_t call = idx_->kernel_runtime[kernel];
  const int32_t start = call >= 0 ? idx_->runtime_range[call] : -1;
  const std::vector<int32_t> chain = chain_of(start);
  for (int32_t r : chain) {
    if (file_->ranges[r].kind == RangeKind::kOp) {
      out.launch_op = r;
      break;
    }
  }
  out.phase = phase_for(start);
  for (size_t i = 0; i < rules_.rules.size(); ++i) {
    const FamilyRule& rule = rules_.rules[i];
    const int slot = static_cast<int>(i) * 4;
    if (rule.kernel && !match(*rule.kernel, slot, k.name)) continue;
    if (rule.runtime && (call < 0 || !match(*rule.runtime, slot + 3, file_->runtime[call].name))) continue;
    int32_t anchor = -1, root = -1;
    if (rule.op) {
      for (int32_t r : chain) {
        const CpuRange& c = file_->ranges[r];
        if (c.kind == RangeKind::kOp && match(*rule.op, slot + 1, c.name)) {
          anchor = r;
          break;
        }
      }
      if (anchor < 0) continue;
    }
    if (rule.scope) {
      int32_t scope = -1;
      for (int32_t r : chain) {
        if (match(*rule.scope, slot + 2, file_->ranges[r].name)) {
          scope = r;
          break;
        }
      }
      if (scope < 0) continue;
      if (anchor < 0) anchor = scope;
      root = scope;
    }
    if (anchor < 0) anchor = out.launch_op;
    const Shape& shape = shape_for(static_cast<int>(i), anchor, root);
    if (!rule.when.empty()) {
      if (!shape.ok) continue;
      bool pass = true;
      for (const auto& cond : rule.when) {
        const Json* v = nullptr;
        for (const Json* obj : {&shape.init, &shape.input, &shape.hidden}) {
          if (obj->contains(cond.param)) v = &(*obj)[cond.param];
        }
        pass = pass && v != nullptr && compare(*v, cond.op, cond.value);
      }
      if (!pass) continue;
    }
    out.rule = static_cast<int>(i);
    out.shape = &shape;
    return out;
  }
  return out;
}

}  // namespace atrex::ingest::detail
