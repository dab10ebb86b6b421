#include "atrex/common/inprocess_queue.h"

#include <fmt/format.h>

namespace atrex {

InProcessQueue::InProcessQueue(QueueOptions options, const Clock& clock)
    : options_(options), clock_(clock) {}

InProcessQueue::Stream& InProcessQueue::stream_locked(std::string_view name) {
  auto it = streams_.find(name);
  if (it == streams_.end()) it = streams_.emplace(std::string(name), Stream{}).first;
  return it->second;
}

void InProcessQueue::dead_letter_locked(Stream& s, Message m, std::string error) {
  s.dead.push_back(DeadLetter{m.id, std::move(m.body), m.delivery_count, std::move(error)});
}

void InProcessQueue::reclaim_expired_locked(Stream& s) {
  const auto now = clock_.now();
  for (auto it = s.pending.begin(); it != s.pending.end();) {
    if (now - it->second.last_delivery <= options_.lease_timeout) {
      ++it;
      continue;
    }
    Message m = std::move(it->second.message);
    if (m.last_error.empty()) {
      m.last_error = fmt::format("lease held by {} expired after {} ms", it->second.consumer,
                                 options_.lease_timeout.count());
    }
    it = s.pending.erase(it);
    if (m.delivery_count >= options_.max_deliveries) {
      std::string error = m.last_error;
      dead_letter_locked(s, std::move(m), std::move(error));
    } else {
      s.ready.push_front(std::move(m));  // reclaimed messages go before new ones
    }
  }
}

Result<std::string> InProcessQueue::enqueue(std::string_view stream, const Json& body) {
  std::string id;
  {
    std::lock_guard lock(mu_);
    Stream& s = stream_locked(stream);
    if (options_.max_length > 0 &&
        static_cast<int64_t>(s.ready.size() + s.pending.size()) >= options_.max_length) {
      return make_error(
          ErrorCode::kUnavailable,
          fmt::format("queue {} is full ({} messages, max_length {}); retry later", stream,
                      s.ready.size() + s.pending.size(), options_.max_length));
    }
    id = fmt::format("{}-0", s.next_id++);
    s.ready.push_back(Message{id, body, 0, {}});
    ++s.enqueued_total;
  }
  cv_.notify_all();
  return id;
}

Result<std::vector<std::string>> InProcessQueue::enqueue_batch(std::string_view stream,
                                                               const std::vector<Json>& bodies) {
  std::vector<std::string> ids;
  {
    std::lock_guard lock(mu_);
    Stream& s = stream_locked(stream);
    const auto held = static_cast<int64_t>(s.ready.size() + s.pending.size());
    if (options_.max_length > 0 && !bodies.empty() &&
        held + static_cast<int64_t>(bodies.size()) > options_.max_length) {
      return make_error(
          ErrorCode::kUnavailable,
          fmt::format("queue {} is full ({} messages + {} would pass max_length {}); retry later",
                      stream, held, bodies.size(), options_.max_length));
    }
    for (const auto& b : bodies) {
      ids.push_back(fmt::format("{}-0", s.next_id++));
      s.ready.push_back(Message{ids.back(), b, 0, {}});
      ++s.enqueued_total;
    }
  }
  cv_.notify_all();
  return ids;
}

Result<std::vector<Lease>> InProcessQueue::claim(std::string_view stream, std::string_view consumer,
                                                 size_t max_count,
                                                 std::chrono::milliseconds block) {
  std::unique_lock lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + block;
  std::vector<Lease> out;
  for (;;) {
    Stream& s = stream_locked(stream);
    reclaim_expired_locked(s);
    while (out.size() < max_count && !s.ready.empty()) {
      Message m = std::move(s.ready.front());
      s.ready.pop_front();
      ++m.delivery_count;
      out.push_back(
          Lease{std::string(stream), m.id, m.body, m.delivery_count, std::string(consumer)});
      const std::string id = m.id;
      s.pending[id] = Pending{std::move(m), std::string(consumer), clock_.now()};
    }
    if (!out.empty() || block.count() <= 0) return out;
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
      // One last look: a lease may have expired while we waited.
      Stream& s2 = stream_locked(stream);
      reclaim_expired_locked(s2);
      if (s2.ready.empty()) return out;
      block = std::chrono::milliseconds(0);
    }
  }
}

