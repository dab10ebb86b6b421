// The `local` launcher: workers as detached processes of this machine (their own session, so
// they outlive the submitting command), logs in <results>/logs/.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "atrex/problems/suite.h"
#include "atrex/scheduler/launcher.h"
#include "host_name.h"

namespace atrex::scheduler {
namespace fs = std::filesystem;

namespace {

// Double fork: the worker is re-parented to init, so no zombie is left with a long-lived parent.
Result<pid_t> spawn_detached(const std::vector<std::string>& args, const fs::path& log) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) return io_error("pipe failed");
  std::vector<char*> argv;
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log_path = log.string();
  const pid_t child = ::fork();
  if (child < 0) return io_error("fork failed");
  if (child == 0) {
    ::close(pipefd[0]);
    ::setsid();
    const pid_t worker = ::fork();
    if (worker == 0) {
      const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      const int devnull = ::open("/dev/null", O_RDONLY);
      ::dup2(devnull, 0);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(pipefd[1]);
      ::execv(argv[0], argv.data());
      _exit(127);
    }
    (void)!::write(pipefd[1], &worker, sizeof worker);
    _exit(0);
  }
  ::close(pipefd[1]);
  pid_t worker = -1;
  const bool got = ::read(pipefd[0], &worker, sizeof worker) == sizeof worker;
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!got || worker <= 0) return io_error(fmt::format("could not start {}", args.front()));
  return worker;
}

// A recorded worker's pid may belong to an unrelated process by now (the worker died and the
// pid was reused): it is this sweep's worker only while its command line, from
// /proc/<pid>/cmdline, is the one recorded at launch (the atrex binary, the role, `--sweep ID`
// and the worker's name). Anything else is neither signalled nor counted alive.
bool is_recorded_worker(const LocalWorker& p) {
  if (p.pid <= 0 || p.args.empty()) return false;
  std::ifstream in(fmt::format("/proc/{}/cmdline", p.pid), std::ios::binary);
  if (!in) return false;
  const std::string cmdline{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::string expected;
  for (const auto& a : p.args) expected += a + '\0';
  return cmdline == expected;
}

class LocalLauncher final : public WorkerLauncher {
 public:
  Result<WorkersRecord> launch(const Manifest& sweep, const ClusterOptions& o,
                               const RedisEndpoint& redis, const ProgressFn& say) override {
    const fs::path out = sweep.output;
    std::error_code ec;
    fs::create_directories(out / "logs", ec);
    const fs::path atrex = o.atrex.empty() ? problems::executable_dir() / "atrex" : o.atrex;
    WorkersRecord w{Launcher::kLocal, host_name(), {}, {}};
    auto start = [&](const std::vector<std::string>& args,
                     const std::string& name) -> Result<void> {
      const fs::path log = out / "logs" / (name + ".log");
      ATREX_ASSIGN_OR_RETURN(pid_t pid, spawn_detached(args, log));
      w.processes.push_back(LocalWorker{name, pid, args, log.string()});
      return ok();
    };
    const std::string url = redis.to_url();
    for (int i = 0; i < o.runners; ++i) {
      const std::string name = fmt::format("runner-{}", i);
      ATREX_TRY(start({atrex.string(), "runner", "--redis", url, "--sweep", sweep.sweep_id,
                       "--device", std::to_string(i), "--name", name},
                      name));
    }
    for (int i = 0; i < o.agent_workers; ++i) {
      const std::string name = fmt::format("agent-worker-{}", i);
      ATREX_TRY(start({atrex.string(), "agent-worker", "--redis", url, "--sweep", sweep.sweep_id,
                       "--name", name},
                      name));
    }
    if (say) {
      say(fmt::format("started {} runner(s) and {} agent worker(s) on this machine; logs in {}",
                      o.runners, o.agent_workers, (out / "logs").string()));
    }
    return w;
  }

  Result<WorkersRecord> revive(const Manifest& sweep, const ClusterOptions& o,
                               const RedisEndpoint& redis, const ProgressFn& say) override {
    if (!sweep.workers || sweep.workers->launcher != Launcher::kLocal) {
      return launch(sweep, o, redis, say);
    }
    WorkersRecord w = *sweep.workers;
    int revived = 0;
    for (auto& p : w.processes) {
      if (is_recorded_worker(p)) continue;
      if (p.args.empty()) {
        return internal_error(fmt::format("worker {} has no recorded command line", p.name));
      }
      ATREX_ASSIGN_OR_RETURN(pid_t pid,
                             spawn_detached(p.args, p.log.empty() ? "/dev/null" : p.log));
      p.pid = pid;
      ++revived;
    }
    if (say) say(fmt::format("restarted {} worker process(es) that had stopped", revived));
    return w;
  }

  std::pair<int, std::string> alive(const WorkersRecord& w) override {
    int n = 0;
    for (const auto& p : w.processes) n += is_recorded_worker(p) ? 1 : 0;
    return {n, fmt::format("{}/{} local worker processes alive on {}", n, w.processes.size(),
                           w.host.empty() ? "?" : w.host)};
  }

  Result<void> stop(const WorkersRecord& w) override {
    for (const auto& p : w.processes) {
      if (is_recorded_worker(p)) ::kill(static_cast<pid_t>(p.pid), SIGTERM);
    }
    return ok();
  }
};

}  // namespace

std::unique_ptr<WorkerLauncher> make_local_launcher() { return std::make_unique<LocalLauncher>(); }

std::unique_ptr<WorkerLauncher> make_launcher(Launcher kind) {
  switch (kind) {
    case Launcher::kLocal: return make_local_launcher();
    case Launcher::kSlurm: return make_slurm_launcher();
  }
  ATREX_UNREACHABLE("Launcher");
}

}  // namespace atrex::scheduler
