// Keeps a lease alive while a long task runs: renews it every `period` on a background
// thread until destroyed (RAII). Renewal failures are ignored here: a lost lease shows up as
// a refused ack, and the result write is idempotent anyway. `on_renew`, when set, is called on
// the heartbeat's thread with each renewal's outcome (the runner's lease-renewal metric).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "atrex/common/queue.h"

namespace atrex {

class LeaseHeartbeat {
 public:
  LeaseHeartbeat(TaskQueue& queue, Lease lease, std::chrono::milliseconds period,
                 std::function<void(bool ok)> on_renew = {})
      : queue_(queue),
        lease_(std::move(lease)),
        on_renew_(std::move(on_renew)),
        thread_([this, period] {
          std::unique_lock lock(mu_);
          while (!cv_.wait_for(lock, period, [this] { return done_; })) {
            const auto renewed = queue_.renew(lease_);
            if (on_renew_) on_renew_(renewed && *renewed);
          }
        }) {}
  ~LeaseHeartbeat() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  LeaseHeartbeat(const LeaseHeartbeat&) = delete;
  LeaseHeartbeat& operator=(const LeaseHeartbeat&) = delete;

 private:
  TaskQueue& queue_;
  Lease lease_;
  std::function<void(bool ok)> on_renew_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace atrex
