// Child processes with a wall-clock limit: the isolation unit of evaluation (docs/architecture.md
// §5).
//
// Each child runs in its own process group; on timeout the whole group gets SIGKILL, so a
// candidate that forks or spawns threads cannot outlive its limit. Output (stdout + stderr)
// goes to a file and its tail is kept for error messages. Core dumps are disabled.
#pragma once

#include <csignal>
#include <chrono>
#include <functional>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "atrex/common/error.h"

namespace atrex::runner {

struct SubprocessOptions {
  std::vector<std::string> argv;                 // argv[0] is the program (PATH is searched)
  std::chrono::milliseconds timeout{60'000};     // wall-clock limit
  std::filesystem::path output_file;             // stdout+stderr; empty = a temporary file
  std::filesystem::path working_dir;             // empty = inherit
  std::map<std::string, std::string> extra_env;  // added to the environment
  size_t output_tail_bytes = 4096;               // how much of the output to keep in the result
  // Polled in the wait loop (about every 20 ms). `progress` returning true restarts the
  // timeout (a child working through many items gets `timeout` per item). When `should_stop`
  // first returns true, `stop_signal` is sent to the child alone (not its group): it is asked to
  // finish the item in hand and exit; the timeout still applies.
  std::function<bool()> progress;
  std::function<bool()> should_stop;
  int stop_signal = SIGUSR1;
};

struct SubprocessResult {
  bool started = false;  // false when exec failed (e.g. program not found)
  bool timed_out = false;
  int exit_code = -1;   // valid when exited normally
  int term_signal = 0;  // non-zero when killed by a signal (SIGKILL on timeout)
  double wall_s = 0;
  std::string output_tail;
  bool ok() const { return started && !timed_out && term_signal == 0 && exit_code == 0; }
  // "exit code 3", "killed by signal 11 (SIGSEGV)", "timed out after 120 s", ...
  std::string describe() const;
};

// Runs the child to completion or timeout. Errors only for failures of atrex itself (fork,
// output file); a child that cannot exec reports started = false.
Result<SubprocessResult> run_subprocess(const SubprocessOptions& options);

}  // namespace atrex::runner
