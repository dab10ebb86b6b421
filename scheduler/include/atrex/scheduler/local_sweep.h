// A whole sweep on one machine (`atrex sweep run`): the embedded in-process queue, one local
// runner per GPU (or one on the CPU backend), agent workers as threads — the same queue
// messages, results and reports as a cluster sweep, with no servers.
//
// The results directory is the sweep's source of truth: manifest.json (the resolved sweep),
// results.jsonl (every atrex.eval/1 record and final marker, first write wins), audit/ (one
// JSONL audit trail per agent and operator), report.json (atrex.report/1) and report.md.
// Running the same sweep again on the same directory resumes it: finished evaluations are
// reused, nothing already done is lost.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "atrex/problems/hardware.h"
#include "atrex/problems/suite.h"
#include "atrex/scheduler/sweep_spec.h"
#include "atrex/scoring/aggregate.h"

namespace prometheus {
class Registry;
}

namespace atrex::scheduler {

inline constexpr const char* kManifestSchema = "atrex.manifest/1";

struct SweepOverrides {
  std::optional<std::string> backend;
  std::optional<std::string> hardware;
  std::optional<std::filesystem::path> output;
  std::optional<std::filesystem::path> suite_dir;
  // The runners run on other machines (cluster launchers): the backend is not checked against
  // this machine's devices, and `hardware: auto` needs a GPU here or an explicit profile.
  bool remote_runners = false;
};

struct OperatorPlan {
  std::string name;
  std::vector<std::string> shapes;        // evaluated by the final evaluation
  std::vector<std::string> quick_shapes;  // used by agent iterations
};

struct ResolvedSweep {
  SweepSpec spec;
  problems::Suite suite;
  problems::HardwareProfile hardware;
  std::string backend;
  std::string device;  // GPU name or CPU model
  std::vector<OperatorPlan> operators;
  std::vector<std::string> not_covered;  // suite operators without a native definition
  std::filesystem::path output;
  std::string sweep_id;  // hash of what determines results
  Json to_manifest() const;
};

// Loads the suite and hardware, detects the backend, applies the shape rules.
// Errors: unknown operator/profile/backend (kNotFound/kInvalidInput, naming the file and field).
Result<ResolvedSweep> resolve_sweep(const SweepSpec& spec, const SweepOverrides& overrides);

struct SweepOutcome {
  std::vector<scoring::AgentScore> agents;
  std::filesystem::path report_json;
  std::filesystem::path report_md;
  bool interrupted = false;
};

struct LocalSweepOptions {
  int agent_workers = 0;                             // 0 = automatic
  std::function<void(const std::string&)> progress;  // one line per event worth showing
  const std::atomic<bool>* stop = nullptr;           // set to interrupt (SIGINT)
  // When set, the in-process runner, agent workers and the sweep itself register their metrics
  // here (atrex_runner_*, atrex_agent_*, atrex_sweep_*; atrex/common/metrics.h). Must outlive the
  // run.
  prometheus::Registry* metrics = nullptr;
};

Result<SweepOutcome> run_local_sweep(const ResolvedSweep& sweep, const LocalSweepOptions& options);

// Scores the final records stored in a results directory and writes report.json / report.md.
Result<SweepOutcome> write_reports(const std::filesystem::path& results_dir,
                                   const problems::Suite& suite);

}  // namespace atrex::scheduler
