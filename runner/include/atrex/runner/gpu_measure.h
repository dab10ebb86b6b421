// GPU ceilings and timer calibration through the `atrex-cuda-bench` child (runner/src/child/
// cuda_bench.cu), so the calling process never creates a GPU context. Used by `atrex hardware
// measure` (backend cuda) and `atrex bench timing`. docs/hardware.md, docs/benchmarks.md.
#pragma once

#include <chrono>
#include <string>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/problems/hardware.h"

namespace atrex::runner {

// Runs `atrex-cuda-bench --<mode> --device N` (mode "measure" or "timing") and returns its JSON
// (atrex.gpu-measure/1 or atrex.timing-calibration/1). Errors: kUnavailable when atrex was built
// without CUDA or the child fails (its message and output tail included).
Result<Json> run_cuda_bench(const std::string& mode, int device,
                            std::chrono::seconds timeout = std::chrono::seconds(300));

// A hardware profile from an atrex.gpu-measure/1 result: p_peak per dtype path from the cuBLASLt
// GEMM rates (paths that failed are left out), b_peak.hbm = device-to-device copy bandwidth
// (read + write), L2 size, `device.match` = the GPU's name, arch sm_<cc>. Errors: kInvalidInput
// when the result lacks the copy bandwidth or every GEMM rate.
Result<problems::HardwareProfile> gpu_profile(const Json& measured, const std::string& name);

}  // namespace atrex::runner