Result<bool> InProcessQueue::ack(const Lease& lease) {
  std::lock_guard lock(mu_);
  Stream& s = stream_locked(lease.stream);
  auto it = s.pending.find(lease.message_id);
  if (it == s.pending.end() || it->second.consumer != lease.consumer ||
      it->second.message.delivery_count != lease.delivery_count) {
    return false;
  }
  s.pending.erase(it);
  ++s.acked_total;
  return true;
}

Result<bool> InProcessQueue::renew(const Lease& lease) {
  std::lock_guard lock(mu_);
  Stream& s = stream_locked(lease.stream);
  auto it = s.pending.find(lease.message_id);
  if (it == s.pending.end() || it->second.consumer != lease.consumer ||
      it->second.message.delivery_count != lease.delivery_count) {
    return false;
  }
  it->second.last_delivery = clock_.now();
  return true;
}

Result<bool> InProcessQueue::release(const Lease& lease, std::string_view error) {
  {
    std::lock_guard lock(mu_);
    Stream& s = stream_locked(lease.stream);
    auto it = s.pending.find(lease.message_id);
    if (it == s.pending.end() || it->second.consumer != lease.consumer ||
        it->second.message.delivery_count != lease.delivery_count) {
      return false;
    }
    Message m = std::move(it->second.message);
    s.pending.erase(it);
    m.last_error = std::string(error);
    if (m.delivery_count >= options_.max_deliveries) {
      std::string e = m.last_error;
      dead_letter_locked(s, std::move(m), std::move(e));
    } else {
      s.ready.push_front(std::move(m));
    }
  }
  cv_.notify_all();
  return true;
}

Result<std::vector<DeadLetter>> InProcessQueue::dead_letters(std::string_view stream) {
  std::lock_guard lock(mu_);
  return stream_locked(stream).dead;
}

Result<std::vector<Json>> InProcessQueue::in_flight(std::string_view stream) {
  std::lock_guard lock(mu_);
  Stream& s = stream_locked(stream);
  std::vector<Json> out;
  for (const auto& m : s.ready) out.push_back(m.body);
  for (const auto& [_, p] : s.pending) out.push_back(p.message.body);
  return out;
}

Result<QueueStats> InProcessQueue::stats(std::string_view stream) {
  std::lock_guard lock(mu_);
  Stream& s = stream_locked(stream);
  reclaim_expired_locked(s);
  QueueStats st;
  st.ready = static_cast<int64_t>(s.ready.size());
  st.leased = static_cast<int64_t>(s.pending.size());
  st.dead = static_cast<int64_t>(s.dead.size());
  st.enqueued_total = s.enqueued_total;
  st.acked_total = s.acked_total;
  st.lost_total = s.lost_total;
  return st;
}

Result<MessageState> InProcessQueue::state(std::string_view stream, std::string_view message_id) {
  std::lock_guard lock(mu_);
  Stream& s = stream_locked(stream);
  reclaim_expired_locked(s);
  if (s.pending.count(std::string(message_id))) return MessageState::kQueued;
  for (const auto& m : s.ready) {
    if (m.id == message_id) return MessageState::kQueued;
  }
  return MessageState::kGone;
}

Result<std::string> InProcessQueue::requeue_lost(std::string_view stream,
                                                 std::string_view message_id, const Json& body) {
  std::string id;
  {
    std::lock_guard lock(mu_);
    Stream& s = stream_locked(stream);
    s.pending.erase(std::string(message_id));
    std::erase_if(s.ready, [&](const Message& m) { return m.id == message_id; });
    id = fmt::format("{}-0", s.next_id++);
    s.ready.push_back(Message{id, body, 0, {}});
    ++s.enqueued_total;
    ++s.lost_total;
  }
  cv_.notify_all();
  return id;
}

}  // namespace atrex
