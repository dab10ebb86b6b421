#include "atrex/scheduler/lifecycle.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "atrex/common/clock.h"
#include "atrex/common/redis/sweep_store.h"
#include "atrex/common/wire/keys.h"
#include "atrex/scheduler/reconcile.h"
#include "atrex/scheduler/redis_shard.h"

namespace atrex::scheduler {
namespace fs = std::filesystem;

namespace {

class RedisHost final : public SweepHost {
 public:
  RedisHost(RedisEndpoint redis, SweepStore store)
      : redis_(std::move(redis)), store_(std::move(store)) {}
  TaskQueue& queue() override { return *store_.queue; }
  ResultStore& results() override { return *store_.results; }
  Result<void> publish(const Manifest& m) override { return publish_manifest(redis_, m); }

 private:
  RedisEndpoint redis_;
  SweepStore store_;
};

// A cluster sweep's manifest: one that names its Redis.
Result<Manifest> read_cluster_manifest(const fs::path& dir) {
  ATREX_ASSIGN_OR_RETURN(Manifest m, read_manifest_file(dir));
  if (!m.redis_url) {
    return invalid_input(
        fmt::format("{}: this sweep was not submitted to a cluster (no redis_url in its manifest)",
                    dir.string()));
  }
  return m;
}

struct Connected {
  RedisEndpoint redis;
  std::unique_ptr<SweepHost> host;
};

Result<Connected> connect(const Manifest& m, const ClusterEnv& env) {
  ATREX_ASSERT(m.redis_url.has_value(), "read_cluster_manifest checked it");
  ATREX_ASSIGN_OR_RETURN(RedisEndpoint redis, parse_redis_url(*m.redis_url));
  ATREX_ASSIGN_OR_RETURN(auto host, env.host(redis, m));
  return Connected{std::move(redis), std::move(host)};
}

ClusterOptions cluster_of(const Manifest& m) { return m.cluster.value_or(ClusterOptions{}); }

}  // namespace

ClusterEnv ClusterEnv::redis_and_launchers() {
  ClusterEnv env;
  env.host = [](const RedisEndpoint& redis,
                const Manifest& m) -> Result<std::unique_ptr<SweepHost>> {
    ATREX_ASSIGN_OR_RETURN(SweepStore store,
                           SweepStore::open(redis, m.sweep_id, queue_options(cluster_of(m))));
    return std::unique_ptr<SweepHost>(std::make_unique<RedisHost>(redis, std::move(store)));
  };
  env.launcher = make_launcher;
  return env;
}

Result<Manifest> submit_sweep(const ResolvedSweep& sweep, const SubmitOptions& options,
                              const ProgressFn& say, const ClusterEnv& env) {
  ATREX_ASSIGN_OR_RETURN(
      RedisEndpoint redis,
      choose_redis_endpoint(options.redis, options.redis_source, sweep.sweep_id(), sweep.output()));
  if (say && options.redis.size() > 1) {
    const auto& l = options.redis;
    const auto pos =
        std::find_if(l.begin(), l.end(),
                     [&](const RedisEndpoint& e) { return e.instance() == redis.instance(); }) -
        l.begin();
    say(fmt::format("sweep {}: Redis {} (entry {} of the {} listed; the manifest keeps it there)",
                    sweep.sweep_id(), redis.redacted(), pos + 1, l.size()));
  }
  // Connect first: a Redis that cannot be reached (or refuses the TLS handshake) leaves nothing
  // written.
  ATREX_ASSIGN_OR_RETURN(auto host, env.host(redis, sweep.manifest));
  ATREX_ASSIGN_OR_RETURN(Manifest manifest, open_results_dir(sweep.manifest, [&](Manifest& m) {
                           m.status = SweepStatus::kSubmitted;
                           m.redis_url = redis.to_url();
                           m.redis = redis.redacted();
                           m.cluster = options.cluster;
                           m.submitted_at = utc_timestamp_now();
                         }));
  ATREX_TRY(host->publish(manifest));
  ATREX_ASSIGN_OR_RETURN(int n, enqueue_missing(manifest, host->queue(), host->results(), say));
  if (say) {
    say(fmt::format("sweep {} ({}): {} agent task(s) queued in {}", manifest.name,
                    manifest.sweep_id, n, redis.redacted()));
  }
  auto launcher = env.launcher(options.cluster.launcher);
  auto workers = launcher->launch(manifest, options.cluster, redis, say);
  if (!workers) {
    return tl::unexpected(with_context(
        workers.error(),
        fmt::format("sweep {}: tasks are queued but no workers started (fix that, then `atrex "
                    "sweep resume {}`)",
                    manifest.sweep_id, manifest.output)));
  }
  return update_manifest(manifest.output, [&](Manifest& m) {
    m.status = SweepStatus::kRunning;
    m.workers = *workers;
  });
}

Result<SweepProgress> sweep_status(const fs::path& dir, const ClusterEnv& env) {
  SweepProgress st;
  ATREX_ASSIGN_OR_RETURN(st.manifest, read_cluster_manifest(dir));
  ATREX_ASSIGN_OR_RETURN(Connected c, connect(st.manifest, env));
  st.total = static_cast<int>(st.manifest.agents.size() * st.manifest.operators.size());
  std::set<std::string> seen;
  ATREX_ASSIGN_OR_RETURN(st.done, count_finals(st.manifest, c.host->results(), seen, nullptr));
  ATREX_ASSIGN_OR_RETURN(st.eval, c.host->queue().stats(kEvalStream));
  ATREX_ASSIGN_OR_RETURN(st.agent, c.host->queue().stats(kAgentStream));
  ATREX_ASSIGN_OR_RETURN(st.dead_letters, all_dead_letters(c.host->queue()));
  if (st.manifest.workers) {
    auto alive = env.launcher(st.manifest.workers->launcher)->alive(*st.manifest.workers);
    st.workers_alive = alive.first;
    st.workers_text = alive.second;
  } else {
    st.workers_text = "no workers recorded";
  }
  return st;
}

Result<SweepOutcome> wait_sweep(const fs::path& dir, std::chrono::seconds timeout,
                                const ProgressFn& say, const std::atomic<bool>* stop,
                                metrics::SweepMetrics* sm, const ClusterEnv& env,
                                const std::function<void(int done, int total)>& counts) {
  ATREX_ASSIGN_OR_RETURN(Manifest m, read_cluster_manifest(dir));
  ATREX_ASSIGN_OR_RETURN(Connected c, connect(m, env));
  ATREX_ASSIGN_OR_RETURN(problems::Suite suite, problems::load_suite_or_bundled(m.suite));
  FollowOptions fo;
  fo.suite = &suite;
  fo.deadline = std::chrono::steady_clock::now() + timeout;
  fo.stop = stop;
  fo.metrics = sm;
  fo.say = say;
  fo.on_poll = counts;
  ATREX_ASSIGN_OR_RETURN(FollowResult followed,
                         follow_sweep(m, c.host->queue(), c.host->results(), fo));
  if (followed.end != FollowEnd::kDone) {
    return make_error(ErrorCode::kTimeout,
                      fmt::format("sweep {}: {}/{} operators done; still running", m.sweep_id,
                                  followed.done, followed.total));
  }
  // Keep a copy of every record next to the manifest, then score.
  ATREX_ASSIGN_OR_RETURN(auto entries, c.host->results().entries());
  ATREX_ASSIGN_OR_RETURN(auto local, MemoryResultStore::open_jsonl(dir / "results.jsonl"));
  for (const auto& [key, record] : entries) ATREX_TRY(local->put(key, record));
  m.output = dir.string();
  ATREX_ASSIGN_OR_RETURN(SweepOutcome out,
                         finish_sweep(m, *local, &c.host->queue(), suite, sm, say));
  // Nothing is left to do: the sweep's workers stop (they serve this sweep only).
  if (m.workers) ATREX_TRY(env.launcher(m.workers->launcher)->stop(*m.workers));
  ATREX_TRY(update_manifest(dir, [](Manifest& mf) {
    mf.status = SweepStatus::kComplete;
    mf.finished_at = utc_timestamp_now();
  }));
  return out;
}

Result<void> cancel_sweep(const fs::path& dir, const ClusterEnv& env) {
  ATREX_ASSIGN_OR_RETURN(Manifest m, read_cluster_manifest(dir));
  if (m.workers) ATREX_TRY(env.launcher(m.workers->launcher)->stop(*m.workers));
  ATREX_TRY(update_manifest(dir, [](Manifest& mf) {
    mf.status = SweepStatus::kCancelled;
    mf.cancelled_at = utc_timestamp_now();
  }));
  return ok();
}

Result<Manifest> resume_sweep(const fs::path& dir, const ProgressFn& say, const ClusterEnv& env) {
  ATREX_ASSIGN_OR_RETURN(Manifest m, read_cluster_manifest(dir));
  ATREX_ASSIGN_OR_RETURN(Connected c, connect(m, env));
  // A Redis that lost the sweep (restarted without persistence) learns it again.
  ATREX_TRY(c.host->publish(m));
  ATREX_ASSIGN_OR_RETURN(int n, enqueue_missing(m, c.host->queue(), c.host->results(), say));
  if (say) say(fmt::format("sweep {}: {} agent task(s) re-enqueued", m.sweep_id, n));
  const ClusterOptions o = cluster_of(m);
  ATREX_ASSIGN_OR_RETURN(WorkersRecord workers,
                         env.launcher(o.launcher)->revive(m, o, c.redis, say));
  return update_manifest(dir, [&](Manifest& mf) {
    mf.status = SweepStatus::kRunning;
    mf.workers = workers;
    mf.resumed_at = utc_timestamp_now();
  });
}

}  // namespace atrex::scheduler
