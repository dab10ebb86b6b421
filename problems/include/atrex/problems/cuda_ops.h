// CUDA executor of the native operator definitions (operator.h): input generation and the
// reference on device memory. Built only with the CUDA backend (atrex_problems_cuda); it is
// linked by the CUDA evaluation child, never by the long-lived processes.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "atrex/problems/operator.h"

namespace atrex::problems::cuda {

// Draws input `index` for `seed` into device buffer `device_data` on `stream`
// (a cudaStream_t). Returns "" on success, else the CUDA error text.
std::string generate_input(const ResolvedShape& shape, size_t index, uint64_t seed, void* device_data, void* stream);

// Runs the operator's reference on device buffers (naive but parallel: one thread per row,
// fp32/fp64 accumulation). Returns "" on success, else the error text.
std::string reference(const ResolvedShape& shape, std::span<const void* const> in, std::span<void* const> out,
                      void* stream);

}  // namespace atrex::problems::cuda
