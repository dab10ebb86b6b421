// A cluster sweep across three hosts on one machine (issue 5, item 6). Network namespaces made
// by deploy/netns-hosts.sh stand in for hosts a, b and c on a private /24 of which nothing is in
// the root namespace. Redis runs on a, bound to a's address only; the sweep is submitted on b,
// whose local launcher starts a runner and an agent worker there; a second runner runs on c.
// The tests show that the hosts reach Redis over the namespaces' network only (not from the root
// namespace, not over a's loopback), that runners on both b and c evaluate the sweep's tasks,
// and that every result is counted once.
//
// Without root (CAP_SYS_ADMIN + CAP_NET_ADMIN) or iproute2 the tests skip, saying why; with
// ATREX_REQUIRE_NETNS=1 (.ci/run sets it when it runs as root) they fail instead.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "atrex/common/json_io.h"
#include "atrex/common/redis/connection.h"
#include "atrex/common/process/subprocess.h"
#include "atrex/testing/redis_server.h"
#include "atrex/testing/sweep_cli.h"

extern char** environ;

namespace atrex {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

// The hosts' /24 (deploy/netns-hosts.sh's default); host a is .1, b .2, c .3.
std::string subnet() {
  const char* s = std::getenv("ATREX_NETNS_SUBNET");
  return s && *s ? s : "10.77.0";
}
std::string address(int host) { return subnet() + "." + std::to_string(host); }

bool require_netns() {
  const char* r = std::getenv("ATREX_REQUIRE_NETNS");
  return r && std::string(r) == "1";
}

// (exit code, output) of a command run to completion; -2 when it could not run.
std::pair<int, std::string> run(std::vector<std::string> argv, int timeout_s = 60) {
  SubprocessOptions o;
  o.argv = std::move(argv);
  o.timeout = std::chrono::seconds(timeout_s);
  o.output_tail_bytes = 1 << 16;
  auto r = run_subprocess(o);
  if (!r) return {-2, r.error().message};
  if (!r->started) return {-2, "cannot run " + o.argv.front()};
  return {r->timed_out ? -1 : r->exit_code, r->output_tail};
}

std::pair<int, std::string> netns_hosts(std::vector<std::string> args) {
  std::vector<std::string> argv = {"bash", std::string(ATREX_TEST_DEPLOY_DIR) + "/netns-hosts.sh"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(std::move(argv));
}

// Runs `fn` on a thread that joined network namespace `ns`: the sockets it opens and the
// processes it spawns live there (setns(2) with CLONE_NEWNET moves the calling thread only).
// "" on success, else why it could not join.
std::string in_netns(const std::string& ns, const std::function<void()>& fn) {
  std::string error;
  std::thread t([&] {
    const std::string path = "/run/netns/" + ns;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      error = "cannot open " + path + ": " + std::strerror(errno);
      return;
    }
    const int rc = ::setns(fd, CLONE_NEWNET);
    const int err = errno;
    ::close(fd);
    if (rc != 0) {
      error = "setns(" + path + "): " + std::strerror(err);
      return;
    }
    fn();
  });
  t.join();
  return error;
}

// PING over a fresh connection from the calling thread's namespace: "" on PONG, else the error.
std::string ping(const std::string& host, int port) {
  RedisEndpoint o;
  o.host = host;
  o.port = port;
  o.max_reconnects = 0;
  o.connect_timeout = 1000ms;
  o.command_timeout = 2000ms;
  auto c = RedisConnection::connect(o);
  if (!c) return c.error().message;
  auto r = (*c)->command({"PING"});
  if (!r) return r.error().message;
  return r->str == "PONG" ? "" : "unexpected reply " + r->str;
}

// A long-lived process of the test (the runner on host c), output to a file; SIGKILLed if the
// test ends without stopping it.
class Daemon {
 public:
  Daemon() = default;
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  ~Daemon() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // "" when started, else why not.
  std::string start(const std::vector<std::string>& args, const fs::path& log) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    std::vector<std::string> copy = args;
    std::vector<char*> argv;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = ::posix_spawnp(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      pid_ = 0;
      return "cannot start " + args.front() + ": " + std::strerror(rc);
    }
    return "";
  }
  // SIGTERM, then up to `timeout` for it to exit; its wait status, or -1 if it had to be killed.
  int stop(std::chrono::seconds timeout) {
    if (pid_ <= 0) return status_;
    ::kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid_, &status_, WNOHANG) == pid_) {
        pid_ = 0;
        return status_;
      }
      std::this_thread::sleep_for(50ms);
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = 0;
    return -1;
  }

 private:
  pid_t pid_ = 0;
  int status_ = 0;
};

