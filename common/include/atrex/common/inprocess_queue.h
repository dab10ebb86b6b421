// InProcessQueue: the embedded TaskQueue for single-machine sweeps (`atrex sweep run`).
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>

#include "atrex/common/clock.h"
#include "atrex/common/queue.h"

namespace atrex {

class InProcessQueue final : public TaskQueue {
 public:
  // `clock` drives lease expiry (a ManualClock in tests); it must outlive the queue.
  explicit InProcessQueue(QueueOptions options = {}, const Clock& clock = SteadyClock::instance());

  Result<std::string> enqueue(std::string_view stream, const Json& body) override;
  Result<std::vector<std::string>> enqueue_batch(std::string_view stream,
                                                 const std::vector<Json>& bodies) override;
  Result<std::vector<Lease>> claim(std::string_view stream, std::string_view consumer,
                                   size_t max_count, std::chrono::milliseconds block) override;
  Result<bool> ack(const Lease& lease) override;
  Result<bool> renew(const Lease& lease) override;
  Result<bool> release(const Lease& lease, std::string_view error) override;
  Result<std::vector<DeadLetter>> dead_letters(std::string_view stream) override;
  Result<std::vector<Json>> in_flight(std::string_view stream) override;
  Result<QueueStats> stats(std::string_view stream) override;
  // Nothing deletes messages behind this queue's back: a message is queued or gone.
  Result<MessageState> state(std::string_view stream, std::string_view message_id) override;
  Result<std::string> requeue_lost(std::string_view stream, std::string_view message_id,
                                   const Json& body) override;

 private:
  struct Message {
    std::string id;
    Json body;
    int delivery_count = 0;
    std::string last_error;
  };
  struct Pending {
    Message message;
    std::string consumer;
    Clock::TimePoint last_delivery;
  };
  struct Stream {
    std::deque<Message> ready;
    std::map<std::string, Pending> pending;  // by message id
    std::vector<DeadLetter> dead;
    int64_t next_id = 1;
    int64_t enqueued_total = 0;
    int64_t acked_total = 0;
    int64_t lost_total = 0;
  };

  Stream& stream_locked(std::string_view name);
  void reclaim_expired_locked(Stream& s);
  void dead_letter_locked(Stream& s, Message m, std::string error);

  QueueOptions options_;
  const Clock& clock_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Stream, std::less<>> streams_;
};

}  // namespace atrex
