// atrex.manifest/1: a sweep's results folder's manifest.json, its source of truth (DESIGN.md
// §2), and the copy in Redis (manifest_key) the workers of a cluster sweep read. It holds the
// resolved sweep (what determines results: the sweep id covers it), then the lifecycle the
// scheduler adds: status, timestamps, the Redis it lives on, the cluster options and the
// workers a launcher started.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/agent_task.h"
#include "atrex/common/wire/backend.h"
#include "atrex/common/wire/cluster_options.h"
#include "atrex/common/wire/eval_settings.h"

namespace atrex {

inline constexpr const char* kManifestSchema = "atrex.manifest/1";

// The shapes one operator of a sweep runs on.
struct OperatorPlan {
  std::string name;
  std::vector<std::string> shapes;        // evaluated by the final evaluation
  std::vector<std::string> quick_shapes;  // used by agent iterations
};
Result<void> read_value(const JsonField& f, OperatorPlan& out);

// The hardware profile T_roofline is computed against (problems/hardware.h), as a manifest
// keeps it: measured ceilings vary from run to run, so the workers use these numbers.
struct HardwareSummary {
  std::string name;
  std::map<std::string, double> p_peak;  // execution path -> FLOP/s
  double hbm_bytes_per_s = 0;
  std::string source;  // vendor document or "measured ..."
};
Result<void> read_value(const JsonField& f, HardwareSummary& out);

// One worker process the `local` launcher started.
struct LocalWorker {
  std::string name;  // e.g. "runner-0": its queue consumer name
  int64_t pid = 0;
  std::vector<std::string> args;  // its command line: what tells it from a reused pid
  std::string log;
};
Result<void> read_value(const JsonField& f, LocalWorker& out);

// One job array of the `slurm` launcher (scheduler/src/slurm_launcher.cpp).
struct SlurmRole {
  std::string role;                        // "runner" or "agent-worker"
  std::vector<std::string> job_ids;        // arrays that may still have live tasks
  std::vector<std::string> ended_job_ids;  // arrays all of whose tasks ended
  int tasks = 1;
  int workers_per_task = 1;
  std::string partition;
  std::string gres;
  std::string script;
  std::vector<std::string> sbatch;  // argv of the last submission
};
Result<void> read_value(const JsonField& f, SlurmRole& out);

// What a launcher needs to find and stop the workers it started.
struct WorkersRecord {
  Launcher launcher = Launcher::kLocal;
  std::string host;                    // local
  std::vector<LocalWorker> processes;  // local
  std::vector<SlurmRole> roles;        // slurm
};
Json to_json(const WorkersRecord& w);
Result<void> read_value(const JsonField& f, WorkersRecord& out);

// One build of atrex and one candidate compiler that wrote into a sweep's results (the issue:
// a results folder says what produced it). The scheduler appends an entry when it creates or
// resumes a sweep and the entry differs from the last one (recorded_at aside), so results of a
// sweep resumed by another atrex, or with another compiler, show it. The candidate compiler is
// the one the sweep's backend uses on the host that wrote the entry (cluster runners resolve
// $CXX / $CUDACXX / $HIPCC on their own nodes: runner/include/atrex/runner/toolchain.h).
struct BuildRecord {
  std::string atrex_version;  // project version, e.g. "0.1.0"
  std::string commit;         // git describe at build time ("...-dirty": built from changed files)
  std::string build_type;     // CMAKE_BUILD_TYPE
  std::string cxx_compiler;   // the compiler atrex was built with, "GNU 12.2.0 (/usr/bin/c++)"
  std::string cxx_flags;      // and its flags
  std::string cuda_compiler;  // nvcc atrex's CUDA child was built with; "" without CUDA
  std::string host;           // where the entry was written
  std::string recorded_at;    // UTC, ISO 8601
  std::string candidate_compiler;          // the program candidates are compiled with
  std::string candidate_compiler_version;  // first line of its --version (or why unavailable)
  std::string candidate_arch;              // "native", "sm_90a", "gfx942"
  std::vector<std::string> candidate_flags;  // argv after the program, less source and output
  bool operator==(const BuildRecord&) const = default;
  // Same build and compiler, whatever the time it was recorded.
  bool same_build(const BuildRecord& o) const;
};
Json to_json(const BuildRecord& b);
// One line for reports: "atrex 0.1.0 (2618e7b4c1d2, RelWithDebInfo) on host; candidates:
// <compiler version line> [<arch>] <flags less -I>".
std::string describe(const BuildRecord& b);
// What differs between two builds' candidate compilers ("" when none): "candidate compiler
// version: A vs B; flags: ... vs ...". Timing comparisons across such builds compare compilers too.
std::string candidate_compiler_difference(const BuildRecord& a, const BuildRecord& b);
Result<void> read_value(const JsonField& f, BuildRecord& out);

// "running" (a local sweep, or workers started), "submitted" (queued, workers not yet
// started), "interrupted" (a local sweep stopped by a signal), "cancelled", "complete".
enum class SweepStatus { kRunning, kSubmitted, kInterrupted, kCancelled, kComplete };
const char* sweep_status_name(SweepStatus s);
Result<void> read_value(const JsonField& f, SweepStatus& out);
inline void to_json(Json& j, SweepStatus s) { j = sweep_status_name(s); }

struct Manifest {
  // --- the resolved sweep (the sweep id is a hash of these, less `source`)
  std::string sweep_id;
  std::string name;
  std::string source;          // the sweep file, or "<embedded default sweep>"
  Json spec = Json::object();  // the sweep file as parsed, without its `cluster` section
  std::string suite;           // suite folder
  Backend backend = Backend::kCpu;
  std::string device;  // GPU name, CPU model, or "(the runners' GPUs)"
  HardwareSummary hardware;
  std::vector<AgentSpec> agents;
  std::vector<OperatorPlan> operators;
  std::vector<std::string> not_covered;  // suite operators without a native definition
  EvalSettings evaluation;
  EvalSettings quick_evaluation;
  // --- lifecycle
  std::string output;  // absolute results folder
  SweepStatus status = SweepStatus::kRunning;
  std::optional<std::string> launcher;  // "in-process" for `atrex sweep run`
  std::optional<std::string> started_at, submitted_at, resumed_at, cancelled_at, finished_at;
  // Cluster sweeps: the Redis URL (with its credentials: workers connect with it), the same
  // without the password (for people), placement, and the workers started.
  std::optional<std::string> redis_url;
  std::optional<std::string> redis;
  std::optional<ClusterOptions> cluster;
  std::optional<WorkersRecord> workers;
  // The builds that wrote into these results, oldest first (empty in manifests written before
  // atrex recorded them).
  std::vector<BuildRecord> builds;

  // Names of the agents and of the operators, in order.
  std::vector<std::string> agent_names() const;
  std::vector<std::string> operator_names() const;
};
Json to_json(const Manifest& m);
// Strict: `source` names the file or key in errors (kInvalidInput).
Result<Manifest> manifest_from_json(const Json& j, const std::string& source);

// <dir>/manifest.json. Errors: kNotFound "not a sweep results folder" when it is missing.
Result<Manifest> read_manifest_file(const std::filesystem::path& dir);
// Writes <dir>/manifest.json atomically.
Result<void> write_manifest_file(const std::filesystem::path& dir, const Manifest& m);

}  // namespace atrex
