// The judge (docs/evaluation.md "The judge"; issue 14 items 3 and 4): the evaluation child's
// binary started with --judge, in a sandbox of its own, next to the candidate's child. It loads
// no candidate. For every checked call of the child it draws the named input set itself (the
// same counter-based generator, from the seed), runs the reference on it, and compares the
// inputs and outputs the child published in the shared memfd (judge_link.h): the reference
// outputs exist only in this process, which the candidate cannot read. It answers the child
// pass or fail, and when the child ends a shape it writes its own verdict on that shape
// (atrex.judge-verdict/1: status, error figures, seeds, range probe, the checks made, and the
// child's timed calls bracketed on this process's clock) to the runner, on a pipe the child
// never holds. Everything the child sends is untrusted: a message that does not parse, names
// another shape or an input set that is not one of the shape's, or buffers shorter than the
// shape's tensors is tampering (a verdict with `tampering` set, then the judge stops).
#pragma once

#include "child_device.h"
#include "atrex/common/wire/child_protocol.h"

namespace atrex::runner {

// The judge's first step, before its device is set up (each child binary's main calls it first):
// with --judge and the echo fds on the command line, takes the wake-up latency probe once, while
// the runner holds the candidate's child back until these pings came (kJudgeStartPings of them),
// and keeps it for every verdict (JudgeVerdict::start_latency_us). Does nothing otherwise.
void judge_prelude(int argc, char** argv);

// Judge mode's main after device setup: installs the seccomp filter (task.seccomp), then
// answers the child's messages from `check_in_fd` on `check_out_fd`, reading the memfd
// `shared_fd`, and writes one verdict line per finished shape to `verdict_fd`. Returns 0 when
// the child's pipe closes (the child is done or dead), 1 when the verdict pipe cannot be
// written, 3 after a device failure of its own (a `crashed` verdict is written first), 5 when
// the seccomp filter cannot be installed.
// `ping_fd`/`pong_fd`: a byte written to the first comes back on the second from the runner's
// echo thread, for the wake-up latency of two processes on this host (timing_check.h); -1:
// measured between two threads of the judge instead.
// `arena_fd`: the socket the judge offers its device arena on (protocol/arena_handoff.h), before
// the filter; -1: none (the checks copy through the shared memfd).
int run_judge_task(const ChildTaskRequest& task, ChildDevice& device, int verdict_fd,
                   int check_in_fd, int check_out_fd, int shared_fd, int ping_fd = -1,
                   int pong_fd = -1, int arena_fd = -1);

}  // namespace atrex::runner
