#include "atrex/common/process/sandbox.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

namespace atrex {
namespace fs = std::filesystem;

fs::path bwrap_program(const fs::path& beside) {
  if (const char* env = std::getenv("ATREX_BWRAP"); env && *env) return env;
  if (!beside.empty()) {
    std::error_code ec;
    const fs::path local = beside / "bwrap";
    if (fs::is_regular_file(local, ec) && ::access(local.c_str(), X_OK) == 0) return local;
  }
  return "bwrap";
}

std::vector<std::string> bwrap_argv(const fs::path& bwrap, const SandboxView& view,
                                    const std::vector<std::string>& command) {
  std::vector<std::string> a = {bwrap.string(),
                                // Every namespace: no network but a fresh loopback, no view of
                                // the host's processes, IPC objects or hostname.
                                "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-net",
                                "--unshare-uts", "--unshare-cgroup-try", "--hostname",
                                "atrex-sandbox",
                                // SIGKILL when the runner's child (bwrap) dies; killing bwrap
                                // ends the PID namespace and every process in it.
                                "--die-with-parent", "--cap-drop", "ALL"};
  // No controlling terminal to push input into (TIOCSTI); see SandboxView::new_session.
  if (view.new_session) a.push_back("--new-session");
  std::error_code ec;
  auto add = [&](std::initializer_list<std::string> args) { a.insert(a.end(), args); };
  if (view.system_folders) {
    add({"--ro-bind", "/usr", "/usr"});
    for (const char* p : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
      if (fs::is_symlink(p, ec)) {
        add({"--symlink", fs::read_symlink(p, ec).string(), p});
      } else if (fs::is_directory(p, ec)) {
        add({"--ro-bind", p, p});
      }
    }
    // The loader's cache (where the driver libraries of a GPU image are registered); nothing
    // else of /etc.
    add({"--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"});
  }
  add({"--proc", "/proc", "--dev", "/dev"});
  // The host's kernel settings read-only. A sandbox started as root maps its root to the host's
  // uid 0, and the fresh /proc's sysctls then take its writes (bwrap's own cover of /proc/sys
  // did not happen here): the attack round of the second session rewrote the host's
  // kernel.core_pattern from inside, which runs any command as root outside every sandbox at
  // the next crash. /proc/sysrq-trigger (reboot, crash) likewise where the kernel has it.
  add({"--ro-bind", "/proc/sys", "/proc/sys", "--ro-bind-try", "/proc/sysrq-trigger",
       "/proc/sysrq-trigger"});
  if (view.sys) add({"--ro-bind", "/sys", "/sys"});
  for (const auto& d : view.devices) add({"--dev-bind-try", d.string(), d.string()});
  // /dev itself read-only (device nodes stay usable), /dev/shm a small tmpfs of its own.
  add({"--size", std::to_string(view.shm_bytes), "--tmpfs", "/dev/shm", "--remount-ro", "/dev"});
  add({"--size", std::to_string(view.scratch_bytes), "--tmpfs", "/tmp"});
  // After the tmpfs: a bound path under /tmp (a compile cache there) stays visible.
  for (const auto& p : view.read_only) add({"--ro-bind-try", p.string(), p.string()});
  for (const auto& p : view.read_write) add({"--bind", p.string(), p.string()});
  add({"--remount-ro", "/", "--chdir", "/tmp", "--"});
  a.insert(a.end(), command.begin(), command.end());
  return a;
}

Status probe_bwrap(const fs::path& bwrap) {
  static std::mutex mu;
  static std::map<std::string, Status> answers;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = answers.find(bwrap.string()); it != answers.end()) return it->second;
  SubprocessOptions opt;
  opt.argv = bwrap_argv(bwrap, SandboxView{}, {"/bin/true"});
  opt.timeout = std::chrono::seconds(20);
  opt.env = clean_child_environment("/tmp");
  auto r = run_subprocess(opt);
  Status answer = ok();
  if (!r || !r->ok()) {
    std::string why = !r ? r.error().message : r->describe();
    if (r && r->started && !r->output_tail.empty()) why = r->output_tail;
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    answer = make_error(
        ErrorCode::kUnavailable,
        fmt::format("the evaluation sandbox cannot start here ({}: {}); install bubblewrap and "
                    "allow user namespaces, or pass --no-sandbox to run candidates without it "
                    "(with this user's rights and network)",
                    bwrap.string(), why));
  }
  answers.emplace(bwrap.string(), answer);
  return answer;
}

void translate_bwrap_exit(SubprocessResult& r) {
  if (r.started && !r.timed_out && !r.aborted && r.term_signal == 0 && r.exit_code > 128 &&
      r.exit_code < 128 + 65) {
    r.term_signal = r.exit_code - 128;
    r.exit_code = -1;
  }
}

namespace {

// A search path with every existing entry's symlinks resolved: in the sandbox only the bound
// trees exist, so a link through a folder that is not bound (/usr/local/cuda ->
// /etc/alternatives/cuda -> /usr/local/cuda-13.0 on a CUDA image) would dangle there.
std::string resolved_search_path(std::string_view list) {
  std::string out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(':', start), list.size());
    std::string item(list.substr(start, end - start));
    std::error_code ec;
    if (!item.empty() && fs::exists(item, ec)) {
      const fs::path c = fs::canonical(item, ec);
      if (!ec) item = c.string();
    }
    if (!item.empty()) out += (out.empty() ? "" : ":") + item;
    start = end + 1;
  }
  return out;
}

}  // namespace

std::vector<fs::path> resolved_folders_of(const char* var) {
  std::vector<fs::path> out;
  const char* v = std::getenv(var);
  if (!v) return out;
  std::string_view list(v);
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(':', start), list.size());
    const fs::path item(list.substr(start, end - start));
    start = end + 1;
    if (item.empty() || !item.is_absolute()) continue;
    std::error_code ec;
    const fs::path c = fs::canonical(item, ec);
    out.push_back(ec ? item : c);
  }
  return out;
}

std::map<std::string, std::string> clean_child_environment(const fs::path& scratch) {
  std::map<std::string, std::string> env = {{"PATH", "/usr/local/bin:/usr/bin:/bin"},
                                            {"HOME", scratch.string()},
                                            {"TMPDIR", scratch.string()},
                                            {"LANG", "C.UTF-8"}};
  static constexpr std::string_view kPrefixes[] = {"CUDA_", "NVIDIA_", "HIP_", "ROCR_", "HSA_"};
  for (char** e = environ; *e; ++e) {
    const std::string_view kv(*e);
    const auto eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = kv.substr(0, eq);
    // ATREX_TEST_PID_LOG: a test fixture's log file name (GatesTest.OneChildPerTask...), no
    // secret; ATREX_TEST_JUDGE_FAIL: a fault the judge fakes for GatesTest.AJudgeThatFails...
    bool pass = key == "LD_LIBRARY_PATH" || key == "ATREX_NO_CUPTI" ||
                key == "ATREX_TEST_PID_LOG" || key == "ATREX_TEST_JUDGE_FAIL";
    for (auto p : kPrefixes) pass = pass || key.substr(0, p.size()) == p;
    if (!pass) continue;
    const std::string_view value = kv.substr(eq + 1);
    env[std::string(key)] =
        key == "LD_LIBRARY_PATH" ? resolved_search_path(value) : std::string(value);
  }
  return env;
}

}  // namespace atrex
