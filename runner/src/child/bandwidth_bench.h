// Memory-bandwidth measurements on the current CUDA device (atrex-cuda-bench): the memory
// ceiling a measured hardware profile uses as B_hbm, and the copy kernel the timer calibration
// times. Every rate counts bytes read + bytes written, in bytes/s. The card's settings are never
// changed.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include <nlohmann/json.hpp>

#include "atrex/common/error.h"

namespace atrex::runner {

// dst[i] = src[i] for n 16-byte words, grid-stride, on `stream`. kIo when the launch fails.
Status launch_copy(const int4* src, int4* dst, size_t n, unsigned blocks, int threads,
                   cudaStream_t stream);

// cudaMemcpyAsync device-to-device of `bytes`, best of `rounds` (bytes/s, read + write).
Result<double> copy_bandwidth(size_t bytes, int rounds);

// The best of cudaMemcpy and read+write, read-only and write-only kernels over 1 and 2 GiB
// (several grid and block sizes; `sm_count` sizes the grids). {"variants": [{variant, bytes,
// bytes_per_s}], "best_bytes_per_s", "best"}. kIo naming the CUDA call that failed.
Result<nlohmann::json> memory_ceiling(int sm_count, int rounds);

}  // namespace atrex::runner
