// The `slurm` launcher: not implemented yet (issue: Slurm launcher with sbatch job arrays).
#include <fmt/format.h>

#include "launchers.h"

namespace atrex::scheduler {

Result<Json> launch_slurm(const Json&, const ClusterOptions&, const ProgressFn&) {
  return invalid_input("--launcher slurm is not available in this build yet; use --launcher local");
}
Result<Json> revive_slurm(const Json&, const ClusterOptions&, const ProgressFn&) {
  return invalid_input("--launcher slurm is not available in this build yet");
}
std::pair<int, std::string> slurm_alive(const Json&) { return {-1, "slurm launcher not available"}; }
Result<void> slurm_stop(const Json&) { return invalid_input("--launcher slurm is not available in this build yet"); }

}  // namespace atrex::scheduler
