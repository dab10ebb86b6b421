#include "atrex/common/process/cgroup.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <linux/magic.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>

namespace atrex {
namespace fs = std::filesystem;

namespace {

std::string read_small(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// write(2) of `value` to a cgroup file; the errno's name on failure, "" on success.
std::string write_value(const fs::path& p, const std::string& value) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return fmt::format("{}: {}", p.string(), std::strerror(errno));
  const ssize_t w = ::write(fd, value.data(), value.size());
  const int err = errno;
  ::close(fd);
  if (w != static_cast<ssize_t>(value.size()))
    return fmt::format("{} <- {}: {}", p.string(), value, std::strerror(err));
  return {};
}

bool is_fs(const fs::path& p, long magic) {
  struct statfs s {};
  return ::statfs(p.c_str(), &s) == 0 && static_cast<long>(s.f_type) == magic;
}

// This process's cgroup path in hierarchy `controller` ("" for v2's "0::"), from
// /proc/self/cgroup; nullopt when it is not listed.
std::optional<std::string> own_path(const std::string& controller) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const auto a = line.find(':');
    const auto b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string list = line.substr(a + 1, b - a - 1);
    if (controller.empty() ? (line.substr(0, a) == "0" && list.empty())
                           : (("," + list + ",").find("," + controller + ",") !=
                              std::string::npos)) {
      return line.substr(b + 1);
    }
  }
  return std::nullopt;
}

bool has_word(const std::string& list, const std::string& word) {
  std::stringstream ss(list);
  std::string w;
  while (ss >> w)
    if (w == word) return true;
  return false;
}

// An fd of `p` open for writing, numbered 10 or above: SubprocessOptions::inherit_fds puts the
// child's fds on 3..9 before the policies run, which would replace a lower one.
int open_procs(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
  ::close(fd);
  return high;
}

fs::path v2_root() {
  for (const char* r : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    if (is_fs(r, CGROUP2_SUPER_MAGIC)) return r;
  }
  return {};
}

}  // namespace

