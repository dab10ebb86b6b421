#include "atrex/ingest/rules.h"

#include <array>
#include <cstdlib>
#include <set>

#include <fmt/format.h>

#include "atrex/problems/suite.h"

namespace atrex::ingest {
namespace {

namespace fs = std::filesystem;

Result<void> only_keys(const JsonField& f, std::initializer_list<std::string_view> allowed) {
  ATREX_TRY(f.expect_object());
  for (auto& [k, v] : f.value().items()) {
    bool known = false;
    for (auto a : allowed) known = known || a == k;
    if (!known) {
      std::string list;
      for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      return invalid_input(fmt::format("{}: field \"{}{}{}\" is unknown (allowed: {})",
                                       f.source(), f.path(), f.path().empty() ? "" : ".", k,
                                       list));
    }
  }
  return ok();
}

Result<Pattern> pattern_at(const JsonField& parent, std::string_view key) {
  ATREX_ASSIGN_OR_RETURN(auto f, parent.at(key));
  ATREX_ASSIGN_OR_RETURN(std::string text, f.as_string());
  if (text.empty()) return f.fail("expected a non-empty regular expression");
  try {
    return Pattern{text, std::regex(text, std::regex::ECMAScript | std::regex::optimize)};
  } catch (const std::regex_error& e) {
    return f.fail(fmt::format("bad regular expression ({})", e.what()));
  }
}

Result<std::optional<Pattern>> optional_pattern(const JsonField& parent, std::string_view key) {
  if (!parent.has(key)) return std::optional<Pattern>();
  ATREX_ASSIGN_OR_RETURN(Pattern p, pattern_at(parent, key));
  return std::optional<Pattern>(std::move(p));
}

Result<int> int_at(const JsonField& parent, std::string_view key) {
  ATREX_ASSIGN_OR_RETURN(auto f, parent.at(key));
  ATREX_ASSIGN_OR_RETURN(int64_t v, f.as_int());
  return static_cast<int>(v);
}

Result<ParamSource> parse_source(const JsonField& f) {
  ParamSource s;
  if (!f.value().is_object()) {  // a bare scalar or list is a constant
    s.kind = ParamSource::Kind::kValue;
    s.value = f.value();
    return s;
  }
  ATREX_TRY(only_keys(f, {"value", "input", "dim", "prod", "dims", "concrete", "dtype", "list",
                          "repeat", "times", "mul", "div", "add", "from", "nth"}));
  int kinds = 0;
  if (f.has("value")) {
    ++kinds;
    s.kind = ParamSource::Kind::kValue;
    s.value = f.value()["value"];
  }
  if (f.has("dim")) {
    ++kinds;
    s.kind = ParamSource::Kind::kDim;
    ATREX_ASSIGN_OR_RETURN(s.dim, int_at(f, "dim"));
  }
  if (f.has("prod")) {
    ++kinds;
    s.kind = ParamSource::Kind::kProd;
    ATREX_ASSIGN_OR_RETURN(auto p, f.at("prod"));
    ATREX_TRY(p.expect_array());
    if (p.value().empty() || p.value().size() > 2) return p.fail("expected [from] or [from, to]");
    ATREX_ASSIGN_OR_RETURN(int64_t from, p.element(0).as_int());
    s.from = static_cast<int>(from);
    if (p.value().size() == 2) {
      ATREX_ASSIGN_OR_RETURN(int64_t to, p.element(1).as_int());
      s.to = static_cast<int>(to);
    }
  }
  if (f.has("dims")) {
    ++kinds;
    s.kind = ParamSource::Kind::kDims;
    ATREX_ASSIGN_OR_RETURN(auto d, f.at("dims"));
    ATREX_ASSIGN_OR_RETURN(bool all, d.as_bool());
    if (!all) return d.fail("expected true");
  }
  if (f.has("concrete")) {
    ++kinds;
    s.kind = ParamSource::Kind::kConcrete;
    ATREX_ASSIGN_OR_RETURN(s.input, int_at(f, "concrete"));
  }
  if (f.has("dtype")) {
    ++kinds;
    s.kind = ParamSource::Kind::kDtype;
    ATREX_ASSIGN_OR_RETURN(s.input, int_at(f, "dtype"));
  }
  if (f.has("list")) {
    ++kinds;
    s.kind = ParamSource::Kind::kList;
    ATREX_ASSIGN_OR_RETURN(auto l, f.at("list"));
    ATREX_TRY(l.expect_array());
    for (size_t i = 0; i < l.value().size(); ++i) {
      ATREX_ASSIGN_OR_RETURN(auto item, parse_source(l.element(i)));
      s.items.push_back(std::move(item));
    }
  }
  if (f.has("repeat")) {
    ++kinds;
    s.kind = ParamSource::Kind::kRepeat;
    if (!f.has("times")) return f.fail("\"repeat\" needs \"times\"");
    ATREX_ASSIGN_OR_RETURN(auto r, f.at("repeat"));
    ATREX_ASSIGN_OR_RETURN(auto rs, parse_source(r));
    ATREX_ASSIGN_OR_RETURN(auto t, f.at("times"));
    ATREX_ASSIGN_OR_RETURN(auto ts, parse_source(t));
    s.items = {std::move(rs), std::move(ts)};
  } else if (f.has("times")) {
    return f.fail("\"times\" without \"repeat\"");
  }
  if (kinds != 1) {
    return f.fail("expected exactly one of value, dim, prod, dims, concrete, dtype, list, repeat");
  }
  const bool needs_input = s.kind == ParamSource::Kind::kDim ||
                           s.kind == ParamSource::Kind::kProd || s.kind == ParamSource::Kind::kDims;
  if (needs_input) {
    if (!f.has("input")) return f.fail("expected \"input\" (the op's input index)");
    ATREX_ASSIGN_OR_RETURN(s.input, int_at(f, "input"));
  } else if (f.has("input")) {
    return f.fail("\"input\" goes with dim, prod or dims");
  }
  if (s.input < 0) return f.fail("input index must be >= 0");
  const std::array<std::pair<const char*, int64_t*>, 3> modifiers = {
      {{"mul", &s.mul}, {"div", &s.div}, {"add", &s.add}}};
  for (auto [key, target] : modifiers) {
    if (!f.has(key)) continue;
    ATREX_ASSIGN_OR_RETURN(auto m, f.at(key));
    ATREX_ASSIGN_OR_RETURN(*target, m.as_int());
  }
  if (s.div == 0) return f.fail("\"div\" must not be 0");
  ATREX_ASSIGN_OR_RETURN(s.from_op, optional_pattern(f, "from"));
  if (f.has("nth")) {
    if (!s.from_op) return f.fail("\"nth\" goes with \"from\"");
    ATREX_ASSIGN_OR_RETURN(s.from_nth, int_at(f, "nth"));
    if (s.from_nth < 0) return f.fail("\"nth\" must be >= 0");
  }
  return s;
}

Result<std::vector<std::pair<std::string, ParamSource>>> parse_params(const JsonField& rule,
                                                                      std::string_view key) {
  std::vector<std::pair<std::string, ParamSource>> out;
  if (!rule.has(key)) return out;
  ATREX_ASSIGN_OR_RETURN(auto f, rule.at(key));
  ATREX_TRY(f.expect_object());
  for (auto& [name, v] : f.value().items()) {
    ATREX_ASSIGN_OR_RETURN(auto src, parse_source(JsonField(v, f.source(), f.path() + "." + name)));
    out.emplace_back(name, std::move(src));
  }
  return out;
}

Result<FamilyRule> parse_rule(const JsonField& f) {
  ATREX_TRY(only_keys(f, {"family", "kernel", "op", "scope", "runtime", "init", "input", "hidden",
                          "when"}));
  FamilyRule r;
  r.where = f.source() + ": " + f.path();
  ATREX_ASSIGN_OR_RETURN(auto fam, f.at("family"));
  ATREX_ASSIGN_OR_RETURN(r.family, fam.as_string());
  if (r.family.empty()) return fam.fail("expected a family name");
  ATREX_ASSIGN_OR_RETURN(r.kernel, optional_pattern(f, "kernel"));
  ATREX_ASSIGN_OR_RETURN(r.op, optional_pattern(f, "op"));
  ATREX_ASSIGN_OR_RETURN(r.scope, optional_pattern(f, "scope"));
  ATREX_ASSIGN_OR_RETURN(r.runtime, optional_pattern(f, "runtime"));
  if (!r.kernel && !r.op && !r.scope && !r.runtime) {
    return f.fail("a rule needs at least one of kernel, op, scope, runtime");
  }
  ATREX_ASSIGN_OR_RETURN(r.init, parse_params(f, "init"));
  ATREX_ASSIGN_OR_RETURN(r.input, parse_params(f, "input"));
  ATREX_ASSIGN_OR_RETURN(r.hidden, parse_params(f, "hidden"));
  for (const auto& [name, src] : r.hidden) {
    if (name.empty() || name[0] != '_') {
      return invalid_input(fmt::format("{}: field \"{}.hidden.{}\": hidden parameter names start "
                                       "with \"_\"",
                                       f.source(), f.path(), name));
    }
  }
  if (f.has("when")) {
    ATREX_ASSIGN_OR_RETURN(auto w, f.at("when"));
    ATREX_TRY(w.expect_array());
    for (size_t i = 0; i < w.value().size(); ++i) {
      JsonField c = w.element(i);
      ATREX_TRY(only_keys(c, {"param", "eq", "ne", "lt", "le", "gt", "ge"}));
      Condition cond;
      ATREX_ASSIGN_OR_RETURN(auto p, c.at("param"));
      ATREX_ASSIGN_OR_RETURN(cond.param, p.as_string());
      for (const char* op : {"eq", "ne", "lt", "le", "gt", "ge"}) {
        if (!c.has(op)) continue;
        if (!cond.op.empty()) return c.fail("expected one comparison");
        cond.op = op;
        cond.value = c.value()[op];
      }
      if (cond.op.empty()) return c.fail("expected a comparison: eq, ne, lt, le, gt or ge");
      bool known = false;
      for (const auto* list : {&r.init, &r.input, &r.hidden}) {
        for (const auto& [name, src] : *list) known = known || name == cond.param;
      }
      if (!known) return p.fail("names no parameter of this rule");
      r.when.push_back(std::move(cond));
    }
  }
  return r;
}

Result<PhaseRules> parse_phases(const JsonField& root) {
  PhaseRules p;
  Json defaults = {{"prefill", "^prefill"},
                   {"decode", "^decode"},
                   {"step", "^ProfilerStep#"},
                   {"tokens_op", "^aten::embedding$"}};
  const Json empty = Json::object();
  const JsonField f = root.has("phases") ? *root.at("phases") : JsonField(empty, root.source());
  ATREX_TRY(only_keys(f, {"prefill", "decode", "step", "tokens_op", "tokens_input",
                          "decode_max_tokens"}));
  Json merged = defaults;
  for (auto& [k, v] : f.value().items()) merged[k] = v;
  const JsonField m(merged, f.source(), f.path().empty() ? "phases" : f.path());
  ATREX_ASSIGN_OR_RETURN(p.prefill, pattern_at(m, "prefill"));
  ATREX_ASSIGN_OR_RETURN(p.decode, pattern_at(m, "decode"));
  ATREX_ASSIGN_OR_RETURN(p.step, pattern_at(m, "step"));
  ATREX_ASSIGN_OR_RETURN(p.tokens_op, pattern_at(m, "tokens_op"));
  if (merged.contains("tokens_input")) {
    ATREX_ASSIGN_OR_RETURN(p.tokens_input, int_at(m, "tokens_input"));
  }
  if (merged.contains("decode_max_tokens")) {
    ATREX_ASSIGN_OR_RETURN(auto d, m.at("decode_max_tokens"));
    ATREX_ASSIGN_OR_RETURN(p.decode_max_tokens, d.as_int());
    if (p.decode_max_tokens < 1) return d.fail("expected a positive token count");
  }
  return p;
}

}  // namespace

Result<Rules> parse_rules(const Json& doc, const fs::path& file) {
  JsonField root(doc, file.string());
  ATREX_TRY(only_keys(root, {"version", "families", "phases", "report_only"}));
  ATREX_ASSIGN_OR_RETURN(auto v, root.at("version"));
  ATREX_ASSIGN_OR_RETURN(std::string version, v.as_string());
  if (version != "atrex.ingest-rules/1") return v.fail("expected \"atrex.ingest-rules/1\"");
  Rules rules;
  rules.file = file;
  ATREX_ASSIGN_OR_RETURN(auto fams, root.at("families"));
  ATREX_TRY(fams.expect_array());
  if (fams.value().empty()) return fams.fail("expected at least one rule");
  for (size_t i = 0; i < fams.value().size(); ++i) {
    ATREX_ASSIGN_OR_RETURN(auto r, parse_rule(fams.element(i)));
    rules.rules.push_back(std::move(r));
  }
  ATREX_ASSIGN_OR_RETURN(rules.phases, parse_phases(root));
  if (root.has("report_only")) {
    ATREX_ASSIGN_OR_RETURN(auto ro, root.at("report_only"));
    ATREX_TRY(ro.expect_array());
    for (size_t i = 0; i < ro.value().size(); ++i) {
      ATREX_ASSIGN_OR_RETURN(std::string name, ro.element(i).as_string());
      rules.report_only.push_back(name);
    }
  }
  return rules;
}

Result<Rules> load_rules(const fs::path& file) {
  ATREX_ASSIGN_OR_RETURN(std::string text, read_text_file(file));
  ATREX_ASSIGN_OR_RETURN(Json doc, parse_yaml_to_json(text, file.string()));
  return parse_rules(doc, file);
}

fs::path default_rules_file() {
  if (const char* env = std::getenv("ATREX_INGEST_RULES"); env && *env) return env;
  fs::path staged = problems::executable_dir().parent_path() / "share" / "atrex" / "ingest" /
                    "rules.yaml";
  std::error_code ec;
  if (fs::exists(staged, ec)) return staged;
  return ATREX_SOURCE_INGEST_RULES;
}

}  // namespace atrex::ingest
