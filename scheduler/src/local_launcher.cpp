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
#include "launchers.h"

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
bool is_recorded_worker(const Json& p) {
  const pid_t pid = p.value("pid", 0);
  const auto args = p.value("args", std::vector<std::string>{});
  if (pid <= 0 || args.empty()) return false;
  std::ifstream in(fmt::format("/proc/{}/cmdline", pid), std::ios::binary);
  if (!in) return false;
  const std::string cmdline{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::string expected;
  for (const auto& a : args) expected += a + '\0';
  return cmdline == expected;
}

Result<Json> launch_local(const Json& manifest, const ClusterOptions& o, const ProgressFn& say) {
  const fs::path out = manifest.value("output", ".");
  std::error_code ec;
  fs::create_directories(out / "logs", ec);
  const fs::path atrex = o.atrex.empty() ? problems::executable_dir() / "atrex" : o.atrex;
  const std::string id = manifest.value("sweep_id", "");
  Json pids = Json::array();
  auto start = [&](const std::vector<std::string>& args, const std::string& name) -> Result<void> {
    const fs::path log = out / "logs" / (name + ".log");
    ATREX_ASSIGN_OR_RETURN(pid_t pid, spawn_detached(args, log));
    pids.push_back(Json{{"name", name}, {"pid", pid}, {"args", args}, {"log", log.string()}});
    return ok();
  };
  for (int i = 0; i < o.runners; ++i) {
    const std::string name = fmt::format("runner-{}", i);
    ATREX_TRY(start({atrex.string(), "runner", "--redis", o.redis_url, "--sweep", id, "--device",
                     std::to_string(i), "--name", name},
                    name));
  }
  for (int i = 0; i < o.agent_workers; ++i) {
    const std::string name = fmt::format("agent-worker-{}", i);
    ATREX_TRY(start(
        {atrex.string(), "agent-worker", "--redis", o.redis_url, "--sweep", id, "--name", name},
        name));
  }
  if (say)
    say(fmt::format("started {} runner(s) and {} agent worker(s) on this machine; logs in {}",
                    o.runners, o.agent_workers, (out / "logs").string()));
  return Json{{"launcher", "local"},
              {"host",
               [] {
                 char host[256] = {};
                 ::gethostname(host, sizeof host - 1);
                 return std::string(host);
               }()},
              {"processes", pids}};
}

}  // namespace

Result<Json> launch_slurm(const Json& manifest, const ClusterOptions& o, const ProgressFn& say);
std::pair<int, std::string> slurm_alive(const Json& workers);
Result<void> slurm_stop(const Json& workers);

Result<Json> launch_workers(const Json& manifest, const ClusterOptions& options,
                            const ProgressFn& say) {
  if (options.launcher == "local") return launch_local(manifest, options, say);
  if (options.launcher == "slurm") return launch_slurm(manifest, options, say);
  return invalid_input(
      fmt::format("--launcher: expected local or slurm; got \"{}\"", options.launcher));
}

std::pair<int, std::string> workers_alive(const Json& workers) {
  const std::string launcher = workers.value("launcher", "");
  if (launcher == "slurm") return slurm_alive(workers);
  if (launcher != "local") return {-1, "unknown launcher"};
  int alive = 0, total = 0;
  for (const auto& p : workers.value("processes", Json::array())) {
    ++total;
    if (is_recorded_worker(p)) ++alive;
  }
  return {alive, fmt::format("{}/{} local worker processes alive on {}", alive, total,
                             workers.value("host", "?"))};
}

Result<Json> revive_slurm(const Json& manifest, const ClusterOptions& options,
                          const ProgressFn& say);

Result<Json> revive_workers(const Json& manifest, const ClusterOptions& options,
                            const ProgressFn& say) {
  Json workers = manifest.value("workers", Json::object());
  if (workers.value("launcher", "") == "slurm") return revive_slurm(manifest, options, say);
  if (workers.value("launcher", "") != "local") return launch_workers(manifest, options, say);
  int revived = 0;
  for (auto& p : workers["processes"]) {
    if (is_recorded_worker(p)) continue;
    const auto args = p.value("args", std::vector<std::string>{});
    if (args.empty())
      return internal_error(
          fmt::format("worker {} has no recorded command line", p.value("name", "")));
    ATREX_ASSIGN_OR_RETURN(pid_t pid, spawn_detached(args, p.value("log", "/dev/null")));
    p["pid"] = pid;
    ++revived;
  }
  if (say) say(fmt::format("restarted {} worker process(es) that had stopped", revived));
  return workers;
}

Result<void> stop_workers(const Json& workers) {
  const std::string launcher = workers.value("launcher", "");
  if (launcher == "slurm") return slurm_stop(workers);
  for (const auto& p : workers.value("processes", Json::array())) {
    if (is_recorded_worker(p)) ::kill(p.value("pid", 0), SIGTERM);
  }
  return ok();
}

}  // namespace atrex::scheduler
