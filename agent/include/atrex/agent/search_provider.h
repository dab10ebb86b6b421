// The built-in `search` provider (DESIGN.md §7): no model; a measured search over the kernel
// templates of kernels/templates (templates.h): each generation starts from a template's
// defaults (a different one per generation), then moves one parameter of its incumbent at a
// time, then the other templates' defaults, then random points; never a source it tried before.
// Sweep-file option: `templates: FOLDER` (relative to the sweep file) replaces the built-in
// templates for that agent.
#pragma once

#include <memory>

#include "atrex/agent/provider.h"
#include "atrex/agent/provider_registry.h"
#include "atrex/agent/templates.h"

namespace atrex::agent {

// A search provider over `catalog` (must outlive the provider).
std::unique_ptr<Provider> make_search_provider(const TemplateCatalog& catalog);

// The registry entry: the embedded templates, and a cache of template folders named by agents.
Result<std::shared_ptr<ProviderFactory>> make_search_provider_factory();

}  // namespace atrex::agent
