// The evaluation child's answer when its backend cannot run at all on this machine (no device,
// no runtime): instead of dying, it writes a verdict for every shape of the request, with a
// status (`rejected`) and the reason, so the runner records why rather than `crashed`.
#pragma once

#include <string>

#include "atrex/common/wire/eval_record.h"

namespace atrex::runner {

// Reads `--request FILE --response FILE` like child_main and writes, for a task request, one
// response line per shape, for a dump request one response, with `status` and `reason`.
// Returns `exit_code` (or 1/2 when the files cannot be read or written).
int child_main_unavailable(int argc, char** argv, EvalStatus status, const std::string& reason,
                           int exit_code);

}  // namespace atrex::runner
