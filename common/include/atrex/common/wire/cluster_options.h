// How a cluster sweep places its workers (the sweep file's `cluster:` section, the flags of
// `atrex sweep submit`, and the manifest's "cluster" object that workers read back from Redis;
// docs/sweeps.md "Cluster sweeps"). Placement never changes results: it is not part of the
// sweep id.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/eval_settings.h"  // Completeness
#include "atrex/common/wire/sandbox_mode.h"

namespace atrex {

// `local`: detached worker processes on the submitting machine; `slurm`: sbatch job arrays.
enum class Launcher { kLocal, kSlurm };
const char* launcher_name(Launcher l);
Result<void> read_value(const JsonField& f, Launcher& out);
inline void to_json(Json& j, Launcher l) { j = launcher_name(l); }

struct ClusterOptions {
  Launcher launcher = Launcher::kLocal;
  int runners = 1;              // local: runner processes; slurm: tasks of the runner array
  int agent_workers = 2;        // local: processes; slurm: tasks of the agent-worker array
  std::filesystem::path atrex;  // the atrex binary workers run (default: this one; slurm: shared)
  // slurm; empty partitions = the cluster's default partition
  std::string gpu_partition;  // runners of cuda/hip sweeps, with --gres=gpu:<gpus_per_runner>
  std::string cpu_partition;  // agent workers, and the runners of cpu sweeps (no gres)
  int gpus_per_runner = 1;    // GPUs per runner array task; one runner process per GPU
  std::string time_limit = "24:00:00";   // --time of every array task
  int array_throttle = 0;                // %N on the arrays (at most N tasks at once); 0 = none
  std::vector<std::string> sbatch_args;  // appended to every sbatch call (--account=...)
  std::filesystem::path job_template;    // replaces the embedded deploy/slurm/worker.sbatch
  // A task whose worker sent no heartbeat for this long is handed to another worker (workers
  // heartbeat every lease_timeout_s / 6). Bounds how long a crashed worker's task waits.
  int lease_timeout_s = 60;
  // Deliveries of one task (its workers died or failed it each time) before it is moved to the
  // dead-letter stream with its last error and never enqueued again.
  int max_deliveries = 3;
  // Tasks a runner claims ahead and compiles while it measures the current one. A task claimed
  // ahead waits for its runner even when another is idle: 0 when runners outnumber the
  // evaluations in flight.
  int prefetch = 1;
  // ADDR:PORT every worker serves Prometheus metrics on ("" = none; port 0 = an ephemeral
  // port). Workers write a file_sd target file <results>/metrics/targets/<worker>.json.
  std::string metrics;
  // A folder a site's Prometheus watches (file_sd_configs), shared by sweeps: the target files
  // go there instead, named <sweep id>-<worker>.json. Empty: <results>/metrics/targets.
  std::filesystem::path metrics_targets;
  // How the runners run evaluation children: kNone only when the user passed `atrex sweep submit
  // --no-sandbox` (or $ATREX_NO_SANDBOX=1 there); a runner started with --no-sandbox itself runs
  // without it too. Not a key of a sweep file's `cluster` section: turning the sandbox off is the
  // submitting user's explicit choice. A manifest without it (written before it existed) reads
  // as kBwrap. docs/evaluation.md "Sandbox".
  SandboxMode sandbox = SandboxMode::kBwrap;
};
Json to_json(const ClusterOptions& o);
// `base` with the members `f` sets (kPartial: a sweep file's section or the flags given) or
// all of them (kComplete: a manifest). Values are range-checked; unknown members are errors.
Result<ClusterOptions> cluster_options_from_json(
    const JsonField& f, const ClusterOptions& base = {},
    Completeness completeness = Completeness::kPartial);

}  // namespace atrex
