// `atrex bench …`: benchmarks that print their figures (docs/architecture.md §8: speed targets are
// met in benchmarks, not in timed unit tests). `atrex bench queue`: no-op tasks through one
// Redis with 1…256 simulated runners.
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "atrex/common/redis/local_server.h"
#include "atrex/common/redis/connection.h"
#include "atrex/common/redis/queue.h"
#include "bench_queue.h"
#include "cli.h"

namespace atrex::cli {

namespace {

using Clock = std::chrono::steady_clock;

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
      .count();
}

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t k =
      std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

PhaseResult run_phase(const RedisEndpoint& redis, const std::string& stream, int runners,
                      int threads, int batch, double seconds, double rate, int64_t max_length) {
  PhaseResult res;
  res.runners = runners;
  res.threads = threads;
  res.offered_per_s = rate;
  QueueOptions qo;
  qo.lease_timeout = std::chrono::milliseconds(30'000);
  qo.max_length = max_length;
  auto producer_q = RedisQueue::open(redis, qo, "atrex-bench");
  auto consumer_q = RedisQueue::open(redis, qo, "atrex-bench");
  if (!producer_q || !consumer_q) {
    res.error = (!producer_q ? producer_q.error() : consumer_q.error()).message;
    return res;
  }
  std::atomic<bool> stop{false}, counting{false};
  std::atomic<int64_t> completed{0}, refusals{0};
  std::mutex err_mu;
  std::string first_error;
  auto note_error = [&](const std::string& e) {
    std::lock_guard lock(err_mu);
    if (first_error.empty()) first_error = e;
    stop = true;
  };

  std::thread producer([&] {
    const auto t0 = Clock::now();
    int64_t sent = 0;
    std::vector<Json> bodies;
    while (!stop) {
      size_t n = static_cast<size_t>(batch);
      if (rate > 0) {
        // Paced: small batches every ~0.5 ms so the stamp is close to each task's due time.
        const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
        const auto due = static_cast<int64_t>(elapsed * rate);
        if (due <= sent) {
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          continue;
        }
        n = static_cast<size_t>(std::min<int64_t>(due - sent, batch));
      }
      bodies.clear();
      const int64_t t = now_us();
      for (size_t i = 0; i < n; ++i) bodies.push_back(Json{{"t", t}});
      auto ids = (*producer_q)->enqueue_batch(stream, bodies);
      if (!ids) {
        if (ids.error().code == ErrorCode::kUnavailable &&
            ids.error().message.find("full") != std::string::npos) {
          ++refusals;
          std::this_thread::sleep_for(std::chrono::microseconds(500));
          continue;
        }
        note_error("enqueue: " + ids.error().message);
        return;
      }
      sent += static_cast<int64_t>(n);
    }
  });

  std::vector<std::vector<double>> latencies(static_cast<size_t>(threads));
  std::vector<std::thread> workers;
  for (int w = 0; w < threads; ++w) {
    workers.emplace_back([&, w] {
      std::vector<std::string> mine;
      for (int r = w; r < runners; r += threads) mine.push_back(fmt::format("sim-runner-{}", r));
      auto& lat = latencies[static_cast<size_t>(w)];
      while (!stop) {
        bool any = false;
        for (const auto& consumer : mine) {
          auto got = (*consumer_q)
                         ->claim(stream, consumer, static_cast<size_t>(batch),
                                 std::chrono::milliseconds(0));
          if (!got) {
            note_error("claim: " + got.error().message);
            return;
          }
          if (got->empty()) continue;
          any = true;
          const int64_t t = now_us();
          const bool count = counting;
          if (count) {
            for (const auto& l : *got)
              lat.push_back(static_cast<double>(t - l.body.value("t", t)) / 1000.0);
          }
          auto acked = (*consumer_q)->ack_batch(*got);
          if (!acked) {
            note_error("ack: " + acked.error().message);
            return;
          }
          if (count) completed += static_cast<int64_t>(*acked);
        }
        if (!any) std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds / 4));
  counting = true;
  const auto c0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  counting = false;
  const double window = std::chrono::duration<double>(Clock::now() - c0).count();
  stop = true;
  producer.join();
  for (auto& t : workers) t.join();

  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  res.completed = completed.load();
  res.tasks_per_s = static_cast<double>(res.completed) / window;
  res.p50_ms = percentile(all, 0.50);
  res.p99_ms = percentile(all, 0.99);
  res.full_refusals = refusals.load();
  res.error = first_error;
  // Leave nothing behind in a shared Redis.
  if (auto c = RedisConnection::connect(redis)) {
    for (const char* kind : {"q", "cnt", "err", "dlq"}) {
      // Best effort: a benchmark key left behind is harmless (they expire with the server).
      (void)(*c)->command({"DEL", fmt::format("atrex-bench:{}:{{{}}}", kind, stream)});
    }
  }
  return res;
}

namespace {

struct QueueBenchArgs {
  std::string redis_url;  // empty: a private redis-server
  std::string runners = "1,2,4,8,16,32,64,128,256";
  double seconds = 3.0;
  int batch = 64;
  int threads = 0;  // 0: hardware threads
  int64_t max_length = 100000;
  bool skip_redis_benchmark = false;
};

// `redis-benchmark` on the same server for the commands the queue uses, pipelined (-P 64) like
// our batches and unpipelined; "" when the tool is missing.
std::vector<std::pair<std::string, double>> raw_redis_rates(const RedisEndpoint& redis) {
  std::vector<std::pair<std::string, double>> out;
  struct Case {
    std::string label;
    std::string args;
  };
  const std::vector<Case> cases = {
      {"XADD (no pipelining)", "-P 1 XADD atrex-bench:raw '*' body x"},
      {"XADD (-P 64)", "-P 64 XADD atrex-bench:raw '*' body x"},
      {"XLEN (no pipelining; one round trip)", "-P 1 XLEN atrex-bench:raw"},
      {"EVALSHA-sized Lua call: EVAL return 1 (-P 1)", "-P 1 EVAL 'return 1' 0"},
  };
  for (const auto& c : cases) {
    const std::string cmd =
        fmt::format("redis-benchmark -h {} -p {} -n 100000 -c 8 -q {} 2>/dev/null", redis.host,
                    redis.port, c.args);
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) continue;
    std::string text;
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) text += buf;
    const int status = ::pclose(p);
    if (status != 0 && text.empty()) return {};
    // "XADD atrex-bench:raw * body x: 123456.79 requests per second, p50=0.111 msec"
    const auto rps = text.rfind(" requests per second");
    if (rps == std::string::npos) continue;
    const auto colon = text.rfind(": ", rps);
    if (colon == std::string::npos) continue;
    out.emplace_back(c.label, std::strtod(text.c_str() + colon + 2, nullptr));
  }
  // Best effort, as above: the redis-benchmark key is harmless if it stays.
  if (auto c = RedisConnection::connect(redis)) (void)(*c)->command({"DEL", "atrex-bench:raw"});
  return out;
}

int run_bench_queue(const GlobalOptions& g, const QueueBenchArgs& a) {
  std::vector<int> counts;
  {
    std::string cur;
    for (size_t i = 0; i <= a.runners.size(); ++i) {
      if (i == a.runners.size() || a.runners[i] == ',') {
        char* end = nullptr;
        const long v = std::strtol(cur.c_str(), &end, 10);
        if (cur.empty() || !end || *end != '\0' || v < 1 || v > 100000) {
          return fail(Error{
              ErrorCode::kInvalidInput,
              fmt::format("--runners: expected comma-separated counts in 1..100000; got \"{}\"",
                          cur)});
        }
        counts.push_back(static_cast<int>(v));
        cur.clear();
      } else {
        cur += a.runners[i];
      }
    }
  }
  if (a.batch < 1 || a.seconds <= 0) {
    return fail(Error{ErrorCode::kInvalidInput, "--batch must be >= 1 and --seconds > 0"});
  }
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
    redis = *o;
  }
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int max_threads = a.threads > 0 ? a.threads : hw;
  const std::string where =
      own ? fmt::format("private redis-server on 127.0.0.1:{} (appendonly yes)", redis.port)
          : fmt::format("{}:{}", redis.host, redis.port);
  if (!g.json) {
    fmt::print(
        "atrex bench queue: no-op tasks through one Redis ({}), claim/ack batches of {}, {:.1f} s "
        "per point, "
        "{} hardware threads\n",
        where, a.batch, a.seconds, hw);
    fmt::print("{:>8} {:>8} {:>12} {:>10} {:>10} {:>10}\n", "runners", "threads", "tasks/s",
               "p50 ms", "p99 ms", "refused");
  }
  std::vector<PhaseResult> sat;
  const std::string base = fmt::format("bench-{}", ::getpid());
  for (int n : counts) {
    const int threads = std::min(n, max_threads);
    auto r = run_phase(redis, fmt::format("{}-{}", base, n), n, threads, a.batch, a.seconds, 0,
                       a.max_length);
    if (!r.error.empty()) return fail(Error{ErrorCode::kUnavailable, "bench queue: " + r.error});
    if (!g.json) {
      fmt::print("{:>8} {:>8} {:>12.0f} {:>10.2f} {:>10.2f} {:>10}\n", r.runners, r.threads,
                 r.tasks_per_s, r.p50_ms, r.p99_ms, r.full_refusals);
      std::fflush(stdout);
    }
    sat.push_back(r);
  }
  const auto peak = *std::max_element(
      sat.begin(), sat.end(),
      [](const PhaseResult& x, const PhaseResult& y) { return x.tasks_per_s < y.tasks_per_s; });
  // Latency at half the peak rate: the queue is not the bottleneck, so this is the latency a
  // runner sees in a healthy sweep.
  auto half = run_phase(redis, base + "-half", peak.runners, peak.threads, a.batch, a.seconds,
                        peak.tasks_per_s / 2, a.max_length);
  if (!half.error.empty())
    return fail(Error{ErrorCode::kUnavailable, "bench queue: " + half.error});
  auto raw = a.skip_redis_benchmark ? std::vector<std::pair<std::string, double>>{}
                                    : raw_redis_rates(redis);
  if (g.json) {
    Json points = Json::array();
    for (const auto& r : sat) {
      points.push_back(Json{{"runners", r.runners},
                            {"threads", r.threads},
                            {"tasks_per_s", r.tasks_per_s},
                            {"p50_ms", r.p50_ms},
                            {"p99_ms", r.p99_ms},
                            {"refused_batches", r.full_refusals}});
    }
    Json rawj = Json::object();
    for (const auto& [k, v] : raw) rawj[k] = v;
    fmt::print("{}\n", Json{{"schema", "atrex.bench-queue/1"},
                            {"redis", where},
                            {"batch", a.batch},
                            {"seconds", a.seconds},
                            {"saturated", points},
                            {"half_peak",
                             {{"runners", half.runners},
                              {"offered_per_s", half.offered_per_s},
                              {"tasks_per_s", half.tasks_per_s},
                              {"p50_ms", half.p50_ms},
                              {"p99_ms", half.p99_ms}}},
                            {"redis_benchmark_rps", rawj}}
                           .dump(2));
    return 0;
  }
  fmt::print("peak: {:.0f} tasks/s with {} runners\n", peak.tasks_per_s, peak.runners);
  fmt::print(
      "at half the peak ({:.0f} tasks/s offered, {} runners): {:.0f} tasks/s, enqueue->start p50 "
      "{:.2f} ms, "
      "p99 {:.2f} ms\n",
      half.offered_per_s, half.runners, half.tasks_per_s, half.p50_ms, half.p99_ms);
  if (raw.empty()) {
    fmt::print("redis-benchmark: not run (missing, or --no-redis-benchmark)\n");
  } else {
    fmt::print("redis-benchmark on the same server (-c 8, 100000 requests):\n");
    for (const auto& [k, v] : raw) fmt::print("  {:<48} {:>12.0f} requests/s\n", k, v);
  }
  return 0;
}

}  // namespace

void add_bench_commands(CLI::App& app, GlobalOptions& g, int& rc) {
  auto* bench = app.add_subcommand(
      "bench", "Benchmarks that print their figures (run them on a quiet machine)");
  bench->require_subcommand(1);
  static QueueBenchArgs q;
  auto* qc = bench->add_subcommand("queue",
                                   "No-op tasks through one Redis (Streams queue, batched "
                                   "claims/acks) with 1…256 simulated runners: "
                                   "tasks/s and enqueue->start latency per runner count, latency "
                                   "at half the peak rate, and the raw "
                                   "redis-benchmark rate of the same server");
  qc->add_option("--redis", q.redis_url,
                 "redis://host:port of the server to measure; default: a private redis-server");
  qc->add_option("--runners", q.runners, "Comma-separated simulated runner counts")
      ->capture_default_str();
  qc->add_option("--seconds", q.seconds,
                 "Measured seconds per point (after a quarter of it as warm-up)")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  qc->add_option("--batch", q.batch, "Tasks per enqueue / claim / ack call")->capture_default_str();
  qc->add_option("--threads", q.threads,
                 "Threads the simulated runners share (0: hardware threads)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  qc->add_option("--max-length", q.max_length, "Queue bound (backpressure) during the run")
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000'000}))
      ->capture_default_str();
  qc->add_flag("--no-redis-benchmark", q.skip_redis_benchmark,
               "Do not run redis-benchmark for comparison");
  qc->add_flag("--json", g.json, "Machine-readable output (atrex.bench-queue/1)");
  qc->callback([&] { rc = run_bench_queue(g, q); });
  add_bench_connections_command(*bench, rc);
  add_gpu_bench_commands(*bench, g, rc);
  add_bench_reduce_command(*bench, g, rc);
}

}  // namespace atrex::cli
