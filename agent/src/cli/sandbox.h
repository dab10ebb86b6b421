// The sandbox of a coding-agent CLI run (docs/agents.md "The sandbox"): bubblewrap
// (common/process/sandbox.h's bwrap_program, probe_bwrap) with the evaluation child's
// namespaces (user, PID, IPC, UTS, cgroup, and network unless the agent entry allows it), but
// a view of its own:
//   /workspace          the staged workspace, read-write: the only writable place besides a
//                       private tmpfs at /tmp (gone with the sandbox)
//   /run/atrex/         the folder of the evaluation socket (read-only; eval_server.h)
//   /atrex/bin/atrex-eval  the gateway client (read-only)
//   /usr, /bin, /lib*   the system folders (read-only), the loader cache
//   the CLI program     where it is when visible (under /usr or a ro_bind), else its file
//                       read-only at /atrex/cli/<name>
//   ro_binds            the agent entry's extra read-only paths (a node install, a config dir)
//   /etc basics         only with network: resolv.conf, hosts, nsswitch.conf, certificates,
//                       passwd and group
// Nothing else of the host: not the project checkout, the results folder, other workspaces,
// the worker's home, its environment (the CLI gets a fresh one) or, without network, any
// socket but the gateway's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/process/subprocess.h"

namespace atrex::agent::cli {

inline constexpr const char* kSandboxWorkspace = "/workspace";
inline constexpr const char* kSandboxRunDir = "/run/atrex";
inline constexpr const char* kSandboxEvalSocket = "/run/atrex/eval.sock";
inline constexpr const char* kSandboxEvalTool = "/atrex/bin/atrex-eval";
inline constexpr const char* kSandboxCliDir = "/atrex/cli";

struct CliSandbox {
  std::filesystem::path workspace;  // host folder bound at /workspace
  std::filesystem::path run_dir;    // host folder (holds eval.sock) bound at /run/atrex
  std::filesystem::path eval_tool;  // host atrex-agent-eval, bound at /atrex/bin/atrex-eval
  std::filesystem::path program_found;  // the CLI as PATH found it
  std::filesystem::path program_real;   // its canonical path
  std::vector<std::string> ro_binds;
  bool network = false;
  uint64_t tmp_bytes = 1ull << 30;
};

// bwrap's argv running `command` (command[0] is replaced by the program as found) in `box`.
std::vector<std::string> cli_bwrap_argv(const std::filesystem::path& bwrap, const CliSandbox& box,
                                        const std::vector<std::string>& command);

// What one CLI session may use beyond its sandbox's view (docs/agents.md "Limits"): the session's
// cgroup (common/process/cgroup.h, where the host gives one) caps its memory (the tmpfs /tmp
// included) and its tasks (a fork bomb took the host's pids: kernel.pid_max is 32768 on the
// development VM), RLIMIT_FSIZE each file, and the workspace's total size on the worker's disk
// is polled while it runs (every `poll_ms`): past `workspace_bytes` the session is killed.
struct CliSessionLimits {
  uint64_t memory_bytes = 0;      // 0: half the machine's memory, at most 16 GiB
  uint64_t tasks = 4096;          // processes and threads
  uint64_t file_bytes = 512ull << 20;
  uint64_t workspace_bytes = 2ull << 30;
  int poll_ms = 500;
};

// Bytes the folder's files take on disk (st_blocks; links not followed, so a link to a host
// folder counts nothing).
uint64_t folder_disk_bytes(const std::filesystem::path& dir);

// Runs the sandboxed session `so` (its argv from cli_bwrap_argv) under `limits`; `so.policies`
// and `so.should_abort` are set here. `limit_hit` says which limit ended it, if one did (the
// workspace's size; the cgroup's memory), empty otherwise; `cgroup` what the cgroup was.
Result<SubprocessResult> run_cli_session(SubprocessOptions so, const std::filesystem::path& workspace,
                                         const CliSessionLimits& limits, std::string& limit_hit,
                                         std::string* cgroup = nullptr);

}  // namespace atrex::agent::cli
