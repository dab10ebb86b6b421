// A whole sweep on one machine (`atrex sweep run`): the embedded in-process queue, one local
// runner (one GPU, or the CPU), agent workers as threads — the same queue messages, results and
// reports as a cluster sweep, with no servers.
//
// The results folder is the sweep's source of truth: manifest.json (atrex.manifest/1),
// results.jsonl (every atrex.eval/1 record and atrex.final/1 marker, first write wins), audit/
// (one JSONL trail per agent and operator), work/ (logs of evaluations that crashed),
// report.json (atrex.report/1) and report.md. Running the same sweep again on the same folder
// resumes it: finished evaluations are reused, nothing already done is lost.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <string>

#include "atrex/common/process/sandbox.h"
#include "atrex/problems/suite.h"
#include "atrex/scheduler/follow.h"
#include "atrex/scheduler/resolve.h"

namespace prometheus {
class Registry;
}

namespace atrex::scheduler {

struct LocalSweepOptions {
  int agent_workers = 0;                             // 0 = automatic
  std::function<void(const std::string&)> progress;  // one line per event worth showing
  // At every poll: (agent, operator) pairs done and planned (FollowOptions::on_poll). When set,
  // the periodic progress line is left to it.
  std::function<void(int done, int total)> progress_counts;
  const std::atomic<bool>* stop = nullptr;           // set to interrupt (SIGINT)
  // When set, the in-process runner, agent workers and the sweep itself register their metrics
  // here (atrex_runner_*, atrex_agent_*, atrex_sweep_*). Must outlive the run.
  prometheus::Registry* metrics = nullptr;
  // The runner's evaluation children (--no-sandbox: kNone); checked usable before anything runs.
  SandboxMode sandbox = SandboxMode::kBwrap;
};

Result<SweepOutcome> run_local_sweep(const ResolvedSweep& sweep, const LocalSweepOptions& options);

// Re-scores the records stored in a results folder and rewrites report.json / report.md
// (`atrex report DIR`).
Result<SweepOutcome> write_reports(const std::filesystem::path& results_dir,
                                   const problems::Suite& suite);

}  // namespace atrex::scheduler
