// The TaskQueue contract. Every implementation must pass this suite; the Redis Streams queue
// instantiates it against a real redis-server (docs/architecture.md §2, docs/architecture.md §8).
#include "atrex/testing/queue_contract.h"

#include "atrex/common/inprocess_queue.h"

namespace atrex {
namespace {

class InProcessQueueFactory final : public QueueFactory {
 public:
  std::unique_ptr<TaskQueue> make(const QueueOptions& options, ManualClock& clock) override {
    return std::make_unique<InProcessQueue>(options, clock);
  }
  void advance(ManualClock& clock, std::chrono::milliseconds d) override { clock.advance(d); }
};

INSTANTIATE_TEST_SUITE_P(InProcess, QueueContractTest,
                         ::testing::Values(std::make_shared<InProcessQueueFactory>()),
                         [](const auto&) { return std::string("InProcess"); });

}  // namespace
}  // namespace atrex
