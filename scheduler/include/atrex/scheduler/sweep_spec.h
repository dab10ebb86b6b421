// Sweep files (YAML, schema atrex.sweep/1; docs/sweeps.md): the suite and hardware profile,
// agents (name, provider and its options, budget, dropout), operators (a list or `all`), shape
// rules per backend, evaluation settings, where results go, and how a cluster places workers.
// Unknown fields and bad values are errors naming the file, the field and the value (exit
// code 2), never silent defaults.
#pragma once

#include <filesystem>
#include <functional>
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
// Reads the file, expands its ${ATREX_SWEEP_*} variables (expand_sweep_variables) and parses it.
Result<SweepSpec> load_sweep_file(const std::filesystem::path& path,
                                  const agent::ProviderRegistry& providers);

// Overrides of a sweep file from the environment (docs/sweeps.md "Variables"): every
// `${ATREX_SWEEP_NAME}` or `${ATREX_SWEEP_NAME:-default}` in the text is replaced by the
// variable's value (unset or empty: the default) before the YAML is read, so one file serves a
// cluster and a smoke test (sweeps/six-agents.yaml: model-server URLs, backend, operators,
// budgets). Only the ATREX_SWEEP_ prefix is expanded, so no other variable of the environment
// (an API key) can be pulled into a manifest by a sweep file. Errors (kInvalidInput,
// "file:line: ..."): another `${...}`, an unset variable without a default, an unclosed `${`.
using SweepEnv = std::function<const char*(const char*)>;
Result<std::string> expand_sweep_variables(std::string_view text, const std::string& source,
                                           const SweepEnv& env);
// `sweep run/submit --kernels-from DIR` (the nightly sweep, docs/reports.md): adds the agent
// {name: best, provider: fixed, kernels: DIR} (the best kernel per operator of the sweep whose
// results folder DIR is, agent/fixed_provider.h) to `spec` and to its raw document (so the
// sweep id and the manifest name it). Errors (kInvalidInput, naming the flag): a sweep without
// an `agents` list, an agent already named `best`, a DIR the fixed provider refuses.
Result<void> add_kernels_from_agent(SweepSpec& spec, const std::filesystem::path& dir,
                                    const agent::ProviderRegistry& providers);
// The default sweep compiled into the binary (sweeps/local-default.yaml).
std::string_view embedded_default_sweep();
inline constexpr const char* kEmbeddedDefaultSource = "<embedded default sweep>";

}  // namespace atrex::scheduler