bool poll(const std::function<bool()>& pred, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(100ms);
  }
  return false;
}

class NetnsHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    prefix_ = "atrex-t" + std::to_string(::getpid());
    if (auto [rc, why] = netns_hosts({"check", "--prefix", prefix_}); rc != 0) {
      while (!why.empty() && why.back() == '\n') why.pop_back();
      const std::string msg =
          "network namespaces cannot be made here, so the multi-host test cannot run (" + why +
          "); run it as root with iproute2 installed";
      if (require_netns())
        FAIL() << msg << ". ATREX_REQUIRE_NETNS=1 (.ci/run, as root) makes this a failure";
      GTEST_SKIP() << msg;
    }
    auto [rc, out] = netns_hosts({"up", "--prefix", prefix_, "--subnet", subnet()});
    up_ = true;  // `up` removes what it made when it fails; `down` is harmless either way
    ASSERT_EQ(rc, 0) << out;
    dir_ = fs::temp_directory_path() /
           ("atrex_netns_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy(ATREX_TEST_FIXTURES_DIR, dir_ / "fx", fs::copy_options::recursive);
    // The tests' Redis helper, started from host a: listening on a's address, nowhere else.
    const std::string joined = in_netns(host("a"), [&] {
      redis_ =
          std::make_unique<testing::RedisServer>(LocalRedisOptions{.bind = address(1), .port = 0});
    });
    ASSERT_EQ(joined, "");
    ASSERT_TRUE(redis_ && redis_->running());
    port_ = redis_->options().port;
    url_ = "redis://" + address(1) + ":" + std::to_string(port_);
  }
  void TearDown() override {
    if (!up_) return;
    // A failed test leaves no workers behind: the launcher's on b, the runner on c.
    if (fs::exists(dir_ / "out" / "manifest.json"))
      (void)on("b")({"sweep", "cancel", (dir_ / "out").string()});
    runner_c_.reset();
    redis_.reset();
    auto [rc, out] = netns_hosts({"down", "--prefix", prefix_});
    EXPECT_EQ(rc, 0) << out;
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::string host(const std::string& h) const { return prefix_ + "-" + h; }
  // The atrex CLI on host h.
  testing::AtrexCli on(const std::string& h) const {
    return testing::AtrexCli(dir_, {"ip", "netns", "exec", host(h)});
  }
  // A Redis command sent from host a (the root namespace cannot reach the server).
  Result<RedisValue> redis_on_a(const std::vector<std::string>& cmd) {
    Result<RedisValue> reply = make_error(ErrorCode::kInternal, "not run");
    const std::string joined = in_netns(host("a"), [&] {
      auto c = RedisConnection::connect(redis_->options());
      reply = c ? (*c)->command(cmd) : Result<RedisValue>(tl::unexpected(c.error()));
    });
    if (!joined.empty()) return make_error(ErrorCode::kInternal, joined);
    return reply;
  }
  // The peer addresses (without port) of the server's clients.
  std::multiset<std::string> client_addresses() {
    std::multiset<std::string> out;
    auto list = redis_on_a({"CLIENT", "LIST"});
    EXPECT_TRUE(list) << list.error().message;
    if (!list) return out;
    size_t at = 0;
    while ((at = list->str.find(" addr=", at)) != std::string::npos) {
      at += 6;
      const std::string peer = list->str.substr(at, list->str.find(' ', at) - at);
      out.insert(peer.substr(0, peer.rfind(':')));
    }
    return out;
  }

  std::string prefix_;
  bool up_ = false;
  fs::path dir_;
  std::unique_ptr<testing::RedisServer> redis_;
  int port_ = 0;
  std::string url_;
  std::unique_ptr<Daemon> runner_c_;
};

TEST_F(NetnsHosts, RedisOnHostAAnswersHostsBAndCButNeitherTheRootNamespaceNorItsOwnLoopback) {
  for (const char* h : {"b", "c"}) {
    std::string error = "not run";
    ASSERT_EQ(in_netns(host(h), [&] { error = ping(address(1), port_); }), "");
    EXPECT_EQ(error, "") << "host " << h << " cannot reach Redis at " << url_;
  }
  std::string loopback = "";
  ASSERT_EQ(in_netns(host("a"), [&] { loopback = ping("127.0.0.1", port_); }), "");
  EXPECT_NE(loopback, "")
      << "Redis answers on host a's loopback: it is not bound to a's address only";
  // This thread is in the root namespace: no interface there is on the hosts' network, and the
  // server cannot be reached from it.
  EXPECT_NE(ping(address(1), port_), "") << "the root namespace reaches Redis at " << url_;
  auto [rc, addrs] = run({"ip", "-4", "-o", "addr", "show"});
  ASSERT_EQ(rc, 0) << addrs;
  EXPECT_EQ(addrs.find(" " + subnet() + "."), std::string::npos)
      << "an interface of the root namespace is on " << subnet() << ".0/24:\n"
      << addrs;
}

