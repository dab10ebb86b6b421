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

// Entry for the child executables: `<exe> --request FILE --response FILE`. Returns the exit code.
int child_main(int argc, char** argv, ChildDevice& device);

}  // namespace atrex::runner
