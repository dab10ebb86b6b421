#include "cli/sandbox.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>

#include <fmt/format.h>

#include "atrex/common/process/cgroup.h"

namespace atrex::agent::cli {
namespace fs = std::filesystem;

namespace {

bool under(const fs::path& p, const fs::path& dir) {
  const auto rel = p.lexically_relative(dir);
  return !rel.empty() && *rel.begin() != "..";
}

// Whether this bwrap takes `--disable-userns` (bubblewrap 0.8 and later): asked once per
// program from its --help.
bool takes_disable_userns(const fs::path& bwrap) {
  static std::mutex mu;
  static std::map<std::string, bool> answers;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = answers.find(bwrap.string()); it != answers.end()) return it->second;
  SubprocessOptions so;
  so.argv = {bwrap.string(), "--help"};
  so.timeout = std::chrono::seconds(10);
  so.output_tail_bytes = 1 << 16;  // the whole help text
  auto r = run_subprocess(so);
  const bool yes = r && r->output_tail.find("--disable-userns") != std::string::npos;
  answers.emplace(bwrap.string(), yes);
  return yes;
}

}  // namespace

std::vector<std::string> cli_bwrap_argv(const fs::path& bwrap, const CliSandbox& box,
                                        const std::vector<std::string>& command) {
  std::vector<std::string> a = {bwrap.string(), "--unshare-user", "--unshare-pid",
                                "--unshare-ipc", "--unshare-uts",  "--unshare-cgroup-try"};
  // Without network: a loopback of its own, so the host's ports (Redis among them) are not
  // there; the gateway is a pathname socket, which needs no network namespace.
  if (!box.network) a.push_back("--unshare-net");
  // Killing bwrap (the wall-time budget kills the group) ends the PID namespace and every
  // process of the CLI with it; no terminal to push input into.
  a.insert(a.end(), {"--hostname", "atrex-agent", "--die-with-parent", "--new-session",
                     "--cap-drop", "ALL"});
  // No user namespaces of its own inside (the attack round of the second session made one, and
  // mount and network namespaces in it: the first step of most kernel privilege escalations).
  // A bwrap older than 0.8 has no such option: the sandbox is as before there (docs/agents.md).
  if (takes_disable_userns(bwrap)) a.push_back("--disable-userns");
  auto add = [&](std::initializer_list<std::string> args) { a.insert(a.end(), args); };
  std::error_code ec;
  add({"--ro-bind", "/usr", "/usr"});
  for (const char* p : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    if (fs::is_symlink(p, ec)) {
      add({"--symlink", fs::read_symlink(p, ec).string(), p});
    } else if (fs::is_directory(p, ec)) {
      add({"--ro-bind", p, p});
    }
  }
  add({"--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"});
  if (box.network) {
    for (const char* p : {"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/ssl",
                          "/etc/ca-certificates", "/etc/pki", "/etc/passwd", "/etc/group",
                          "/etc/localtime"}) {
      add({"--ro-bind-try", p, p});
    }
  }
  add({"--proc", "/proc", "--dev", "/dev"});
  // The host's kernel settings read-only (common/process/sandbox.cpp: as root, the sandbox's
  // root is the host's uid 0 and the fresh /proc's sysctls took its writes).
  add({"--ro-bind", "/proc/sys", "/proc/sys", "--ro-bind-try", "/proc/sysrq-trigger",
       "/proc/sysrq-trigger"});
  add({"--size", std::to_string(box.tmp_bytes), "--tmpfs", "/tmp"});
  add({"--bind", box.workspace.string(), kSandboxWorkspace});
  add({"--ro-bind", box.run_dir.string(), kSandboxRunDir});
  add({"--ro-bind", box.eval_tool.string(), kSandboxEvalTool});
  // The program: run where it is when the sandbox sees it there (the system folders, a
  // ro_bind); else at /atrex/cli/<the name PATH found> (a link to its real file when that is
  // visible, so that a node package finds its siblings; else the file bound there alone), so
  // that no folder of the host (a checkout holding the CLI) appears even as an empty path.
  auto visible = [&](const fs::path& p) {
    if (under(p, "/usr")) return true;
    for (const auto& b : box.ro_binds)
      if (p == fs::path(b) || under(p, b)) return true;
    return false;
  };
  fs::path run_as = box.program_found;
  if (!visible(box.program_found)) {
    run_as = fs::path(kSandboxCliDir) / box.program_found.filename();
    if (visible(box.program_real)) {
      add({"--symlink", box.program_real.string(), run_as.string()});
    } else {
      add({"--ro-bind", box.program_real.string(), run_as.string()});
    }
  }
  for (const auto& p : box.ro_binds) add({"--ro-bind-try", p, p});
  add({"--remount-ro", "/", "--chdir", kSandboxWorkspace, "--"});
  a.push_back(run_as.string());
  a.insert(a.end(), command.begin() + (command.empty() ? 0 : 1), command.end());
  return a;
}

uint64_t folder_disk_bytes(const fs::path& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied,
                                                  ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0) total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

Result<SubprocessResult> run_cli_session(SubprocessOptions so, const fs::path& workspace,
                                         const CliSessionLimits& limits, std::string& limit_hit,
                                         std::string* cgroup_said) {
  limit_hit.clear();
  ChildCgroup::Limits cl{limits.memory_bytes, limits.tasks};
  if (cl.memory_bytes == 0) {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0)
      cl.memory_bytes = std::min<uint64_t>(16ull << 30, static_cast<uint64_t>(pages) *
                                                            static_cast<uint64_t>(page) / 2);
  }
  static std::atomic<uint64_t> serial{0};
  const auto cgroup =
      ChildCgroup::create(fmt::format("atrex-cli-{}-{}", ::getpid(), serial.fetch_add(1)), cl);
  if (cgroup_said) *cgroup_said = cgroup->describe();
  const ResourceLimits rlimits({.file_size_bytes = limits.file_bytes});
  so.policies = {&rlimits, cgroup.get()};
  auto next_poll = std::chrono::steady_clock::now();
  uint64_t seen = 0;
  so.should_abort = [&] {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_poll) return false;
    next_poll = now + std::chrono::milliseconds(limits.poll_ms);
    seen = folder_disk_bytes(workspace);
    return seen > limits.workspace_bytes;
  };
  auto r = run_subprocess(so);
  if (r && r->aborted) {
    limit_hit = fmt::format("the workspace grew to {} MiB on the worker's disk, past its {} MiB "
                            "limit: the session was killed",
                            seen >> 20, limits.workspace_bytes >> 20);
  } else if (r && cgroup->oom_killed()) {
    limit_hit = fmt::format("the session reached its memory limit ({} MiB, its /tmp included): "
                            "the kernel killed a process of it",
                            cl.memory_bytes >> 20);
  }
  return r;
}

}  // namespace atrex::agent::cli
