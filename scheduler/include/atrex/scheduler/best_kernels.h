// The best kernel of each (agent, operator) of a sweep as a file of its results folder
// (`kernels/<agent>/<operator>/<file name>`) with the index `kernels/index.json`
// (atrex.kernels/1, common/wire/kernel_index.h): what the nightly sweep re-measures
// (`atrex sweep run sweeps/nightly.yaml --kernels-from DIR`, docs/reports.md).
#pragma once

#include <filesystem>

#include "atrex/common/error.h"
#include "atrex/scoring/report.h"

namespace atrex::scheduler {

// Writes into `out` (the results folder itself, or `atrex report --out`) the final candidate of
// every attempted (agent, operator) of `report` (a single sweep's: its agents are not
// qualified), its source taken from `results_dir`'s audit trail (audit/<agent>/<op>.jsonl, the
// "evaluated" event of the candidate's sha256), and the index with each one's S_i. Operators
// whose trail lacks the candidate (a hand-made results folder) are left out. Returns the
// number of kernels written. Errors: kIo (writing), kInvalidInput (an agent or operator name
// that is not a plain file name).
Result<int> export_best_kernels(const std::filesystem::path& results_dir,
                                const std::filesystem::path& out, const scoring::Report& report);

}  // namespace atrex::scheduler
