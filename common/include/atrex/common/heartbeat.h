// Keeps a lease alive while a long task runs: renews it every `period` on a background
// thread until destroyed (RAII). Renewal failures are ignored here: a lost lease shows up as
// a refused ack, and the result write is idempotent anyway.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "atrex/common/queue.h"

namespace atrex {

class LeaseHeartbeat {
 public:
  LeaseHeartbeat(TaskQueue& queue, Lease lease, std::chrono::milliseconds period)
      : queue_(queue), lease_(std::move(lease)), thread_([this, period] {
          std::unique_lock lock(mu_);
          while (!cv_.wait_for(lock, period, [this] { return done_; })) (void)queue_.renew(lease_);
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
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace atrex
