// `atrex problems dump` (evaluator side, docs/evaluation.md "Cross-checking the references"): a
// backend's evaluation child draws shapes' inputs and runs the reference on them, writing every
// tensor as a raw little-endian file plus manifest.json (atrex.dump/1) into each item's folder,
// for an independent implementation to compare with. Never used by the gates.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/backend.h"
#include "atrex/common/wire/child_protocol.h"  // DumpItem, DumpItemResult, ChildDumpResponse

namespace atrex::runner {

// Runs `backend`'s evaluation child (on GPU `device`) over `items`, its request and response
// files in `work_dir`. Errors: kInternal when the child gives no response (its output says
// why), kIo for the work folder.
Result<ChildDumpResponse> run_dump(Backend backend, int device, const std::vector<DumpItem>& items,
                                   const std::filesystem::path& work_dir,
                                   std::chrono::milliseconds timeout);

}  // namespace atrex::runner
