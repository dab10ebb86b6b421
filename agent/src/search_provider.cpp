// The `search` provider: a measured local search over kernel templates.
//
// Each generation starts from the template its direction names (direction.h: a template no
// earlier generation or parallel sub-agent of the (agent, operator) started from, while there
// is one), so a dropout restart explores elsewhere. Within a generation: first the direction
// template's defaults, then single-parameter moves (one step up or down its value list) around the
// generation's incumbent, in a seeded random order, skipping anything already measured for
// this (agent, operator); then the other templates' defaults; then random points.
#include "atrex/agent/search_provider.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>

#include <fmt/format.h>

#include "atrex/common/hash.h"

namespace atrex::agent {
namespace fs = std::filesystem;

namespace {

class SearchProvider final : public Provider {
 public:
  explicit SearchProvider(const TemplateCatalog& catalog) : catalog_(catalog) {}
  std::string name() const override { return "search"; }

  // One direction per template of the operator and backend (the knowledge base's reference
  // kernels), in catalog order.
  std::vector<Direction> directions(const AgentTask& task) const override {
    std::vector<Direction> out;
    for (const KernelTemplate* t : catalog_.find(task.op, task.backend)) {
      out.push_back(
          Direction{direction_id(*t), fmt::format("template {}", t->name), t->description});
    }
    return out;
  }
  static std::string direction_id(const KernelTemplate& t) { return "template:" + t.path; }

  Result<std::optional<Proposal>> propose(const ProposalContext& ctx) override {
    auto templates = catalog_.find(ctx.op, ctx.backend);
    if (templates.empty()) {
      return not_found(fmt::format("the search provider has no {} templates for operator {}",
                                   backend_name(ctx.backend), ctx.op));
    }
    // The generation's direction names its template; without one (a trail from before
    // directions), the generation number rotates through them.
    long first = ctx.generation % static_cast<long>(templates.size());
    if (ctx.direction) {
      for (size_t i = 0; i < templates.size(); ++i) {
        if (ctx.direction->id == direction_id(*templates[i])) first = static_cast<long>(i);
      }
    }
    std::rotate(templates.begin(), templates.begin() + first, templates.end());
    std::mt19937_64 rng(ctx.seed * 1000003u + static_cast<uint64_t>(ctx.iteration));

    // 1. The direction's starting point.
    if (auto p = untried(ctx, *templates.front(), default_params(*templates.front()),
                         fmt::format("generation {} direction: template {} at its defaults",
                                     ctx.generation, templates.front()->name))) {
      return p;
    }
    // 2. Moves around this generation's incumbent.
    if (const Attempt* inc = incumbent(*ctx.memory)) {
      const KernelTemplate* t = find_template(templates, inc->provenance.value("template", ""));
      if (t) {
        ParamValues base = params_of(*inc);
        std::vector<std::pair<std::string, int>> moves;
        for (const auto& p : t->params) {
          moves.emplace_back(p.name, -1);
          moves.emplace_back(p.name, +1);
        }
        std::shuffle(moves.begin(), moves.end(), rng);
        for (const auto& [name, dir] : moves) {
          const TemplateParam& p = *std::find_if(t->params.begin(), t->params.end(),
                                                 [&](const auto& q) { return q.name == name; });
          auto pos = std::find(p.values.begin(), p.values.end(), base[name]) - p.values.begin();
          const auto next = pos + dir;
          if (pos >= static_cast<long>(p.values.size()) || next < 0 ||
              next >= static_cast<long>(p.values.size()))
            continue;
          ParamValues v = base;
          v[name] = p.values[static_cast<size_t>(next)];
          if (auto prop = untried(ctx, *t, v,
                                  fmt::format("move {} {} -> {} from the incumbent (score {:.4f})",
                                              name, base[name], v[name], inc->score))) {
            return prop;
          }
        }
      }
    }
    // 3. The other templates' defaults.
    for (const auto* t : templates) {
      if (auto p = untried(ctx, *t, default_params(*t),
                           fmt::format("try template {} at its defaults", t->name)))
        return p;
    }
    // 4. Random points.
    for (int attempt = 0; attempt < 256; ++attempt) {
      const KernelTemplate* t = templates[rng() % templates.size()];
      ParamValues v;
      for (const auto& p : t->params) v[p.name] = p.values[rng() % p.values.size()];
      if (auto prop = untried(ctx, *t, v, fmt::format("random restart in template {}", t->name)))
        return prop;
    }
    return std::optional<Proposal>{};
  }

