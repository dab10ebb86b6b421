// The runner's evaluation engine: one EvalTask (a candidate on some shapes of one operator)
// through the three gates — compile (cached) → correctness (fresh seeds) → performance — with
// every shape in its own child process (atrex-eval-cpu / -cuda / -hip) under a time limit,
// so a crash, hang or corrupted GPU context costs one shape, never the runner.
// Produces one atrex.eval/1 record per shape, with T_roofline and S_j for the hardware profile.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/records.h"
#include "atrex/problems/hardware.h"
#include "atrex/problems/suite.h"
#include "atrex/runner/compile.h"

namespace atrex::runner {

struct GpuInfo {
  int index = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  int64_t l2_bytes = 0;
  int64_t memory_bytes = 0;
  std::string arch;  // AMD GPUs: the gfx processor name hipcc targets ("gfx942"); sm_count holds
                     // the CU count
  // nvcc target for candidates on this GPU: sm_90a on Hopper, else sm_<cc>.
  std::string cuda_arch() const;
};

// What this machine can evaluate on.
struct Environment {
  bool cuda_child_built = false;  // atrex-eval-cuda exists next to atrex
  std::vector<GpuInfo> gpus;      // empty when no driver/GPU
  std::string gpu_probe_error;    // why gpus is empty
  std::string cpu_name;
  bool has_gpu() const { return !gpus.empty(); }
};

// Probes once per process (runs `atrex-eval-cuda --probe` in a child, so the runner itself
// never creates a GPU context).
const Environment& probe_environment();

// What this machine offers the hip backend, probed once per process on first use (runs
// `atrex-eval-hip --probe` in a child), apart from the CUDA probe so that cpu and cuda work
// never pays for it.
struct HipEnvironment {
  bool child_built =
      false;  // atrex-eval-hip exists next to atrex (built when the HIP runtime was found)
  std::vector<GpuInfo> gpus;  // AMD GPUs the HIP runtime sees
  std::string probe_error;    // why gpus is empty: "no AMD GPU / HIP runtime found:
                              // <hipGetDeviceCount error>"
};
const HipEnvironment& probe_hip_environment();

// Folder holding the atrex-eval-* children: next to the running executable.
std::filesystem::path default_child_dir();

// W/Q of one shape from the released roofline.json ("released") or the operator's analytic
// formula ("analytic"). Errors: kNotFound when the operator or formula is missing.
Result<problems::RooflineCounts> roofline_counts(const problems::Suite& suite,
                                                 const std::string& op,
                                                 const problems::Shape& shape,
                                                 const std::string& source);

struct EvaluatorOptions {
  const problems::Suite* suite = nullptr;  // for roofline counts (evaluator side)
  problems::HardwareProfile hardware;      // T_roofline is computed against this profile
  std::filesystem::path cache_dir = default_cache_dir();
  std::filesystem::path include_dir = default_include_dir();
  std::filesystem::path child_dir = default_child_dir();
  std::filesystem::path work_dir;  // request/response files; empty = temp folder
  int device_index = 0;            // GPU for the cuda backend
  // Stamped into every record (`runner`): the runner loop's consumer name, "local" for `atrex
  // eval`.
  std::string runner = "local";
  std::string cuda_arch = "sm_90a";  // used when no GPU was detected (compile-only)
  std::optional<uint64_t> seed;      // base of the correctness seeds; random when unset
  // Checked between shapes: once true, evaluate() stops and returns kUnavailable ("stopping"),
  // keeping the records already emitted (a stopping runner releases its lease at once instead
  // of finishing a long task).
  const std::atomic<bool>* stop = nullptr;
  // Called after every compile-cache lookup (evaluate() and precompile()) with whether it was a
  // hit; the runner's compile-cache metrics. Must be thread-safe (precompile runs concurrently).
  std::function<void(bool cache_hit)> on_compile;
};

class Evaluator {
 public:
  explicit Evaluator(EvaluatorOptions options);

  // Evaluates `task`. Returns one record per requested shape (in request order); calls
  // `on_record` as each completes. Errors only for atrex failures (unknown operator or shape
  // are kNotFound/kInvalidInput); every candidate failure is a record status.
  Result<std::vector<EvalRecord>> evaluate(
      const EvalTask& task, const std::function<void(const EvalRecord&)>& on_record = nullptr);

  // Compiles `task`'s candidate into the cache for the target evaluate() will use on this
  // runner's device, so that evaluate() finds it there (the runner loop's compile ahead).
  // True when it compiled now; false when it was cached already or cannot run here (evaluate()
  // records why). Thread-safe with a concurrent evaluate().
  Result<bool> precompile(const EvalTask& task);

  const EvaluatorOptions& options() const { return options_; }
  CompileCache& compile_cache() { return cache_; }

 private:
  // One shape of a child request: `extra` is merged into its item (the unseen-shape checks
  // run with one seed, no timing and no range probe, and stop the child when they fail).
  struct ShapeItem {
    const problems::Shape* shape = nullptr;
    Json extra = Json::object();
    bool own = true;  // one of the task's shapes (counted in messages), not an unseen one
  };
  // Evaluates `items` in as few child processes as isolation allows: one child takes them in
  // order (child_runner.h task mode); a crash or a timeout ends it, that shape is recorded as
  // such, and a fresh child takes the rest. Once `abandon` returns a reason, the shapes not
  // evaluated yet are recorded with it (wrong_result; `emit` may restate the status).
  // kUnavailable after a stop request (between shapes).
  Result<void> run_shapes(const EvalTask& task, const std::vector<ShapeItem>& items,
                          const std::filesystem::path& library, const std::string& device_name,
                          const std::function<void(EvalRecord, const problems::Shape&)>& emit,
                          const std::function<std::string()>& abandon);
  void finish_record(EvalRecord& r, const EvalSettings& settings, const problems::Shape& shape);
  // Where a backend's candidates run on this runner: the device name for records, the compile
  // target ("native", "sm_90a", "gfx942"...), or why they cannot run here (reject non-empty).
  struct Target {
    std::string device_name;
    std::string arch;
    std::string reject;
  };
  Target resolve_target(const std::string& backend) const;
  // Correctness seed k of a shape: fresh per (evaluator, task, shape), unknown to the candidate.
  uint64_t shape_seed(const EvalTask& task, const std::string& shape_id, int k) const;

  EvaluatorOptions options_;
  CompileCache cache_;
  uint64_t seed_base_;
};

}  // namespace atrex::runner
