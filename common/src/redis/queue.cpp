#include "atrex/common/redis/queue.h"

#include <map>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "atrex/common/hash.h"
#include "queue_scripts.h"

namespace atrex {
namespace {

using namespace redis_queue_scripts;  // kEnqueue, kReclaim, ...

constexpr const char* kGroup = "atrex";

// A Lua script sent by its SHA-1 (EVALSHA), and in full (EVAL, which also caches it on the
// server) only when the server answers NOSCRIPT: after a restart or SCRIPT FLUSH.
struct Script {
  explicit Script(std::string t) : text(std::move(t)), sha(sha1_hex(text)) {}
  std::string text;
  std::string sha;
};

Result<RedisValue> run_script(RedisConnection& conn, const Script& script,
                              const std::vector<std::string>& keys,
                              const std::vector<std::string>& args) {
  std::vector<std::string> cmd = {"EVALSHA", script.sha, std::to_string(keys.size())};
  cmd.insert(cmd.end(), keys.begin(), keys.end());
  cmd.insert(cmd.end(), args.begin(), args.end());
  auto v = conn.command(cmd);
  if (v || v.error().message.find("NOSCRIPT") == std::string::npos) return v;
  cmd[0] = "EVAL";
  cmd[1] = script.text;
  return conn.command(cmd);
}

Result<int64_t> eval(RedisPool& pool, const Script& script, const std::vector<std::string>& keys,
                     const std::vector<std::string>& args) {
  ATREX_ASSIGN_OR_RETURN(auto conn, pool.acquire());
  ATREX_ASSIGN_OR_RETURN(RedisValue v, run_script(*conn, script, keys, args));
  return v.integer;
}

const Script& enqueue_script() {
  static const Script s(kEnqueue);
  return s;
}
const Script& reclaim_script() {
  static const Script s(kReclaim);
  return s;
}
const Script& state_script() {
  static const Script s(kState);
  return s;
}
const Script& in_flight_script() {
  static const Script s(kInFlight);
  return s;
}
const Script& requeue_lost_script() {
  static const Script s(kRequeueLost);
  return s;
}
const Script& ack_script() {
  static const Script s(std::string(kOwnerCheck) + kAckTail);
  return s;
}
const Script& ack_batch_script() {
  static const Script s(kAckBatch);
  return s;
}
const Script& renew_script() {
  static const Script s(std::string(kOwnerCheck) + kRenewTail);
  return s;
}
const Script& release_script() {
  static const Script s(std::string(kOwnerCheck) + kReleaseTail);
  return s;
}

Result<Json> parse_body(const std::string& text, const std::string& where) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    return invalid_input(fmt::format("{}: message body is not JSON: {}", where, e.what()));
  }
}

}  // namespace

Result<std::unique_ptr<RedisQueue>> RedisQueue::open(const RedisEndpoint& redis,
                                                     QueueOptions options, std::string prefix) {
  std::unique_ptr<RedisQueue> q(new RedisQueue(redis, options, std::move(prefix)));
  ATREX_ASSIGN_OR_RETURN(auto conn, q->pool_.acquire());
  // Checked (and warned about) once per server and process.
  static std::mutex checked_mu;
  static std::set<std::string> checked;
  {
    std::lock_guard lock(checked_mu);
    if (!checked.insert(fmt::format("{}:{}/{}", redis.host, redis.port, redis.db)).second) return q;
  }
  for (const auto& [name, want] :
       {std::pair<std::string, std::string>{"appendonly", "yes"},
        std::pair<std::string, std::string>{"maxmemory-policy", "noeviction"}}) {
    auto v = conn->command({"CONFIG", "GET", name});
    if (!v) {
      spdlog::warn("redis {}:{}: cannot read {} ({}); make sure it is `{}`", redis.host, redis.port,
                   name, v.error().message, want);
    } else if (v->elements.size() < 2 || v->elements[1].str != want) {
      spdlog::warn(
          "!!! redis {}:{} runs with {} = {}: set it to `{}` or a restart/eviction can LOSE QUEUED "
          "TASKS !!!",
          redis.host, redis.port, name, v->elements.size() > 1 ? v->elements[1].str : "?", want);
    }
  }
  return q;
}

std::string RedisQueue::key(std::string_view kind, std::string_view stream) const {
  return fmt::format("{}:{}:{{{}}}", prefix_, kind, stream);
}

