#include "atrex/agent/provider_registry.h"

#include <fmt/format.h>

#include "atrex/agent/cli_provider.h"
#include "atrex/agent/fixed_provider.h"
#include "atrex/agent/openai_provider.h"
#include "atrex/agent/search_provider.h"

namespace atrex::agent {

Result<ProviderRegistry> ProviderRegistry::builtin() {
  ProviderRegistry r;
  ATREX_ASSIGN_OR_RETURN(auto search, make_search_provider_factory());
  r.add(std::move(search));
  ATREX_ASSIGN_OR_RETURN(auto openai, make_openai_provider_factory());
  r.add(std::move(openai));
  ATREX_ASSIGN_OR_RETURN(auto cli, make_cli_provider_factory());
  r.add(std::move(cli));
  ATREX_ASSIGN_OR_RETURN(auto fixed, make_fixed_provider_factory());
  r.add(std::move(fixed));
  return r;
}

void ProviderRegistry::add(std::shared_ptr<ProviderFactory> factory) {
  ATREX_ASSERT(factory != nullptr);
  factories_.push_back(std::move(factory));
}

Result<const ProviderFactory*> ProviderRegistry::require(std::string_view name) const {
  for (const auto& f : factories_) {
    if (f->name() == name) return f.get();
  }
  return invalid_input(fmt::format(
      "unsupported provider \"{}\" (this build has: {})",
      name, fmt::join(names(), ", ")));
}

std::vector<std::string> ProviderRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& f : factories_) out.push_back(f->name());
  return out;
}

}  // namespace atrex::agent