std::unique_ptr<ChildCgroup> ChildCgroup::create(const std::string& name, Limits limits) {
  std::unique_ptr<ChildCgroup> cg(new ChildCgroup());
  if (const char* off = std::getenv("ATREX_CGROUP"); off && std::string(off) == "off") {
    cg->description_ = "none (ATREX_CGROUP=off)";
    return cg;
  }
  std::vector<std::string> why;
  // cgroup v2.
  const fs::path root = v2_root();
  fs::path parent;
  if (const char* p = std::getenv("ATREX_CGROUP_PARENT"); p && *p) {
    parent = p;
  } else if (auto own = own_path(""); own && !root.empty()) {
    parent = root / fs::path(*own).relative_path();
  }
  if (!parent.empty() && is_fs(parent, CGROUP2_SUPER_MAGIC)) {
    std::string control = read_small(parent / "cgroup.subtree_control");
    if (!has_word(control, "memory") || !has_word(control, "pids")) {
      // Taken only where the folder has no processes of its own (cgroup v2's rule) and both
      // controllers reach it.
      const std::string err = write_value(parent / "cgroup.subtree_control", "+memory +pids");
      control = read_small(parent / "cgroup.subtree_control");
      if (!has_word(control, "memory") || !has_word(control, "pids"))
        why.push_back(fmt::format("cgroup v2 {}: no memory and pids controllers for its children ({})",
                                  parent.string(), err.empty() ? "not delegated" : err));
    }
    if (has_word(control, "memory") && has_word(control, "pids")) {
      const fs::path dir = parent / name;
      std::error_code ec;
      if (!fs::create_directory(dir, ec) || ec) {
        why.push_back(fmt::format("cgroup v2 {}: {}", dir.string(), ec.message()));
      } else {
        cg->folders_.push_back(dir);
        std::string err;
        if (limits.memory_bytes) {
          err += write_value(dir / "memory.max", std::to_string(limits.memory_bytes));
          if (fs::exists(dir / "memory.swap.max")) err += write_value(dir / "memory.swap.max", "0");
          (void)write_value(dir / "memory.oom.group", "1");
        }
        if (limits.tasks) err += write_value(dir / "pids.max", std::to_string(limits.tasks));
        const int fd = err.empty() ? open_procs(dir / "cgroup.procs") : -1;
        if (fd >= 0) {
          cg->version_ = 2;
          cg->procs_fds_.push_back(fd);
          cg->memory_folder_ = cg->pids_folder_ = dir;
          cg->description_ = fmt::format("cgroup v2 (memory.max {} MiB, pids.max {})",
                                         limits.memory_bytes >> 20, limits.tasks);
          return cg;
        }
        why.push_back(fmt::format("cgroup v2 {}: {}", dir.string(),
                                  err.empty() ? std::string(std::strerror(errno)) : err));
        std::error_code rm;
        fs::remove(dir, rm);
        cg->folders_.clear();
      }
    }
  } else if (!root.empty() && parent.empty()) {
    why.push_back("cgroup v2: this process's cgroup is not listed");
  }
  // cgroup v1: a folder in each of the memory and pids hierarchies.
  for (const char* controller : {"memory", "pids"}) {
    const bool memory = std::string(controller) == "memory";
    if (memory ? limits.memory_bytes == 0 : limits.tasks == 0) continue;
    const fs::path mount = fs::path("/sys/fs/cgroup") / controller;
    const auto own = own_path(controller);
    if (!own || !is_fs(mount, CGROUP_SUPER_MAGIC)) {
      why.push_back(fmt::format("cgroup v1 {}: not mounted", controller));
      continue;
    }
    const fs::path dir = mount / fs::path(*own).relative_path() / name;
    std::error_code ec;
    if (!fs::create_directory(dir, ec) || ec) {
      why.push_back(fmt::format("cgroup v1 {}: {}", dir.string(), ec.message()));
      continue;
    }
    cg->folders_.push_back(dir);
    std::string err;
    if (memory) {
      const std::string v = std::to_string(limits.memory_bytes);
      err = write_value(dir / "memory.limit_in_bytes", v);
      // memsw is memory + swap: the same figure allows no swap.
      if (err.empty() && fs::exists(dir / "memory.memsw.limit_in_bytes"))
        (void)write_value(dir / "memory.memsw.limit_in_bytes", v);
    } else {
      err = write_value(dir / "pids.max", std::to_string(limits.tasks));
    }
    const int fd = err.empty() ? open_procs(dir / "cgroup.procs") : -1;
    if (fd < 0) {
      why.push_back(fmt::format("cgroup v1 {}: {}", controller,
                                err.empty() ? std::string(std::strerror(errno)) : err));
      std::error_code rm;
      fs::remove(dir, rm);
      cg->folders_.pop_back();
      continue;
    }
    cg->version_ = 1;
    cg->procs_fds_.push_back(fd);
    (memory ? cg->memory_folder_ : cg->pids_folder_) = dir;
  }
  if (cg->version_ == 1) {
    std::string what;
    if (!cg->memory_folder_.empty())
      what = fmt::format("memory.limit_in_bytes {} MiB", limits.memory_bytes >> 20);
    if (!cg->pids_folder_.empty())
      what += fmt::format("{}pids.max {}", what.empty() ? "" : ", ", limits.tasks);
    cg->description_ = "cgroup v1 (" + what + ")";
    if (cg->memory_folder_.empty() || cg->pids_folder_.empty()) {
      for (const auto& w : why) cg->description_ += "; " + w;
    }
    return cg;
  }
  std::string all;
  for (const auto& w : why) all += (all.empty() ? "" : "; ") + w;
  cg->description_ = "none (" + (all.empty() ? std::string("no cgroup mounted") : all) + ")";
  return cg;
}

int ChildCgroup::apply_in_child() const noexcept {
  for (int fd : procs_fds_) {
    // "0": the writing process itself (cgroup v2 and v1 alike).
    if (::write(fd, "0", 1) != 1) return errno;
  }
  return 0;
}

bool ChildCgroup::oom_killed() const {
  if (memory_folder_.empty()) return false;
  const std::string text = read_small(memory_folder_ / (version_ == 2 ? "memory.events"
                                                                      : "memory.oom_control"));
  std::stringstream ss(text);
  std::string key;
  long long value = 0;
  while (ss >> key >> value) {
    if (key == "oom_kill" && value > 0) return true;
  }
  return false;
}

int64_t ChildCgroup::tasks_peak() const {
  if (pids_folder_.empty()) return -1;
  for (const char* f : {"pids.peak", "pids.current"}) {
    const std::string t = read_small(pids_folder_ / f);
    if (!t.empty()) return std::strtoll(t.c_str(), nullptr, 10);
  }
  return -1;
}

ChildCgroup::~ChildCgroup() {
  for (int fd : procs_fds_) ::close(fd);
  // Whatever is left of the child (nothing, once its PID namespace is gone) is killed; the
  // folders are removed once empty (an exiting task holds one for a moment).
  for (const fs::path& dir : folders_) {
    if (version_ == 2 && fs::exists(dir / "cgroup.kill")) (void)write_value(dir / "cgroup.kill", "1");
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (;;) {
      std::stringstream procs(read_small(dir / "cgroup.procs"));
      bool any = false;
      for (long pid = 0; procs >> pid;) {
        any = true;
        if (pid > 1) ::kill(static_cast<pid_t>(pid), SIGKILL);
      }
      if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) break;
      if (std::chrono::steady_clock::now() > until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(any ? 20 : 5));
    }
  }
}

}  // namespace atrex
