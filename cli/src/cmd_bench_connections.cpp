// `atrex bench connections`: how many idle workers one Redis holds, and what they cost the
// queue (docs/benchmarks.md, capacity model). Every idle worker parks a blocking XREADGROUP on a
// connection of its own (a blocking read never shares its connection), so connections, not
// commands, are the first limit of a large fleet: Redis refuses client maxclients + 1 with
// "-ERR max number of clients reached" (Redis docs, "Redis client handling").
#include <poll.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include "atrex/common/redis/local_server.h"
#include "atrex/common/redis/connection.h"
#include "bench_queue.h"
#include "cli.h"

namespace atrex::cli {
namespace {

struct ConnectionsBenchArgs {
  std::string redis_url;  // empty: a private redis-server
  std::string counts = "0,1000,4000,8000,9900,12000";
  int runners = 64;
  int batch = 64;
  double seconds = 2.0;
  double rate = 0;  // tasks/s offered for the latency column; 0 = half the peak with no idle worker
};

constexpr const char* kIdleStream = "atrex-bench-idle:{idle}";

// Parked idle workers: one hiredis context each, its XREADGROUP ... BLOCK 0 sent and unanswered.
class ParkedClients {
 public:
  explicit ParkedClients(RedisEndpoint redis) : redis_(std::move(redis)) {}
  ~ParkedClients() {
    for (redisContext* c : live_) redisFree(c);
  }
  ParkedClients(const ParkedClients&) = delete;
  ParkedClients& operator=(const ParkedClients&) = delete;

  // Opens connections until `target` have been attempted in all.
  void grow_to(int target) {
    const timeval tv{2, 0};
    while (attempted_ < target) {
      const int i = attempted_++;
      redisContext* c = redisConnectWithTimeout(redis_.host.c_str(), redis_.port, tv);
      if (!c || c->err) {
        note_refusal(c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        continue;
      }
      if (!redis_.password.empty()) {
        if (redis_.user.empty()) {
          redisAppendCommand(c, "AUTH %s", redis_.password.c_str());
        } else {
          redisAppendCommand(c, "AUTH %s %s", redis_.user.c_str(), redis_.password.c_str());
        }
      }
      const std::string consumer = fmt::format("idle-worker-{}", i);
      redisAppendCommand(c, "XREADGROUP GROUP idle %s COUNT 1 BLOCK 0 STREAMS %s >",
                         consumer.c_str(), kIdleStream);
      int done = 0;
      while (!done) {
        if (redisBufferWrite(c, &done) != REDIS_OK) break;
      }
      if (!done) {
        note_refusal(c->errstr);
        redisFree(c);
        continue;
      }
      live_.push_back(c);
    }
  }

  // A refused connection is answered and closed by the server; a parked one has nothing to read
  // (its AUTH +OK aside). Drops the refused ones.
  void settle() {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::vector<redisContext*> keep;
    for (redisContext* c : live_) {
      pollfd p{c->fd, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) {
        keep.push_back(c);
        continue;
      }
      std::string error;
      if (redisBufferRead(c) != REDIS_OK)
        error = c->errstr[0] ? c->errstr : "connection closed by the server";
      void* reply = nullptr;
      while (error.empty() && redisGetReplyFromReader(c, &reply) == REDIS_OK && reply) {
        auto* r = static_cast<redisReply*>(reply);
        if (r->type == REDIS_REPLY_ERROR) error = std::string(r->str, r->len);
        freeReplyObject(reply);
        reply = nullptr;
      }
      if (error.empty()) {
        keep.push_back(c);
      } else {
        note_refusal(error);
        redisFree(c);
      }
    }
    live_ = std::move(keep);
  }

  int attempted() const { return attempted_; }
  int parked() const { return static_cast<int>(live_.size()); }
  int refused() const { return refused_; }
  const std::string& first_refusal() const { return first_refusal_; }

 private:
  void note_refusal(const std::string& why) {
    ++refused_;
    if (first_refusal_.empty()) first_refusal_ = why;
  }

  RedisEndpoint redis_;
  std::vector<redisContext*> live_;
  int attempted_ = 0;
  int refused_ = 0;
  std::string first_refusal_;
};

// "name:value" of an INFO reply, as a number (-1 when absent).
double info_field(const std::string& info, const std::string& name) {
  const auto at = info.find("\n" + name + ":");
  if (at == std::string::npos) return -1;
  return std::strtod(info.c_str() + at + name.size() + 2, nullptr);
}

std::vector<int> parse_counts(const std::string& text) {
  std::vector<int> out;
  std::string cur;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == ',') {
      char* end = nullptr;
      const long v = std::strtol(cur.c_str(), &end, 10);
      if (cur.empty() || !end || *end != '\0' || v < 0 || v > 200000) return {};
      out.push_back(static_cast<int>(v));
      cur.clear();
    } else {
      cur += text[i];
    }
  }
  return std::is_sorted(out.begin(), out.end()) ? out : std::vector<int>{};
}

// The most file descriptors this process (and a private redis-server it starts) may open.
rlim_t raise_fd_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 0;
  lim.rlim_cur = lim.rlim_max;
  (void)::setrlimit(RLIMIT_NOFILE, &lim);
  ::getrlimit(RLIMIT_NOFILE, &lim);
  return lim.rlim_cur;
}

