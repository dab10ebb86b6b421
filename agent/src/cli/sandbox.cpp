#include "cli/sandbox.h"

namespace atrex::agent::cli {
namespace fs = std::filesystem;

namespace {

bool under(const fs::path& p, const fs::path& dir) {
  const auto rel = p.lexically_relative(dir);
  return !rel.empty() && *rel.begin() != "..";
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

}  // namespace atrex::agent::cli
