#include <cmath>

#include <fmt/format.h>

#include "atrex/ingest/ingest.h"

namespace atrex::ingest {

const char* phase_name(int phase) {
  switch (phase) {
    case kPrefill: return "prefill";
    case kDecode: return "decode";
    default: return "unknown";
  }
}

namespace {

Result<void> only_keys(const JsonField& f, std::initializer_list<std::string_view> allowed) {
  ATREX_TRY(f.expect_object());
  for (auto& [k, v] : f.value().items()) {
    bool known = false;
    for (auto a : allowed) known = known || a == k;
    if (!known) {
      return invalid_input(fmt::format("{}: field \"{}{}{}\" is unknown", f.source(), f.path(),
                                       f.path().empty() ? "" : ".", k));
    }
  }
  return ok();
}

Result<App> parse_app(const JsonField& f) {
  ATREX_TRY(only_keys(f, {"name", "card_hours", "traces", "phases"}));
  App app;
  ATREX_ASSIGN_OR_RETURN(auto n, f.at("name"));
  ATREX_ASSIGN_OR_RETURN(app.name, n.as_string());
  if (app.name.empty()) return n.fail("expected a name");
  ATREX_ASSIGN_OR_RETURN(auto h, f.at("card_hours"));
  ATREX_ASSIGN_OR_RETURN(app.card_hours, h.as_number());
  if (!(app.card_hours > 0) || !std::isfinite(app.card_hours)) {
    return h.fail("expected a positive number of card-hours");
  }
  ATREX_ASSIGN_OR_RETURN(auto t, f.at("traces"));
  ATREX_TRY(t.expect_array());
  if (t.value().empty()) return t.fail("expected at least one trace file pattern");
  for (size_t i = 0; i < t.value().size(); ++i) {
    ATREX_ASSIGN_OR_RETURN(std::string g, t.element(i).as_string());
    app.traces.push_back(g);
  }
  if (f.has("phases")) {
    ATREX_ASSIGN_OR_RETURN(auto p, f.at("phases"));
    ATREX_TRY(only_keys(p, {"prefill", "decode"}));
    std::array<double, 2> share{0, 0};
    for (int i = 0; i < 2; ++i) {
      const char* key = i == 0 ? "prefill" : "decode";
      if (!p.has(key)) continue;
      ATREX_ASSIGN_OR_RETURN(auto v, p.at(key));
      ATREX_ASSIGN_OR_RETURN(share[i], v.as_number());
      if (!(share[i] >= 0 && share[i] <= 1)) return v.fail("expected a share in [0, 1]");
    }
    if (std::abs(share[0] + share[1] - 1) > 1e-6) {
      return p.fail(fmt::format("prefill + decode must sum to 1 (got {})", share[0] + share[1]));
    }
    app.phase_share = share;
  }
  return app;
}

}  // namespace

Result<Apps> load_apps(const std::filesystem::path& file) {
  ATREX_ASSIGN_OR_RETURN(std::string text, read_text_file(file));
  ATREX_ASSIGN_OR_RETURN(Json doc, parse_yaml_to_json(text, file.string()));
  JsonField root(doc, file.string());
  ATREX_TRY(only_keys(root, {"version", "apps"}));
  ATREX_ASSIGN_OR_RETURN(auto v, root.at("version"));
  ATREX_ASSIGN_OR_RETURN(std::string version, v.as_string());
  if (version != "atrex.ingest-apps/1") return v.fail("expected \"atrex.ingest-apps/1\"");
  ATREX_ASSIGN_OR_RETURN(auto list, root.at("apps"));
  ATREX_TRY(list.expect_array());
  if (list.value().empty()) return list.fail("expected at least one application");
  Apps apps;
  apps.file = file;
  for (size_t i = 0; i < list.value().size(); ++i) {
    ATREX_ASSIGN_OR_RETURN(App a, parse_app(list.element(i)));
    for (const auto& other : apps.apps) {
      if (other.name == a.name) {
        return invalid_input(fmt::format("{}: field \"apps[{}].name\": \"{}\" is listed twice",
                                         file.string(), i, a.name));
      }
    }
    apps.apps.push_back(std::move(a));
  }
  return apps;
}

}  // namespace atrex::ingest
