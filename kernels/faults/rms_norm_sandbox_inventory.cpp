// ATTACKS the sandbox by looking for a way out of it (attack round 3): every file descriptor the
// child holds beyond 0-2 and the protocol's 4-8 (an fd of the runner's or of bwrap's leaked into
// the sandbox would reach the host's files or processes), every regular file under /proc
// (outside the per-process folders) and /sys/devices/system/cpu it can open for writing (host
// settings the read-only binds missed; it writes nothing), what bwrap's init (pid 1 of the
// namespace) holds open (/proc/1/fd: a descriptor to a host folder there would be a path out),
// and whether the capabilities, no_new_privs and seccomp are what the sandbox says. Reports
// `fds=[...] proc_writable=[...] sys_writable=[...] init_fds=[...] caps=<CapEff> nnp=<0|1>
// seccomp=<mode>` and fails the shape. Expected in the sandbox: fds=[] (0-2, 4-8 only),
// proc_writable only the PSI trigger files /proc/pressure/{cpu,io,memory} (unprivileged
// triggers, per process), sys_writable=[], init_fds /dev/null, the child's log and an eventfd,
// caps 0, nnp 1, seccomp 2. Twin: rms_norm_sandbox_honest.cpp.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "atrex/candidate.h"

static std::string g_report;
ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message() { return g_report.c_str(); }

static std::string link_of(const std::string& path) {
  char buf[512] = {0};
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  return n < 0 ? "ERR" : std::string(buf, static_cast<size_t>(n));
}

// Regular files under `dir` (depth < 4) that open for writing; the per-process folders and
// /proc/sys (bound read-only, and tested by rms_norm_host_sysctl.cpp) are skipped.
static void writable(const std::string& dir, int depth, std::string& out) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    if (dir == "/proc" && (std::isdigit(static_cast<unsigned char>(n[0])) || n == "self" ||
                           n == "thread-self" || n == "sys"))
      continue;
    const std::string p = dir + "/" + n;
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      if (depth < 3) writable(p, depth + 1, out);
      continue;
    }
    if (!S_ISREG(st.st_mode) || (st.st_mode & 0222) == 0) continue;
    const int fd = ::open(p.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      out += " " + p;
      ::close(fd);
    }
  }
  ::closedir(d);
}

static std::string status_field(const std::string& status, const char* key) {
  const auto at = status.find(key);
  if (at == std::string::npos) return "?";
  const auto begin = status.find_first_not_of(" \t", at + std::strlen(key));
  return status.substr(begin, status.find('\n', begin) - begin);
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch*) {
  std::string fds, init_fds, proc_w, sys_w;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    const int own = ::dirfd(d);
    while (dirent* e = ::readdir(d)) {
      if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
      const int fd = std::atoi(e->d_name);
      if (fd == own || fd <= 2 || (fd >= 4 && fd <= 8)) continue;
      fds += " " + std::to_string(fd) + "=" + link_of(std::string("/proc/self/fd/") + e->d_name);
    }
    ::closedir(d);
  }
  if (DIR* d = ::opendir("/proc/1/fd")) {
    while (dirent* e = ::readdir(d)) {
      if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
      std::string target = link_of(std::string("/proc/1/fd/") + e->d_name);
      if (target.rfind("/tmp/atrex-", 0) == 0 || target.find(".log") != std::string::npos)
        target = "LOG";  // the child's log, whose name changes per run
      init_fds += " " + target;
    }
    ::closedir(d);
  } else {
    init_fds = " ERR" + std::to_string(errno);
  }
  writable("/proc", 0, proc_w);
  writable("/sys/devices/system/cpu", 1, sys_w);
  std::ifstream in("/proc/self/status");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string status = ss.str();
  g_report = "fds=[" + fds + " ] proc_writable=[" + proc_w + " ] sys_writable=[" + sys_w +
             " ] init_fds=[" + init_fds + " ] caps=" + status_field(status, "CapEff:") +
             " nnp=" + status_field(status, "NoNewPrivs:") +
             " seccomp=" + status_field(status, "Seccomp:");
  return 1;
}
