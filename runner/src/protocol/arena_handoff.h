// The hand-off of the judge's device arena to the evaluation child (judge.h, judge_link.h;
// docs/evaluation.md "The judge's device arena"). On a backend that can share device memory
// between processes (cuda: the VMM API's POSIX file descriptor handles), the judge allocates one
// arena for the task's largest shape and offers it to the child on a Unix socket pair the runner
// made for the two (SOCK_SEQPACKET; SCM_RIGHTS carries the descriptor, unix(7)). The child maps
// it and keeps the candidate's work inputs and guarded outputs there (shared_layout.h
// device_arena_layout), so the judge compares them on its own mapping, with no copy through the
// host. The child answers whether it mapped the arena before its first message to the judge
// (and before any candidate code runs); without the arena both sides keep the memfd copies.
#pragma once

#include <cstdint>

#include "atrex/common/error.h"

namespace atrex::runner {

// What the judge offers: `bytes` of device memory behind `fd` (a POSIX file descriptor handle),
// or no arena (bytes 0, fd -1).
struct ArenaOffer {
  uint64_t bytes = 0;
  int fd = -1;
};

// One offer on `socket`: an 8-byte payload (bytes, host order: both ends are one host) and the
// descriptor when bytes > 0. kIo naming the failing call.
Status send_arena_offer(int socket, const ArenaOffer& offer);
// The offer from `socket` (blocking). A closed socket is no arena. kIo when the message is not
// an offer (its size, or a descriptor missing or extra); any descriptor received is closed then.
Result<ArenaOffer> receive_arena_offer(int socket);

// The child's answer (one byte): whether it mapped the arena.
Status send_arena_answer(int socket, bool mapped);
// The judge's read of that answer; false when the socket closed or said anything else.
bool receive_arena_answer(int socket);

}  // namespace atrex::runner
