// Child processes with a wall-clock limit: the isolation unit of evaluation (docs/architecture.md
// §5).
//
// Each child runs in its own process group; on timeout the whole group gets SIGKILL, so a
// candidate that forks or spawns threads cannot outlive its limit. Output (stdout + stderr)
// goes to a file and its tail is kept for error messages. Core dumps are disabled.
#pragma once

#include <csignal>
#include <cstdint>
#include <chrono>
#include <functional>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "atrex/common/error.h"

namespace atrex {

// A restriction applied to a child between fork and exec: where the evaluation sandbox (issue
// "untrusted candidates": namespaces, seccomp, a read-only view) plugs in. Policies run in the
// order given; the first failure aborts the spawn and the result says which policy failed.
// Thread-safety: apply_in_child() runs in a forked child of a multi-threaded parent, so it may
// only make async-signal-safe calls (signal-safety(7): no allocation, no locks, no stdio).
class ChildPolicy {
 public:
  virtual ~ChildPolicy() = default;
  // For messages: "resource limits", "sandbox" ...
  virtual const char* name() const = 0;
  // In the parent, before fork: allocate and precompute what apply_in_child() needs. An error
  // fails run_subprocess() itself (atrex could not set the policy up).
  virtual Result<void> prepare() const { return ok(); }
  // In the child: 0 on success, else an errno value (the child exits without exec'ing).
  virtual int apply_in_child() const noexcept = 0;
};

// Resource limits (setrlimit(2)) as a ChildPolicy: each set limit becomes both the soft and the
// hard limit, so the child cannot raise it again. Zero = leave that limit alone.
class ResourceLimits final : public ChildPolicy {
 public:
  struct Limits {
    uint64_t address_space_bytes = 0;  // RLIMIT_AS (breaks CUDA, which maps large ranges)
    uint64_t file_size_bytes = 0;      // RLIMIT_FSIZE: a larger write gets EFBIG/SIGXFSZ
    uint64_t open_files = 0;           // RLIMIT_NOFILE
    uint64_t processes = 0;            // RLIMIT_NPROC (counted per real user id)
    uint64_t cpu_seconds = 0;          // RLIMIT_CPU
  };
  explicit ResourceLimits(Limits limits) : limits_(limits) {}
  const char* name() const override { return "resource limits"; }
  int apply_in_child() const noexcept override;

 private:
  Limits limits_;
};

struct SubprocessOptions {
  std::vector<std::string> argv;                 // argv[0] is the program (PATH is searched)
  std::chrono::milliseconds timeout{60'000};     // wall-clock limit
  std::filesystem::path output_file;             // stdout+stderr; empty = a temporary file
  std::filesystem::path working_dir;             // empty = inherit
  std::map<std::string, std::string> extra_env;  // added to the environment
  // When set, the child's whole environment instead of this process's (plus extra_env): the
  // evaluation children get a cleaned one (no credentials, no Redis URL).
  std::optional<std::map<std::string, std::string>> env;
  // File descriptors handed to the child: {fd in this process, fd number in the child}. The
  // child gets them without close-on-exec at the given numbers (3 and up); this process's copies
  // are closed once the child is forked, so a pipe's read end sees EOF when the child's copies
  // close. Used for the evaluation children's request and result channel (no paths on their
  // command line).
  std::vector<std::pair<int, int>> inherit_fds;
  size_t output_tail_bytes = 4096;  // how much of the output to keep in the result
  // Polled in the wait loop (about every 20 ms). `progress` returning true restarts the
  // timeout (a child working through many items gets `timeout` per item). When `should_stop`
  // first returns true, `stop_signal` is sent to the child alone (not its group): it is asked to
  // finish the item in hand and exit; the timeout still applies.
  std::function<bool()> progress;
  std::function<bool()> should_stop;
  // Polled like `progress`: once true, the whole group is killed at once (SIGKILL) and the
  // result says `aborted` (the runner found the child's result channel tampered with).
  std::function<bool()> should_abort;
  int stop_signal = SIGUSR1;  // 0: no signal (the caller tells the child another way)
  // Applied in the child before exec, in order (not owned; must outlive the call).
  std::vector<const ChildPolicy*> policies;
};

struct SubprocessResult {
  bool started = false;  // false when exec failed (e.g. program not found)
  bool timed_out = false;
  bool aborted = false;  // killed because should_abort returned true
  int exit_code = -1;    // valid when exited normally
  int term_signal = 0;   // non-zero when killed by a signal (SIGKILL on timeout)
  double wall_s = 0;
  std::string output_tail;
  bool ok() const { return started && !timed_out && term_signal == 0 && exit_code == 0; }
  // "exit code 3", "killed by signal 11 (SIGSEGV)", "timed out after 120 s", ...
  std::string describe() const;
};

// Runs the child to completion or timeout. Errors only for failures of atrex itself (fork,
// output file); a child that cannot exec reports started = false.
Result<SubprocessResult> run_subprocess(const SubprocessOptions& options);

}  // namespace atrex