Result<void> RedisQueue::ensure_group(std::string_view stream) {
  {
    std::lock_guard lock(mu_);
    if (groups_.count(stream)) return ok();
  }
  ATREX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  auto r = conn->command({"XGROUP", "CREATE", key("q", stream), kGroup, "0", "MKSTREAM"});
  if (!r && r.error().message.find("BUSYGROUP") == std::string::npos)
    return tl::unexpected(r.error());
  std::lock_guard lock(mu_);
  groups_.insert(std::string(stream));
  return ok();
}

Result<std::string> RedisQueue::enqueue(std::string_view stream, const Json& body) {
  ATREX_ASSIGN_OR_RETURN(std::vector<std::string> ids, enqueue_batch(stream, {body}));
  return ids.front();
}

Result<std::vector<std::string>> RedisQueue::enqueue_batch(std::string_view stream,
                                                           const std::vector<Json>& bodies) {
  if (bodies.empty()) return std::vector<std::string>{};
  ATREX_TRY(ensure_group(stream));
  std::vector<std::string> args = {std::to_string(options_.max_length)};
  args.reserve(bodies.size() + 1);
  for (const auto& b : bodies) args.push_back(b.dump());
  ATREX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  ATREX_ASSIGN_OR_RETURN(RedisValue v, run_script(*conn, enqueue_script(),
                                                  {key("q", stream), key("cnt", stream)}, args));
  if (v.type == RedisValue::Type::kInteger) {
    return make_error(
        ErrorCode::kUnavailable,
        fmt::format("queue {} is full ({} messages + {} would pass max_length {}); retry later",
                    key("q", stream), -v.integer - 1, bodies.size(), options_.max_length));
  }
  std::vector<std::string> ids;
  ids.reserve(v.elements.size());
  for (auto& e : v.elements) ids.push_back(std::move(e.str));
  return ids;
}

Result<std::vector<Lease>> RedisQueue::reclaim(std::string_view stream, std::string_view consumer,
                                               size_t max_count) {
  ATREX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  ATREX_ASSIGN_OR_RETURN(
      RedisValue v,
      run_script(*conn, reclaim_script(),
                 {key("q", stream), key("dlq", stream), key("err", stream), key("cnt", stream)},
                 {kGroup, std::string(consumer), std::to_string(options_.lease_timeout.count()),
                  std::to_string(max_count), std::to_string(options_.max_deliveries)}));
  std::vector<Lease> out;
  for (const auto& e : v.elements) {
    if (e.elements.size() < 3) continue;
    ATREX_ASSIGN_OR_RETURN(
        Json body, parse_body(e.elements[1].str, key("q", stream) + " " + e.elements[0].str));
    out.push_back(Lease{std::string(stream), e.elements[0].str, std::move(body),
                        static_cast<int>(e.elements[2].integer), std::string(consumer)});
  }
  return out;
}

bool RedisQueue::reclaim_due(std::string_view stream) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  auto it = last_reclaim_.find(stream);
  if (it != last_reclaim_.end() && now - it->second < options_.lease_timeout / 10) return false;
  last_reclaim_[std::string(stream)] = now;
  return true;
}

