// atrex.kernels/1: the best kernel of each (agent, operator) of a sweep, kept as files in its
// results folder (`kernels/<agent>/<operator>/<file>`) with this index (`kernels/index.json`).
// Written by the scheduler when a sweep's reports are written; read by the `fixed` provider
// (agent/fixed_provider.h) for `kernels: RESULTS_DIR` (the nightly sweep's `--kernels-from`).
#pragma once

#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/backend.h"

namespace atrex {

inline constexpr const char* kKernelIndexSchema = "atrex.kernels/1";

struct KernelIndexEntry {
  std::string agent;
  std::string op;
  std::string file;    // relative to the results folder: kernels/<agent>/<op>/<file name>
  std::string sha256;  // of the file's bytes (the candidate's sha256 in its records)
  double s_i = 0;      // the operator's S_i in the sweep's report (0: no correct shape)
};

struct KernelIndex {
  std::string sweep_id;
  Backend backend = Backend::kCpu;
  std::vector<KernelIndexEntry> kernels;
};

Json to_json(const KernelIndex& index);
// Strict: every member present and known. `source` names the file in errors (kInvalidInput).
Result<KernelIndex> kernel_index_from_json(const Json& j, const std::string& source);

}  // namespace atrex
