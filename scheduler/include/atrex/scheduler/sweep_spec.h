// Sweep files (YAML, schema atrex.sweep/1; docs/sweeps.md): the suite and hardware profile,
// agents (name, provider and its options, budget, dropout), operators (a list or `all`), shape
// rules per backend, evaluation settings, where results go, and how a cluster places workers.
// Unknown fields and bad values are errors naming the file, the field and the value (exit
// code 2), never silent defaults.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "atrex/agent/provider_registry.h"
#include "atrex/common/wire/agent_task.h"
#include "atrex/common/wire/backend.h"
#include "atrex/common/wire/eval_settings.h"
#include "atrex/problems/shape_select.h"

namespace atrex::scheduler {

inline constexpr const char* kSweepSchema = "atrex.sweep/1";

struct SweepSpec {
  std::string source;  // file path, or "<embedded default sweep>"
  std::string name;
  std::string suite = "bundled";
  std::string hardware = "auto";
  BackendChoice backend;  // auto: cuda with a GPU, else cpu
  std::vector<AgentSpec> agents;
  std::vector<std::string> operators;             // empty = all natively covered operators
  std::map<Backend, problems::ShapeRule> shapes;  // by backend; absent = all shapes
  int quick_shapes = 3;
  EvalSettings evaluation;
  EvalSettings quick_evaluation;
  std::string output;
  // The `cluster` section, validated, with only the keys the file sets (the manifest's
  // "cluster" spelling; paths made absolute against the file). Command-line flags override it.
  // Not part of `raw` (so not of the sweep id): placement never changes results.
  Json cluster = Json::object();
  Json raw;  // the parsed document, kept in the manifest
};

// `providers` validates each agent's provider and options (agent/spec.h).
Result<SweepSpec> parse_sweep(std::string_view yaml_text, const std::string& source,
                              const agent::ProviderRegistry& providers);
Result<SweepSpec> load_sweep_file(const std::filesystem::path& path,
                                  const agent::ProviderRegistry& providers);
// The default sweep compiled into the binary (sweeps/local-default.yaml).
std::string_view embedded_default_sweep();
inline constexpr const char* kEmbeddedDefaultSource = "<embedded default sweep>";

}  // namespace atrex::scheduler