Result<std::vector<Lease>> RedisQueue::claim(std::string_view stream, std::string_view consumer,
                                             size_t max_count, std::chrono::milliseconds block) {
  ATREX_TRY(ensure_group(stream));
  const auto deadline = std::chrono::steady_clock::now() + block;
  for (;;) {
    // Expired leases first. A busy consumer looks for them at most every lease_timeout / 10
    // (XAUTOCLAIM scans the pending list); an idle one on every call.
    std::vector<Lease> out;
    const bool reclaimed = reclaim_due(stream);
    if (reclaimed) {
      ATREX_ASSIGN_OR_RETURN(out, reclaim(stream, consumer, max_count));
    }
    if (out.size() < max_count) {
      // Block in short slices so leases that expire (or are released) meanwhile are seen too.
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      const auto slice = out.empty() ? std::clamp(left, std::chrono::milliseconds(0),
                                                  std::chrono::milliseconds(500))
                                     : std::chrono::milliseconds(0);
      std::vector<std::string> cmd = {"XREADGROUP", "GROUP",
                                      kGroup,       std::string(consumer),
                                      "COUNT",      std::to_string(max_count - out.size())};
      if (slice.count() > 0) {
        cmd.push_back("BLOCK");
        cmd.push_back(std::to_string(slice.count()));
      }
      cmd.insert(cmd.end(), {"STREAMS", key("q", stream), ">"});
      ATREX_ASSIGN_OR_RETURN(auto conn,
                             pool_.acquire());  // a blocking read holds its own connection
      ATREX_ASSIGN_OR_RETURN(RedisValue v, conn->command(cmd, slice + std::chrono::seconds(5)));
      for (const auto& s : v.elements) {
        if (s.elements.size() < 2) continue;
        for (const auto& entry : s.elements[1].elements) {
          if (entry.elements.size() < 2 || entry.elements[1].elements.size() < 2)
            continue;  // trimmed entry
          ATREX_ASSIGN_OR_RETURN(Json body,
                                 parse_body(entry.elements[1].elements[1].str, key("q", stream)));
          out.push_back(Lease{std::string(stream), entry.elements[0].str, std::move(body), 1,
                              std::string(consumer)});
        }
      }
    }
    if (!out.empty()) return out;
    if (!reclaimed) {
      // Nothing new: look for expired leases before answering "nothing".
      std::lock_guard lock(mu_);
      last_reclaim_.erase(std::string(stream));
      continue;
    }
    if (std::chrono::steady_clock::now() >= deadline) return out;
  }
}

Result<bool> RedisQueue::ack(const Lease& l) {
  ATREX_ASSIGN_OR_RETURN(
      int64_t r,
      eval(pool_, ack_script(), {key("q", l.stream), key("cnt", l.stream), key("err", l.stream)},
           {kGroup, l.message_id, l.consumer, std::to_string(l.delivery_count)}));
  return r == 1;
}

namespace {
// Stream ids "ms-seq" in numeric order.
bool id_less(const std::string& a, const std::string& b) {
  const auto split = [](const std::string& id) {
    const auto dash = id.find('-');
    return std::pair<uint64_t, uint64_t>{
        std::strtoull(id.c_str(), nullptr, 10),
        dash == std::string::npos ? 0 : std::strtoull(id.c_str() + dash + 1, nullptr, 10)};
  };
  return split(a) < split(b);
}
}  // namespace

Result<size_t> RedisQueue::ack_batch(const std::vector<Lease>& leases) {
  // One script call per (stream, consumer): a script touches keys of one hash slot, and one
  // XPENDING range query serves a consumer's leases.
  std::map<std::pair<std::string, std::string>, std::vector<const Lease*>> groups;
  for (const auto& l : leases) groups[{l.stream, l.consumer}].push_back(&l);
  size_t n = 0;
  for (auto& [sc, ls] : groups) {
    std::sort(ls.begin(), ls.end(),
              [](const Lease* a, const Lease* b) { return id_less(a->message_id, b->message_id); });
    std::vector<std::string> args = {kGroup, sc.second, ls.front()->message_id,
                                     ls.back()->message_id};
    args.reserve(4 + 2 * ls.size());
    for (const Lease* l : ls) {
      args.push_back(l->message_id);
      args.push_back(std::to_string(l->delivery_count));
    }
    ATREX_ASSIGN_OR_RETURN(
        int64_t acked,
        eval(pool_, ack_batch_script(),
             {key("q", sc.first), key("cnt", sc.first), key("err", sc.first)}, args));
    n += static_cast<size_t>(acked);
  }
  return n;
}

Result<bool> RedisQueue::renew(const Lease& l) {
  ATREX_ASSIGN_OR_RETURN(
      int64_t r, eval(pool_, renew_script(), {key("q", l.stream)},
                      {kGroup, l.message_id, l.consumer, std::to_string(l.delivery_count)}));
  return r == 1;
}

Result<bool> RedisQueue::release(const Lease& l, std::string_view error) {
  ATREX_ASSIGN_OR_RETURN(int64_t r,
                         eval(pool_, release_script(),
                              {key("q", l.stream), key("dlq", l.stream), key("err", l.stream)},
                              {kGroup, l.message_id, l.consumer, std::to_string(l.delivery_count),
                               std::string(error), std::to_string(options_.max_deliveries)}));
  return r == 1;
}

