// `atrex problems dump` (evaluator side, docs/evaluation.md "Cross-checking the references"): a
// backend's evaluation child draws shapes' inputs and runs the reference on them, writing every
// tensor as a raw little-endian file plus manifest.json (atrex.dump/1) into each item's folder,
// for an independent implementation to compare with. Never used by the gates.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/backend.h"

namespace atrex::runner {

// mode "dump" (`atrex problems dump`): draw a shape's inputs and write them and the reference
// outputs into `out_dir` (atrex.dump/1, docs/evaluation.md).
struct DumpItem {
  std::string operator_name;
  std::string shape_id;
  Json params = Json::object();
  Json init_kwargs = Json::object();
  Json input_kwargs = Json::object();
  uint64_t seed = 1;
  std::string backend;  // for the manifest
  std::string out_dir;
  double atol = 1e-2;
  double rtol = 5e-2;
};
// One dump item's outcome: "ok", "rejected" (bad item), "crashed" (device failure), "skipped".
struct DumpItemResult {
  std::string operator_name;
  std::string shape_id;
  std::string status;
  std::string error;
  std::string out_dir;
  double wall_s = 0;
};
struct ChildDumpResponse {
  std::string device;
  std::vector<DumpItemResult> items;
  bool crashed = false;  // an item crashed the device context; the rest were skipped
};
// Runs `backend`'s evaluation child (on GPU `device`) over `items`, its request and response
// files in `work_dir`. Errors: kInternal when the child gives no response (its output says
// why), kIo for the work folder.
Result<ChildDumpResponse> run_dump(Backend backend, int device, const std::vector<DumpItem>& items,
                                   const std::filesystem::path& work_dir,
                                   std::chrono::milliseconds timeout);

}  // namespace atrex::runner
