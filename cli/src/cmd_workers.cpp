// The worker daemons launchers start: `atrex runner` (one per GPU) and `atrex agent-worker`.
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <thread>

#include <fmt/format.h>

#include "atrex/agent/daemon.h"
#include "atrex/common/redis/endpoint.h"
#include "atrex/runner/daemon.h"
#include "cli.h"

namespace atrex::cli {
namespace {

std::atomic<bool> g_stop{false};

// The daemons take SIGTERM / SIGINT / SIGUSR1 on one sigwait thread, with the three blocked in
// every thread, so the children they start (compilers, evaluation sandboxes) inherit them
// blocked: Slurm's scancel/requeue signals every process of a job, and an evaluation killed by
// it would be recorded as a `crashed` candidate. A runner finishes the shape in progress instead
// and gives the rest of its task back to the queue (an agent worker finishes its task); Slurm's
// KillWait bounds that with SIGKILL. A hung child is still killed by its timeout.
void take_stop_signals_on_a_thread() {
  static sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaddset(&set, sig);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([] {
    for (int sig = 0;;) {
      if (sigwait(&set, &sig) == 0) g_stop = true;
    }
  }).detach();
}

std::string default_name(const std::string& kind) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return fmt::format("{}-{}-{}", kind, host, ::getpid());
}

}  // namespace

// The daemons take no global options: everything else comes from the sweep's manifest.
void add_worker_commands(CLI::App& app, GlobalOptions& /*g*/, int& rc) {
  static std::string redis_url, sweep_id, name, metrics_listen;
  static int device = 0;
  static bool no_sandbox = false;
  auto* runner =
      app.add_subcommand("runner",
                         "Runner daemon: evaluates tasks of one sweep from Redis on one GPU "
                         "(or the CPU); SIGTERM/SIGUSR1 stop it after the current shape (the task "
                         "goes back to the queue)");
  runner
      ->add_option("--redis", redis_url,
                   "The sweep's Redis: one redis:// URL (its manifest's redis_url)")
      ->required();
  runner->add_option("--sweep", sweep_id, "Sweep id")->required();
  runner->add_option("--device", device, "GPU index")
      ->check(CLI::Range(0, 1023))->capture_default_str();
  runner->add_option("--name", name, "Consumer name (default: runner-<host>-<pid>)");
  const char* listen_help =
      "Serve Prometheus metrics at http://ADDR:PORT/metrics (port 0: any free port) and write a "
      "file_sd target to <results>/metrics/targets/<name>.json (default: the sweep's "
      "cluster.metrics, else none)";
  runner->add_option("--metrics-listen", metrics_listen, listen_help);
  add_no_sandbox_flag(*runner, no_sandbox);
  runner->callback([&] {
    auto listen = metrics_listen_flag(metrics_listen);
    if (!listen) {
      rc = fail(listen.error());
      return;
    }
    take_stop_signals_on_a_thread();
    auto redis = parse_redis_url(redis_url);
    if (!redis) {
      rc = fail(with_context(redis.error(), "--redis"));
      return;
    }
    rc = runner::run_runner_daemon(*redis, sweep_id, device,
                                   name.empty() ? default_name("runner") : name, g_stop, *listen,
                                   no_sandbox ? SandboxMode::kNone : SandboxMode::kBwrap);
  });
  auto* worker = app.add_subcommand(
      "agent-worker", "Agent worker daemon: runs AKA generations of one sweep from Redis");
  worker
      ->add_option("--redis", redis_url,
                   "The sweep's Redis: one redis:// URL (its manifest's redis_url)")
      ->required();
  worker->add_option("--sweep", sweep_id, "Sweep id")->required();
  worker->add_option("--name", name, "Consumer name (default: agent-worker-<host>-<pid>)");
  worker->add_option("--metrics-listen", metrics_listen, listen_help);
  worker->callback([&] {
    auto listen = metrics_listen_flag(metrics_listen);
    if (!listen) {
      rc = fail(listen.error());
      return;
    }
    take_stop_signals_on_a_thread();
    auto redis = parse_redis_url(redis_url);
    if (!redis) {
      rc = fail(with_context(redis.error(), "--redis"));
      return;
    }
    rc = agent::run_agent_worker_daemon(
        *redis, sweep_id, name.empty() ? default_name("agent-worker") : name, g_stop, *listen);
  });
}

}  // namespace atrex::cli
