#include "atrex/common/process/subprocess.h"

#include "atrex/common/text.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <linux/close_range.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <thread>

#include <fmt/format.h>

namespace atrex {
namespace fs = std::filesystem;

std::string SubprocessResult::describe() const {
  if (!started) return "could not start: " + output_tail;
  if (timed_out) return fmt::format("timed out after {:.0f} s", wall_s);
  if (term_signal) {
    const char* name = sigabbrev_np(term_signal);
    return fmt::format("killed by signal {} (SIG{})", term_signal, name ? name : "?");
  }
  return fmt::format("exit code {}", exit_code);
}

namespace {

std::string read_tail(const fs::path& file, size_t bytes) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  const auto size = static_cast<size_t>(in.tellg());
  const size_t start = size > bytes ? size - bytes : 0;
  in.seekg(static_cast<std::streamoff>(start));
  std::string s(size - start, '\0');
  in.read(s.data(), static_cast<std::streamsize>(s.size()));
  // The output is the child's (a candidate may print anything): it goes into records and
  // messages serialised as JSON, which must be UTF-8. Invalid bytes become '?' (attack round,
  // 2026-12-01: raw bytes on stdout made the runner throw while writing the record).
  return valid_utf8(std::move(s));
}

// What the child reports through the close-on-exec pipe when it could not exec.
struct SpawnFailure {
  enum Stage : int { kPolicy = 1, kExec = 2 };
  int stage;
  int policy;  // index into SubprocessOptions::policies (kPolicy)
  int error;   // errno
};

}  // namespace

int ResourceLimits::apply_in_child() const noexcept {
  const std::pair<int, uint64_t> limits[] = {{RLIMIT_AS, limits_.address_space_bytes},
                                             {RLIMIT_FSIZE, limits_.file_size_bytes},
                                             {RLIMIT_NOFILE, limits_.open_files},
                                             {RLIMIT_NPROC, limits_.processes},
                                             {RLIMIT_CPU, limits_.cpu_seconds}};
  for (const auto& [resource, value] : limits) {
    if (value == 0) continue;
    const struct rlimit r { static_cast<rlim_t>(value), static_cast<rlim_t>(value) };
    if (::setrlimit(resource, &r) != 0) return errno;
  }
  return 0;
}

