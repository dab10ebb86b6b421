#include "atrex/common/queue.h"

namespace atrex {

const char* message_state_name(MessageState s) {
  switch (s) {
    case MessageState::kQueued:
      return "queued";
    case MessageState::kGone:
      return "gone";
    case MessageState::kStranded:
      return "stranded";
  }
  return "?";
}

}  // namespace atrex
