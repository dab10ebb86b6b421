// The task queue: at-least-once delivery with leases and a dead-letter list.
//
// Two implementations pass one contract suite (common/tests/queue_contract_test.cpp):
// InProcessQueue (the embedded default, this component) and the Redis Streams queue
// (XADD / XREADGROUP / XACK / XAUTOCLAIM; docs/architecture.md §2). Semantics, modelled on Redis
// consumer groups (https://redis.io/docs/latest/develop/data-types/streams/):
//   * enqueue appends a message to a named stream; it is "ready".
//   * claim hands up to N messages to a consumer and starts a lease on each. A lease is the
//     time since the message was last delivered or renewed, measured on the queue's clock.
//     Messages whose lease has been idle longer than QueueOptions::lease_timeout are
//     reclaimed by the next claim of any consumer, before new messages, with their delivery
//     count incremented. Past QueueOptions::max_deliveries a message is moved to the
//     dead-letter list instead, with its last error.
//   * ack ends the lease: the message is done. Acking twice, or a lease that was reclaimed
//     and re-delivered to someone else, is harmless (returns false) — results must be
//     idempotent anyway (ResultStore: first write per task id wins).
//   * release gives a message back before its lease expires (the consumer failed it); it is
//     redelivered at once, or dead-lettered when its deliveries are used up.
//   * A message can also be lost behind the queue's back: its entry deleted (XDEL, a trim) or
//     the consumer holding it deleted (XGROUP DELCONSUMER). state() tells a reconciler that a
//     message it waits for will never be delivered; requeue_lost() puts it back.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"

namespace atrex {

struct QueueOptions {
  std::chrono::milliseconds lease_timeout{60'000};  // idle time after which a lease is reclaimed
  int max_deliveries = 3;                           // deliveries before dead-lettering
  // Backpressure: enqueue fails with kUnavailable ("queue full") while the stream already
  // holds this many messages (ready + leased). 0 = unbounded.
  int64_t max_length = 0;
};

// A message handed to one consumer.
struct Lease {
  std::string stream;
  std::string message_id;  // queue-assigned, unique within the stream
  Json body;
  int delivery_count = 1;  // 1 on first delivery
  std::string consumer;
};

struct DeadLetter {
  std::string message_id;
  Json body;
  int delivery_count = 0;
  std::string last_error;
};

struct QueueStats {
  int64_t ready = 0;           // enqueued, never delivered or released
  int64_t leased = 0;          // delivered, not yet acked
  int64_t dead = 0;            // in the dead-letter list
  int64_t enqueued_total = 0;  // since the stream was created
  int64_t acked_total = 0;
  int64_t lost_total = 0;      // put back by requeue_lost()
  // Leased messages whose entry had been deleted behind the queue's back, found (and dropped
  // from the pending list) when their lease expired: Redis XAUTOCLAIM's third reply element.
  int64_t vanished_total = 0;
};

// Where one message stands, for a reconciler that must tell "still coming" from "lost".
enum class MessageState {
  kQueued,    // ready or leased: it will be, or is being, delivered
  kGone,      // acked, dead-lettered, or deleted behind the queue's back (XDEL, a trim)
  kStranded,  // still held, but delivered to a consumer that no longer exists (XGROUP
              // DELCONSUMER): no claim will ever deliver it again
};
const char* message_state_name(MessageState s);  // "queued", "gone", "stranded"

class TaskQueue {
 public:
  virtual ~TaskQueue() = default;

  // Appends `body` to `stream`; returns the message id.
  virtual Result<std::string> enqueue(std::string_view stream, const Json& body) = 0;
  // Appends several messages in one round trip where the queue can (all or none when the
  // bound QueueOptions::max_length would be passed). Returns their ids in order.
  virtual Result<std::vector<std::string>> enqueue_batch(std::string_view stream,
                                                         const std::vector<Json>& bodies) {
    std::vector<std::string> ids;
    for (const auto& b : bodies) {
      ATREX_ASSIGN_OR_RETURN(std::string id, enqueue(stream, b));
      ids.push_back(std::move(id));
    }
    return ids;
  }

  // Up to `max_count` messages for `consumer`: expired leases first, then new messages.
  // Waits up to `block` for at least one message when none is available (0 = don't wait).
  virtual Result<std::vector<Lease>> claim(std::string_view stream, std::string_view consumer,
                                           size_t max_count, std::chrono::milliseconds block) = 0;

  // Marks the leased message done. Returns false when the lease was no longer held by
  // `lease.consumer` (reclaimed by another consumer or already acked).
  virtual Result<bool> ack(const Lease& lease) = 0;
  // Acks several leases (of one stream) in one round trip where the queue can; returns how
  // many were still held (the others were reclaimed or already acked, as for ack()).
  virtual Result<size_t> ack_batch(const std::vector<Lease>& leases) {
    size_t n = 0;
    for (const auto& l : leases) {
      ATREX_ASSIGN_OR_RETURN(bool held, ack(l));
      n += held ? 1 : 0;
    }
    return n;
  }

  // Heartbeat: restarts the lease's idle time. Returns false when the lease is lost.
  virtual Result<bool> renew(const Lease& lease) = 0;

  // Gives the message back with the reason it failed (kept as the dead letter's last_error).
  virtual Result<bool> release(const Lease& lease, std::string_view error) = 0;

  virtual Result<std::vector<DeadLetter>> dead_letters(std::string_view stream) = 0;
  // Bodies of every message not yet acked or dead-lettered that a claim can still deliver
  // (ready or leased; not stranded): what a reconciler must not enqueue again. One consistent
  // snapshot.
  virtual Result<std::vector<Json>> in_flight(std::string_view stream) = 0;
  // Where message `message_id` (an id enqueue returned) stands. A gone message is either done
  // or lost: the caller tells them apart by its results (a consumer stores them before it acks).
  virtual Result<MessageState> state(std::string_view stream, std::string_view message_id) = 0;
  // Puts `body` back as a new message after `message_id` was found gone or stranded, removing
  // what is left of the old one first (so it is never delivered twice by this queue); counted
  // in QueueStats::lost_total. Returns the new message id.
  virtual Result<std::string> requeue_lost(std::string_view stream, std::string_view message_id,
                                           const Json& body) = 0;
  virtual Result<QueueStats> stats(std::string_view stream) = 0;
};

}  // namespace atrex