int run_bench_connections(const ConnectionsBenchArgs& a) {
  const std::vector<int> counts = parse_counts(a.counts);
  if (counts.empty()) {
    return fail(Error{
        ErrorCode::kInvalidInput,
        fmt::format("--counts: expected increasing comma-separated counts in 0..200000; got \"{}\"",
                    a.counts)});
  }
  if (a.runners < 1 || a.batch < 1 || a.seconds <= 0 || a.rate < 0) {
    return fail(Error{ErrorCode::kInvalidInput,
                      "--runners and --batch must be >= 1, --seconds > 0, --rate >= 0"});
  }
  const rlim_t fds = raise_fd_limit();
  std::unique_ptr<LocalRedisServer> own;
  RedisEndpoint redis;
  if (a.redis_url.empty()) {
    auto s = LocalRedisServer::start();
    if (!s) return fail(s.error());
    own = std::move(*s);
    redis = own->options();
  } else {
    auto o = parse_redis_url(a.redis_url);
    if (!o) return fail(o.error());
    if (o->tls) {
      // Thousands of parked TLS sessions would each need a relay thread here: measure the server
      // through its plain port.
      return fail(
          invalid_input(
              fmt::format(
                  "--redis rediss://{}:{}: bench connections parks plain hiredis connections; give "
                  "the server's plain redis:// port",
                  o->host, o->port))
              .value());
    }
    redis = *o;
  }
  auto admin = RedisConnection::connect(redis);
  if (!admin) return fail(admin.error());
  // A stream left by an earlier run may or may not exist: DEL's answer does not matter.
  (void)(*admin)->command({"DEL", kIdleStream});
  if (auto r = (*admin)->command({"XGROUP", "CREATE", kIdleStream, "idle", "$", "MKSTREAM"}); !r)
    return fail(r.error());
  std::string maxclients = "?";
  if (auto r = (*admin)->command({"CONFIG", "GET", "maxclients"}); r && r->elements.size() == 2) {
    maxclients = r->elements[1].str;
  }
  auto info = [&]() -> std::string {
    auto r = (*admin)->command({"INFO", "everything"});
    return r ? r->str : std::string();
  };
  const int threads = static_cast<int>(std::min<unsigned>(
      static_cast<unsigned>(a.runners), std::max(1u, std::thread::hardware_concurrency())));
  fmt::print(
      "atrex bench connections: idle workers (one blocked XREADGROUP connection each) parked on {} "
      "({}), "
      "maxclients {}, this process may open {} files; queue measured with {} simulated runners on "
      "{} "
      "threads, {:.1f} s per point\n",
      own ? "a private redis-server" : fmt::format("{}:{}", redis.host, redis.port),
      own ? "appendonly yes" : "its own settings", maxclients, fds, a.runners, threads, a.seconds);
  fmt::print("{:>8} {:>8} {:>8} {:>9} {:>9} {:>11} {:>10} {:>12} {:>9} {:>9}\n", "idle", "parked",
             "refused", "clients", "blocked", "RSS KiB/c", "redis RSS", "tasks/s", "p50 ms",
             "p99 ms");
  ParkedClients parked(redis);
  const double rss0 = info_field(info(), "used_memory_rss");
  double rate = a.rate;
  const std::string base = fmt::format("bench-conn-{}", ::getpid());
  for (int n : counts) {
    parked.grow_to(n);
    parked.settle();
    const std::string i = info();
    const double rss = info_field(i, "used_memory_rss");
    const double per_client = parked.parked() > 0 ? (rss - rss0) / parked.parked() / 1024.0 : 0.0;
    const PhaseResult sat = run_phase(redis, fmt::format("{}-{}", base, n), a.runners, threads,
                                      a.batch, a.seconds, 0, 100000);
    if (rate <= 0 && sat.error.empty()) rate = sat.tasks_per_s / 2;
    const PhaseResult paced = sat.error.empty()
                                  ? run_phase(redis, fmt::format("{}-{}-paced", base, n), a.runners,
                                              threads, a.batch, a.seconds, rate, 100000)
                                  : sat;
    fmt::print("{:>8} {:>8} {:>8} {:>9.0f} {:>9.0f} {:>11.1f} {:>9.0f}M ", n, parked.parked(),
               parked.refused(), info_field(i, "connected_clients"),
               info_field(i, "blocked_clients"), per_client, rss / 1048576.0);
    if (!sat.error.empty()) {
      fmt::print("the queue's own connections failed: {}\n", sat.error);
    } else {
      fmt::print("{:>12.0f} {:>9.2f} {:>9.2f}\n", sat.tasks_per_s, paced.p50_ms, paced.p99_ms);
    }
    std::fflush(stdout);
  }
  fmt::print("tasks/s: saturated; p50/p99: enqueue->start latency at {:.0f} tasks/s offered\n",
             rate);
  if (!parked.first_refusal().empty()) fmt::print("first refusal: {}\n", parked.first_refusal());
  (void)(*admin)->command({"DEL", kIdleStream});  // best effort cleanup; the figures are printed
  return 0;
}

}  // namespace

void add_bench_connections_command(CLI::App& bench, int& rc) {
  static ConnectionsBenchArgs c;
  auto* cc = bench.add_subcommand(
      "connections",
      "Idle workers parked on one Redis (a blocked XREADGROUP connection each), counts up to past "
      "maxclients: connections held or refused, Redis memory per client, and the queue's tasks/s "
      "and enqueue->start latency with them parked");
  cc->add_option("--redis", c.redis_url,
                 "redis://host:port of the server to measure; default: a private redis-server");
  cc->add_option("--counts", c.counts, "Increasing comma-separated idle-worker counts")
      ->capture_default_str();
  cc->add_option("--runners", c.runners, "Simulated runners moving tasks at each point")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cc->add_option("--batch", c.batch, "Tasks per enqueue / claim / ack call")->capture_default_str();
  cc->add_option("--seconds", c.seconds, "Measured seconds per point and mode")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cc->add_option("--rate", c.rate,
                 "Tasks/s offered for the latency column (0: half the peak with no idle worker)")
      ->check(CLI::Range(0.001, 1e6))
      ->capture_default_str();
  cc->callback([&] { rc = run_bench_connections(c); });
}

}  // namespace atrex::cli
