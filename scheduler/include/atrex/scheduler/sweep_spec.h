// Sweep files (YAML, schema atrex.sweep/1; docs/architecture.md §9): the suite and hardware
// profile, agents (name, provider, budget, dropout), operators (a list or `all`), shape subset
// rules per backend, evaluation settings, and where results go. Unknown fields and bad values are
// errors naming the file, the field and the value (exit code 2), never silent defaults.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "atrex/agent/loop.h"
#include "atrex/common/records.h"

namespace atrex::scheduler {

inline constexpr const char* kSweepSchema = "atrex.sweep/1";

// Which shapes of each operator a sweep evaluates on one backend.
struct ShapeRule {
  bool all = true;
  std::map<std::string, std::vector<std::string>>
      ids;                         // explicit ids per operator (overrides the caps)
  int64_t max_input_elements = 0;  // 0 = no cap
  int max_per_operator = 0;        // 0 = no cap
  int at_least = 0;                // keep this many smallest shapes when none fit
};

struct SweepSpec {
  std::string source;  // file path, or "<embedded default>"
  std::string name;
  std::string suite = "bundled";
  std::string hardware = "auto";
  std::string backend = "auto";  // auto | cpu | cuda
  std::vector<agent::AgentSpec> agents;
  std::vector<std::string> operators;       // empty = all natively covered operators
  std::map<std::string, ShapeRule> shapes;  // by backend
  int quick_shapes = 3;
  EvalSettings evaluation;
  EvalSettings quick_evaluation;
  std::string output;
  // The `cluster` section, validated: how `atrex sweep submit` starts workers (launcher,
  // runners, agent_workers, gpus_per_runner, gpu_partition, cpu_partition, time_limit,
  // array_throttle, sbatch_args, job_template); only the keys the file sets. Command-line
  // flags override it. Not part of `raw` (so not of the sweep id): placement never changes results.
  Json cluster = Json::object();
  Json raw;  // the parsed document, kept in the manifest
};

Result<SweepSpec> parse_sweep(std::string_view yaml_text, const std::string& source);
Result<SweepSpec> load_sweep_file(const std::filesystem::path& path);
// The default sweep compiled into the binary (sweeps/local-default.yaml).
std::string_view embedded_default_sweep();

}  // namespace atrex::scheduler
