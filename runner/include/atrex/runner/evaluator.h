// The runner's evaluation engine: one EvalTask (a candidate on some shapes of one operator)
// through the three gates — compile (cached) → correctness (fresh seeds) → performance — with the
// task's shapes evaluated in sacrificial child processes (atrex-eval-cpu / -cuda / -hip) under a
// time limit per shape, so a crash, hang or corrupted GPU context costs one shape, never the
// runner (DESIGN.md §5). Produces one atrex.eval/1 record per shape, with T_roofline and S_j for
// the hardware profile. Where this machine cannot run the backend, every shape is `rejected`.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/process/sandbox.h"
#include "atrex/common/wire/eval_record.h"
#include "atrex/problems/hardware.h"
#include "atrex/problems/suite.h"
#include "atrex/runner/compile.h"
#include "atrex/runner/environment.h"

namespace atrex::runner {

struct EvaluatorOptions {
  const problems::Suite* suite = nullptr;  // for roofline counts (evaluator side); required
  problems::HardwareProfile hardware;      // T_roofline is computed against this profile
  std::filesystem::path cache_dir = default_cache_dir();
  std::filesystem::path include_dir = default_include_dir();
  std::filesystem::path child_dir = default_child_dir();
  std::filesystem::path work_dir;  // request/response files and crash logs; empty = temp folder
  int device_index = 0;            // GPU of the cuda/hip backend
  // Stamped into every record (`runner`): the runner loop's consumer name, "local" for `atrex
  // eval`.
  std::string runner = "local";
  std::optional<uint64_t> seed;  // base of the correctness seeds; random when unset
  // Checked between shapes: once true, evaluate() stops and returns kUnavailable ("stopping"),
  // keeping the records already emitted (a stopping runner releases its lease at once instead
  // of finishing a long task).
  const std::atomic<bool>* stop = nullptr;
  // Called after every compile-cache lookup (evaluate() and precompile()) with whether it was a
  // hit; the runner's compile-cache metrics. Must be thread-safe (precompile runs concurrently).
  std::function<void(bool cache_hit)> on_compile;
  // How the evaluation children run (docs/evaluation.md "Sandbox"): kBwrap, or kNone only when
  // the user said --no-sandbox. With kBwrap, evaluate() fails with kUnavailable where bwrap
  // cannot make its namespaces (sandbox_ready()). Every record says which.
  SandboxMode sandbox = SandboxMode::kBwrap;
  // RLIMIT_AS of a cpu child; 0: three quarters of this machine's memory.
  uint64_t cpu_memory_bytes = 0;
};

// Whether evaluation children can run in `mode` here: ok for kNone; for kBwrap the probe of
// probe_bwrap() with the bwrap next to `child_dir` or on PATH (kUnavailable naming why and
// --no-sandbox). Commands call it before starting work so that a host without user namespaces
// is refused at once, not per task.
Status sandbox_ready(SandboxMode mode,
                     const std::filesystem::path& child_dir = default_child_dir());

class Evaluator {
 public:
  explicit Evaluator(EvaluatorOptions options);
  // Removes the temporary work folder when the evaluator chose it (atrex-eval-<pid>).
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

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
  // T_roofline, S_j and the runner's stamp on a record the gates produced.
  void finish_record(EvalRecord& r, const EvalSettings& settings, const problems::Shape& shape);

  EvaluatorOptions options_;
  CompileCache cache_;
  uint64_t seed_base_;
  bool own_work_dir_ = false;
};

}  // namespace atrex::runner
