// The evaluation child's entry (protocol/child_protocol.h): `<exe> --request FILE --response FILE
// [--device N]`. A task request evaluates its shapes in order in this process and appends one
// response line per shape as it completes; a dump request writes inputs and reference outputs.
// Runs inside a sacrificial process (common/process/subprocess.h).
#pragma once

#include <string>

#include "atrex/common/json_io.h"
#include "child_device.h"
#include "loader.h"
#include "protocol/child_protocol.h"

namespace atrex::runner {

// One shape of `task`, through the gates (shape_run.h). Never throws; a failure of the
// candidate is a status in the response.
ChildShapeResponse run_child_shape(const ChildTaskRequest& task, const ChildShape& item,
                                   ChildDevice& device, child::CandidateLoader& loader);

// Dump mode (`atrex problems dump`): for each item, draws the inputs, runs the reference on this
// backend and writes the tensors and manifest.json (atrex.dump/1) into its out_dir. Each item's
// status is "ok", "rejected" (a bad item), "crashed" (a device failure) or "skipped" (after one).
ChildDumpResponse run_child_dump(const ChildDumpRequest& request, ChildDevice& device);

// Task mode: the shapes in order, one response line each, appended as soon as it is known (the
// runner sees progress and, after a crash or a timeout, which shape was in hand). Stops after a
// crashed shape (the context may be unusable: the process exits without destructors), after a
// wrong_result of an item with stop_task_on_failure, and on SIGUSR1 between shapes.
// Returns the exit code (0; 1 when the response file cannot be written; 3 after a crash).
int run_child_task(const ChildTaskRequest& task, ChildDevice& device,
                   child::CandidateLoader& loader, const std::string& response_path);

// The child executables' main after device setup. Bad usage or an unreadable request: exit 2.
int child_main(int argc, char** argv, ChildDevice& device);

}  // namespace atrex::runner