Result<std::vector<DeadLetter>> RedisQueue::dead_letters(std::string_view stream) {
  ATREX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  ATREX_ASSIGN_OR_RETURN(RedisValue v, conn->command({"XRANGE", key("dlq", stream), "-", "+"}));
  std::vector<DeadLetter> out;
  for (const auto& entry : v.elements) {
    if (entry.elements.size() < 2) continue;
    DeadLetter d;
    const auto& f = entry.elements[1].elements;
    for (size_t i = 0; i + 1 < f.size(); i += 2) {
      const std::string& name = f[i].str;
      if (name == "message_id")
        d.message_id = f[i + 1].str;
      else if (name == "deliveries")
        d.delivery_count = std::stoi(f[i + 1].str);
      else if (name == "error")
        d.last_error = f[i + 1].str;
      else if (name == "body") {
        ATREX_ASSIGN_OR_RETURN(d.body, parse_body(f[i + 1].str, key("dlq", stream)));
      }
    }
    out.push_back(std::move(d));
  }
  return out;
}

Result<std::vector<Json>> RedisQueue::in_flight(std::string_view stream) {
  // Acked entries are deleted (XDEL) and dead letters moved out; what is left is ready, leased
  // or stranded, and the script leaves the stranded out.
  ATREX_TRY(ensure_group(stream));
  ATREX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  ATREX_ASSIGN_OR_RETURN(RedisValue v,
                         run_script(*conn, in_flight_script(), {key("q", stream)}, {kGroup}));
  std::vector<Json> out;
  out.reserve(v.elements.size());
  for (const auto& body : v.elements) {
    ATREX_ASSIGN_OR_RETURN(Json j, parse_body(body.str, key("q", stream)));
    out.push_back(std::move(j));
  }
  return out;
}

Result<MessageState> RedisQueue::state(std::string_view stream, std::string_view message_id) {
  ATREX_TRY(ensure_group(stream));
  ATREX_ASSIGN_OR_RETURN(int64_t r, eval(pool_, state_script(), {key("q", stream)},
                                         {kGroup, std::string(message_id)}));
  if (r == 1) return MessageState::kQueued;
  if (r == 2) return MessageState::kStranded;
  return MessageState::kGone;
}

Result<std::string> RedisQueue::requeue_lost(std::string_view stream, std::string_view message_id,
                                             const Json& body) {
  ATREX_TRY(ensure_group(stream));
  ATREX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  ATREX_ASSIGN_OR_RETURN(
      RedisValue v,
      run_script(*conn, requeue_lost_script(),
                 {key("q", stream), key("cnt", stream), key("err", stream)},
                 {kGroup, std::string(message_id), body.dump()}));
  return v.str;
}

Result<QueueStats> RedisQueue::stats(std::string_view stream) {
  ATREX_TRY(ensure_group(stream));
  // Expired leases count as ready, as in the in-process queue: reclaim them first.
  ATREX_ASSIGN_OR_RETURN(auto conn, pool_.acquire());
  QueueStats st;
  ATREX_ASSIGN_OR_RETURN(RedisValue groups, conn->command({"XINFO", "GROUPS", key("q", stream)}));
  for (const auto& g : groups.elements) {
    bool ours = false;
    int64_t pending = 0, lag = 0;
    for (size_t i = 0; i + 1 < g.elements.size(); i += 2) {
      const std::string& name = g.elements[i].str;
      if (name == "name") ours = g.elements[i + 1].str == kGroup;
      if (name == "pending") pending = g.elements[i + 1].integer;
      if (name == "lag") lag = g.elements[i + 1].integer;
    }
    if (ours) {
      st.leased = pending;
      st.ready = lag;
    }
  }
  ATREX_ASSIGN_OR_RETURN(RedisValue dead, conn->command({"XLEN", key("dlq", stream)}));
  st.dead = dead.integer;
  ATREX_ASSIGN_OR_RETURN(RedisValue cnt,
                         conn->command({"HMGET", key("cnt", stream), "enqueued", "acked",
                                        "lost", "vanished"}));
  const auto count = [&](size_t i) -> int64_t {
    if (cnt.elements.size() <= i || cnt.elements[i].is_nil()) return 0;
    return std::stoll(cnt.elements[i].str);
  };
  st.enqueued_total = count(0);
  st.acked_total = count(1);
  st.lost_total = count(2);
  st.vanished_total = count(3);
  return st;
}

}  // namespace atrex