 private:
  static const Attempt* incumbent(const std::vector<Attempt>& memory) {
    const Attempt* best = nullptr;
    for (const auto& a : memory) {
      if (a.correct && (!best || a.score > best->score)) best = &a;
    }
    return best;
  }

  static ParamValues params_of(const Attempt& a) {
    ParamValues v;
    const Json params = a.provenance.value("params", Json::object());
    for (auto& [k, val] : params.items()) v[k] = val.get<int64_t>();
    return v;
  }

  static const KernelTemplate* find_template(const std::vector<const KernelTemplate*>& ts,
                                             const std::string& path) {
    for (const auto* t : ts) {
      if (t->path == path) return t;
    }
    return nullptr;
  }

  std::optional<Proposal> untried(const ProposalContext& ctx, const KernelTemplate& t,
                                  const ParamValues& v, std::string rationale) const {
    std::string source = render(t, v);
    if (ctx.tried->count(sha256_hex(source))) return std::nullopt;
    Proposal p;
    p.source = std::move(source);
    p.file_name = fmt::format("{}_{}{}", t.name, format_params(v), source_extension(t.backend));
    std::replace(p.file_name.begin(), p.file_name.end(), ',', '_');
    std::replace(p.file_name.begin(), p.file_name.end(), '=', '-');
    Json params = Json::object();
    for (const auto& [k, val] : v) params[k] = val;
    p.provenance = Json{{"provider", "search"}, {"template", t.path}, {"params", params}};
    p.rationale = std::move(rationale);
    return p;
  }

  const TemplateCatalog& catalog_;
};

// The search provider's registry entry. A folder named by an agent (`templates:`) is loaded once
// and kept for the process's lifetime (every task of that agent uses it).
class SearchFactory final : public ProviderFactory {
 public:
  explicit SearchFactory(TemplateCatalog builtin) : builtin_(std::move(builtin)) {}
  std::string name() const override { return "search"; }
  std::vector<std::string> option_keys() const override { return {"templates"}; }
  Result<Json> parse_options(const JsonField& agent) const override {
    Json options = Json::object();
    if (!agent.has("templates")) return options;
    ATREX_ASSIGN_OR_RETURN(auto t, agent.at("templates"));
    ATREX_ASSIGN_OR_RETURN(std::string folder, t.as_string());
    // Relative to the sweep file, so a sweep and its templates travel together.
    fs::path p(folder);
    if (p.is_relative() && !agent.source().empty() && agent.source().front() != '<') {
      p = fs::absolute(fs::path(agent.source()).parent_path() / p);
    }
    std::error_code ec;
    if (!fs::is_directory(p, ec)) return t.fail("template folder not found");
    options["templates"] = p.string();
    return options;
  }
  Result<std::unique_ptr<Provider>> make(const AgentSpec& spec) const override {
    ATREX_ASSIGN_OR_RETURN(const TemplateCatalog* catalog, catalog_for(spec));
    return make_search_provider(*catalog);
  }

 private:
  Result<const TemplateCatalog*> catalog_for(const AgentSpec& spec) const {
    const std::string folder = spec.options.value("templates", "");
    if (folder.empty()) return &builtin_;
    std::lock_guard lock(mu_);
    auto it = folders_.find(folder);
    if (it != folders_.end()) return it->second.get();
    ATREX_ASSIGN_OR_RETURN(TemplateCatalog c, TemplateCatalog::load_dir(folder));
    return (folders_[folder] = std::make_unique<TemplateCatalog>(std::move(c))).get();
  }

  TemplateCatalog builtin_;
  mutable std::mutex mu_;
  mutable std::map<std::string, std::unique_ptr<TemplateCatalog>> folders_;
};

}  // namespace

std::unique_ptr<Provider> make_search_provider(const TemplateCatalog& catalog) {
  return std::make_unique<SearchProvider>(catalog);
}

Result<std::shared_ptr<ProviderFactory>> make_search_provider_factory() {
  ATREX_ASSIGN_OR_RETURN(TemplateCatalog builtin, TemplateCatalog::embedded());
  return std::shared_ptr<ProviderFactory>(std::make_shared<SearchFactory>(std::move(builtin)));
}

}  // namespace atrex::agent
