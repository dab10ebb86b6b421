// The evaluation child's answer when its backend cannot run at all on this machine (no device,
// no runtime): instead of dying, it writes a verdict for every shape of the request, with a
// status (`rejected`) and the reason, so the runner records why rather than `crashed`.
#pragma once

#include <string>

namespace atrex::runner {

// Reads `--request FILE --response FILE` like child_main and writes, for a task request
// ("shapes"), one response line per shape, else one response document, each with `status` and
// `error` = `reason`. Returns `exit_code` (or 1/2 when the files cannot be read or written).
int child_main_unavailable(int argc, char** argv, const std::string& status,
                           const std::string& reason, int exit_code);

}  // namespace atrex::runner
