// The evaluation child's entry (common/wire/child_protocol.h):
// `<exe> --request-fd N --response-fd M [--device N]` for a task (the request is read from fd N,
// which is closed after; one response line per shape is written to the pipe M as it completes),
// `<exe> --request FILE --response FILE` for a dump (inputs and reference outputs; no candidate
// runs). Runs inside a sacrificial process (common/process/subprocess.h), for a task in the
// sandbox (common/process/sandbox.h).
#pragma once

#include <string>

#include "atrex/common/json_io.h"
#include "child_device.h"
#include "judge_link.h"
#include "loader.h"
#include "atrex/common/wire/child_protocol.h"

namespace atrex::runner {

// One shape of `task`, through the gates (shape_run.h). Never throws; a failure of the
// candidate is a status in the response.
ChildShapeResponse run_child_shape(const ChildTaskRequest& task, const ChildShape& item,
                                   ChildDevice& device, child::CandidateLoader& loader,
                                   child::JudgeLink& judge);

// Dump mode (`atrex problems dump`): for each item, draws the inputs, runs the reference on this
// backend and writes the tensors and manifest.json (atrex.dump/1) into its out_dir. Each item's
// status is "ok", "rejected" (a bad item), "crashed" (a device failure) or "skipped" (after one).
ChildDumpResponse run_child_dump(const ChildDumpRequest& request, ChildDevice& device);

// Task mode: installs the seccomp filter (task.seccomp), then the shapes in order, one response
// line each (carrying task.nonce), written to `response_fd` as soon as it is known (the runner
// sees progress and, after a crash or a timeout, which shape was in hand). Stops after a
// crashed shape (the context may be unusable: the process exits without destructors), after a
// wrong_result of an item with stop_task_on_failure, and between shapes on SIGUSR1 or when
// `stop_fd` is readable (in the sandbox a signal would reach bwrap, not this process).
// Returns the exit code (0; 1 when the response cannot be written; 3 after a crash; 5 when the
// seccomp filter cannot be installed: no candidate runs then).
// Every checked call goes to the judge through `judge` (judge_link.h), and each shape ends with
// a shape_end message to it before its response line.
int run_child_task(const ChildTaskRequest& task, ChildDevice& device,
                   child::CandidateLoader& loader, child::JudgeLink& judge, int response_fd,
                   int stop_fd = -1);

// The command line of the children (--device N is read by the device setup).
struct ChildArgs {
  std::string request, response;          // dump mode: files
  int request_fd = -1, response_fd = -1;  // task mode: inherited fds
  int stop_fd = -1;  // task mode: readable (a byte, or EOF) = stop after the shape in hand
  // Task mode: the pipe to the judge, the pipe from it, the memfd shared with it.
  int judge_out_fd = -1, judge_in_fd = -1, shared_fd = -1;
  // Both modes: the socket of the judge's device arena (protocol/arena_handoff.h), or -1.
  int arena_fd = -1;
  // Judge mode (`--judge`): no candidate; checks from `check_in_fd`, answers to
  // `check_out_fd`, verdicts to `response_fd` (judge.h).
  bool judge = false;
  int check_in_fd = -1, check_out_fd = -1;
  int ping_fd = -1, pong_fd = -1;  // judge mode: the runner's echo (judge.h)
};
ChildArgs child_args(int argc, char** argv);
// The request from the fd (read to its end, then closed) or the file.
Result<ChildRequest> read_child_request(const ChildArgs& args);
// One whole line onto the result pipe (write(2) until done).
Status write_response_line(int fd, const std::string& line);

// The child executables' main after device setup. Bad usage or an unreadable request: exit 2.
int child_main(int argc, char** argv, ChildDevice& device);

}  // namespace atrex::runner
