// The measurement behind `atrex bench queue`, shared with `atrex bench connections`
// (docs/benchmarks.md): no-op tasks through the Redis Streams queue.
#pragma once

#include <cstdint>
#include <string>

#include "atrex/common/redis/connection.h"

namespace atrex::cli {

struct PhaseResult {
  int runners = 0;
  int threads = 0;
  double offered_per_s = 0;  // 0 = as fast as the queue takes them
  double tasks_per_s = 0;
  double p50_ms = 0, p99_ms = 0;  // enqueue -> start latency
  int64_t completed = 0;
  int64_t full_refusals = 0;  // enqueue batches refused by backpressure (max_length)
  std::string error;          // the first error of any thread; the figures are then partial
};

// One measurement: a producer enqueues no-op tasks stamped with their enqueue time (at `rate`
// tasks/s, or as fast as backpressure allows when rate == 0) while `runners` simulated runners,
// multiplexed over `threads` threads, claim (batch), "run" (nothing) and ack (batch). The
// enqueue->start latency is the claim time minus the stamp. Counted over `seconds` after a
// warm-up of a quarter of it; the stream's keys are deleted afterwards.
PhaseResult run_phase(const RedisEndpoint& redis, const std::string& stream, int runners,
                      int threads, int batch, double seconds, double rate, int64_t max_length);

}  // namespace atrex::cli