TEST_F(NetnsHosts, SweepSubmittedOnHostBIsEvaluatedByRunnersOnHostsBAndCAndCountsEachResultOnce) {
  const fs::path out = dir_ / "out";
  const testing::AtrexCli b = on("b");
  auto [rc, text] = b({"sweep", "submit", (dir_ / "fx" / "crash_sweep.yaml").string(), "--redis",
                       url_, "--out", out.string(), "--launcher", "local", "--runners", "1",
                       "--agent-workers", "1", "--lease-timeout", "4"});
  ASSERT_EQ(rc, 0) << text;
  const Json m = *read_json_file(out / "manifest.json");
  EXPECT_EQ(m.value("redis_url", ""), url_);
  const std::string sweep_id = m.value("sweep_id", "");
  pid_t runner_b = 0;
  for (const auto& w : m["workers"]["processes"]) {
    if (w["name"] == "runner-0") runner_b = w["pid"].get<pid_t>();
  }
  ASSERT_GT(runner_b, 0) << m["workers"].dump();

  // Host b's runner is the sweep's only runner until it has finished an evaluation...
  ASSERT_TRUE(b.poll(
      out, [](const Json& s) { return s["eval_queue"]["acked_total"].get<int>() >= 1; }, 120))
      << b.status(out).dump();
  // ...then leaves (SIGTERM: it finishes the shape in progress and gives its task back).
  ASSERT_EQ(::kill(runner_b, SIGTERM), 0);
  ASSERT_TRUE(poll([&] { return ::kill(runner_b, 0) != 0; }, 60s))
      << "runner-0 on host b did not stop";
  const int acked_on_b = b.status(out)["eval_queue"]["acked_total"].get<int>();
  ASSERT_GE(acked_on_b, 1);
  RecordProperty("evaluations_by_runner_on_b", acked_on_b);

  // A runner on host c finishes the sweep.
  runner_c_ = std::make_unique<Daemon>();
  ASSERT_EQ(runner_c_->start({"ip", "netns", "exec", host("c"), "env",
                              "ATREX_CACHE_DIR=" + b.cache_dir().string(),
                              std::string(ATREX_TEST_BIN_DIR) + "/atrex", "runner", "--redis", url_,
                              "--sweep", sweep_id, "--name", "runner-c"},
                             dir_ / "runner-c.log"),
            "");
  // Redis sees its clients come from b (the agent worker) and c (the runner), from nowhere else.
  std::multiset<std::string> peers;
  EXPECT_TRUE(poll(
      [&] {
        peers = client_addresses();
        return peers.count(address(2)) > 0 && peers.count(address(3)) > 0;
      },
      30s));
  for (const auto& p : peers)
    EXPECT_EQ(p.rfind(subnet() + ".", 0), 0u) << "a client of Redis at " << p;

  testing::expect_complete_and_counted_once(b, out);
  const Json s = b.status(out);
  RecordProperty("evaluations_by_runner_on_c",
                 s["eval_queue"]["acked_total"].get<int>() - acked_on_b);
  EXPECT_GT(s["eval_queue"]["acked_total"].get<int>(), acked_on_b)
      << "host c's runner, the only one after b's left, finished no evaluation: " << s.dump();
  EXPECT_EQ(s["eval_queue"]["dead"], 0) << s.dump();
  EXPECT_EQ(s["agent_queue"]["acked_total"], 1) << "the agent task, done on host b: " << s.dump();
  // Both runners are consumers of the sweep's evaluation queue, each under its own name.
  auto consumers = redis_on_a({"XINFO", "CONSUMERS", "atrex:{" + sweep_id + "}:q:{eval}", "atrex"});
  ASSERT_TRUE(consumers) << consumers.error().message;
  std::set<std::string> names;
  for (const auto& c : consumers->elements) {
    for (size_t i = 0; i + 1 < c.elements.size(); i += 2) {
      if (c.elements[i].str == "name") names.insert(c.elements[i + 1].str);
    }
  }
  EXPECT_EQ(names, (std::set<std::string>{"runner-0", "runner-c"}));
  // Host c's runner stops cleanly on SIGTERM, as a launcher would stop it.
  const int status = runner_c_->stop(30s);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "wait status " << status << "; see " << (dir_ / "runner-c.log");
}

}  // namespace
}  // namespace atrex