Result<SubprocessResult> run_subprocess(const SubprocessOptions& opt) {
  if (opt.argv.empty()) return internal_error("run_subprocess: empty argv");
  fs::path out_file = opt.output_file;
  bool temp_output = false;
  if (out_file.empty()) {
    out_file = fs::temp_directory_path() /
               fmt::format("atrex_child_{}_{}.log", ::getpid(),
                           std::hash<std::thread::id>{}(std::this_thread::get_id()));
    temp_output = true;
  }
  const int out_fd = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out_fd < 0)
    return io_error(
        fmt::format("{}: cannot open child output: {}", out_file.string(), std::strerror(errno)));

  // Everything the child needs is prepared before fork: only async-signal-safe calls after.
  std::vector<char*> argv;
  for (const auto& a : opt.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_storage;
  if (opt.env) {
    for (const auto& [k, v] : *opt.env) {
      if (!opt.extra_env.count(k)) env_storage.push_back(k + "=" + v);
    }
  } else {
    for (char** e = environ; *e; ++e) {
      std::string kv(*e);
      const auto eq = kv.find('=');
      if (eq != std::string::npos && opt.extra_env.count(kv.substr(0, eq))) continue;
      env_storage.push_back(std::move(kv));
    }
  }
  for (const auto& [k, v] : opt.extra_env) env_storage.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_storage) envp.push_back(s.data());
  envp.push_back(nullptr);
  for (const ChildPolicy* policy : opt.policies) {
    ATREX_ASSERT(policy != nullptr, "a null ChildPolicy");
    if (auto prepared = policy->prepare(); !prepared) {
      ::close(out_fd);
      return tl::unexpected(with_context(prepared.error(), policy->name()));
    }
  }
  int exec_pipe[2];
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0) {
    ::close(out_fd);
    return io_error(fmt::format("pipe: {}", std::strerror(errno)));
  }

  const auto t0 = std::chrono::steady_clock::now();
  const pid_t parent = ::getpid();
  auto close_inherited = [&] {
    for (const auto& [from, to] : opt.inherit_fds) ::close(from);
  };
  for (const auto& [from, to] : opt.inherit_fds) {
    ATREX_ASSERT(from >= 0 && to > 2 && to < 64, "inherit_fds: a valid fd onto 3..63");
  }
  ATREX_ASSERT(opt.inherit_fds.size() <= 16, "at most 16 inherited fds");
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(out_fd);
    close_inherited();
    return io_error(fmt::format("fork: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    // A runner killed with SIGKILL takes its evaluation child along instead of leaving it
    // running on the GPU (the setting survives exec; it fires when the forking thread exits).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) _exit(125);
    struct rlimit no_core {
      0, 0
    };
    ::setrlimit(RLIMIT_CORE, &no_core);
    const int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::dup2(out_fd, 1);
    ::dup2(out_fd, 2);
    // Inherited fds: first out of the way of every target number (F_DUPFD above them all),
    // then onto their numbers, without close-on-exec.
    int moved[16];
    for (size_t i = 0; i < opt.inherit_fds.size(); ++i) {
      moved[i] = ::fcntl(opt.inherit_fds[i].first, F_DUPFD_CLOEXEC, 64);
      if (moved[i] < 0) _exit(126);
    }
    // Nothing else of the parent's crosses exec: a runner's Redis connection (hiredis opens it
    // without close-on-exec) reached sandboxed candidates as an authenticated socket (attack
    // round, 2026-12-01). Every fd from 3 up becomes close-on-exec, then the inherited ones are
    // put on their numbers (dup2 clears the flag on the copy).
    if (::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) != 0) {
      const long max_fd = std::min<long>(::sysconf(_SC_OPEN_MAX), 1 << 16);
      for (int fd = 3; fd < max_fd; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    for (size_t i = 0; i < opt.inherit_fds.size(); ++i) {
      if (::dup2(moved[i], opt.inherit_fds[i].second) < 0) _exit(126);  // dup2 clears CLOEXEC
    }
    if (!opt.working_dir.empty() && ::chdir(opt.working_dir.c_str()) != 0) _exit(126);
    for (size_t i = 0; i < opt.policies.size(); ++i) {
      if (const int err = opt.policies[i]->apply_in_child(); err != 0) {
        const SpawnFailure f{SpawnFailure::kPolicy, static_cast<int>(i), err};
        (void)!::write(exec_pipe[1], &f, sizeof f);
        _exit(126);
      }
    }
    ::execvpe(argv[0], argv.data(), envp.data());
    const SpawnFailure f{SpawnFailure::kExec, 0, errno};
    (void)!::write(exec_pipe[1], &f, sizeof f);
    _exit(127);
  }
  ::setpgid(pid, pid);  // also here, so the group exists before we might need to kill it
  close_inherited();
  ::close(exec_pipe[1]);
  ::close(out_fd);
  SpawnFailure spawn{};
  const bool exec_failed = ::read(exec_pipe[0], &spawn, sizeof spawn) == sizeof spawn;
  ::close(exec_pipe[0]);

  SubprocessResult result;
  result.started = !exec_failed;
  auto deadline = t0 + opt.timeout;
  bool stop_sent = false;
  int status = 0;
  for (auto delay = std::chrono::microseconds(200);;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return io_error(fmt::format("waitpid: {}", std::strerror(errno)));
    if (opt.progress && opt.progress()) deadline = std::chrono::steady_clock::now() + opt.timeout;
    if (!stop_sent && opt.should_stop && opt.should_stop()) {
      if (opt.stop_signal != 0) ::kill(pid, opt.stop_signal);
      stop_sent = true;
    }
    if (opt.should_abort && opt.should_abort()) {
      result.aborted = true;
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      result.timed_out = true;
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::microseconds(20'000));
  }
  // Reap the rest of the group (grandchildren a candidate left behind).
  ::kill(-pid, SIGKILL);
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status) && !result.timed_out && !result.aborted)
    result.term_signal = WTERMSIG(status);
  if (result.timed_out) result.term_signal = 0;
  result.output_tail = read_tail(out_file, opt.output_tail_bytes);
  if (exec_failed && spawn.stage == SpawnFailure::kPolicy) {
    result.output_tail = fmt::format("{}: the {} policy failed in the child: {}", opt.argv[0],
                                     opt.policies[static_cast<size_t>(spawn.policy)]->name(),
                                     std::strerror(spawn.error));
  } else if (exec_failed) {
    result.output_tail = fmt::format("{}: {}", opt.argv[0], std::strerror(spawn.error));
  }
  if (temp_output) {
    std::error_code ec;
    fs::remove(out_file, ec);
  }
  return result;
}

}  // namespace atrex
