// The evaluation child's work for one shape: load the candidate, run the correctness gate on
// fresh seeds, then the performance gate. Runs inside a sacrificial process (subprocess.h);
// its only output is the response JSON (atrex.child-response/1).
#pragma once

#include <string>
#include <vector>

#include "atrex/common/json_io.h"
#include "child_device.h"

namespace atrex::runner {

inline constexpr const char* kChildRequestSchema = "atrex.child-request/1";
inline constexpr const char* kChildResponseSchema = "atrex.child-response/1";

// Builds the response for `request` (see evaluator.cpp for the fields). Never throws; a
// failure of the candidate is a status in the response.
Json run_child_shape(const Json& request, ChildDevice& device);

// Dump mode (request "mode": "dump", `atrex problems dump`): for each of request["items"]
// ({operator, shape_id, params, init_kwargs, input_kwargs, seed, backend, out_dir, atol, rtol})
// draws the inputs, runs the reference on this backend and writes the tensors and
// manifest.json (atrex.dump/1) into out_dir. The response lists each item's status ("ok",
// "rejected" for a bad item, "crashed" for a device failure, "skipped" after one). Never throws.
Json run_child_dump(const Json& request, ChildDevice& device);

// Entry for the child executables: `<exe> --request FILE --response FILE`. A request with
// "shapes" ([{shape_id, params, seeds}, ...] plus the common fields of one shape) evaluates
// them in order in this process and appends one response line (JSON, with "shape_id" and
// "wall_s") per shape as it completes; an item's own fields override the common ones. SIGUSR1
// stops it between shapes, a crashed shape ends it, and so does a wrong_result of an item with
// "stop_task_on_failure": true. A shape's request may set "range_probe": false (default true:
// the operator's range probe, if it has one, runs after the first seed). Otherwise the request's
// "mode" ("shape" by default, or "dump") picks the work and the response is one JSON document.
// Returns the exit code.
int child_main(int argc, char** argv, ChildDevice& device);

}  // namespace atrex::runner
