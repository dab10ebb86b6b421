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

#include <filesystem>
#include <string>
#include <vector>

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

}  // namespace atrex::agent::cli
