// What this machine can evaluate on, and the choices that depend on it, made in one place for
// `atrex eval`, `atrex compile`, sweeps and runners: the backend a candidate or a sweep runs on,
// the compile target of a backend on this runner, and the hardware profile T_roofline uses.
// GPUs are probed in a child process (`atrex-eval-cuda --probe`, `atrex-eval-hip --probe`) so
// the runner never creates a GPU context itself; each probe runs once per process.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/wire/backend.h"
#include "atrex/problems/hardware.h"
#include "atrex/problems/suite.h"

namespace atrex::runner {

struct GpuInfo {
  int index = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;  // AMD GPUs: the CU count
  int64_t l2_bytes = 0;
  int64_t memory_bytes = 0;
  std::string arch;  // AMD GPUs: the gfx processor name hipcc targets ("gfx942")
  // nvcc target for candidates on this GPU: sm_90a on Hopper (wgmma, setmaxnreg), else sm_<cc>.
  std::string cuda_arch() const;
};

// The CUDA side of this machine.
struct Environment {
  bool cuda_child_built = false;  // atrex-eval-cuda exists next to atrex
  std::vector<GpuInfo> gpus;      // empty when no driver/GPU
  std::string gpu_probe_error;    // why gpus is empty
  std::string cpu_name;
  bool has_gpu() const { return !gpus.empty(); }
};
const Environment& probe_environment();

// The HIP side, probed apart so that cpu and cuda work never pays for it.
struct HipEnvironment {
  bool child_built = false;   // atrex-eval-hip exists (built when the HIP runtime was found)
  std::vector<GpuInfo> gpus;  // AMD GPUs the HIP runtime sees
  std::string probe_error;    // "no AMD GPU / HIP runtime found: <why>"
};
const HipEnvironment& probe_hip_environment();

// Folder of the atrex-eval-* children: $ATREX_CHILD_DIR, else next to the running executable.
std::filesystem::path default_child_dir();

// Where candidates of `backend` run on this machine's device `device_index`: the device name
// for records and the compile target ("native", "sm_90a", "gfx942"), or why they cannot
// (`reject` non-empty: every shape is recorded `rejected` with it).
struct Target {
  std::string device_name;
  std::string arch;
  std::string reject;
};
Target resolve_target(Backend backend, int device_index);

// kUnavailable (exit code 3) when `backend` cannot run here: cuda without a GPU (or an atrex
// built without the CUDA backend), hip without an AMD GPU.
Result<void> backend_available(Backend backend);

// The backend of a candidate file: `choice`, else its extension (.cu, .hip, .cpp/.cc/.cxx).
// kInvalidInput naming the file when auto and the extension says nothing.
Result<Backend> backend_for_file(const BackendChoice& choice, const std::filesystem::path& file);

// The backend of a sweep: `choice`, else cuda with a GPU here and cpu without.
Backend backend_for_machine(const BackendChoice& choice);

// The compile target of `backend` when compiling ahead for `arch` = "auto": the local GPU's,
// else sm_90a (cuda) or default_hip_arch() (hip); "native" for cpu.
std::string default_arch(Backend backend);

// The hardware profile for T_roofline: a name from `atrex hardware list` (the released profiles,
// atrex's own, $ATREX_HARDWARE_DIR), `host-cpu` (this host's measured ceilings), or `auto`: the
// cpu backend's host profile, else the profile whose device match fits `device` (the GPU here
// when `device` is empty). `hint` ends the not-found message ("pass --hardware NAME").
Result<problems::HardwareProfile> choose_hardware(std::string_view name, Backend backend,
                                                  const problems::Suite& suite,
                                                  std::string_view device = {},
                                                  std::string_view hint = "pass --hardware NAME");

}  // namespace atrex::runner
