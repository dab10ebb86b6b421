// CUDA executor of the native operator definitions (operator.h): input generation and the
// reference on device memory. Built only with the CUDA backend (atrex_problems_cuda); it is
// linked by the CUDA evaluation child, never by the long-lived processes.
#pragma once

#include <cstdint>
#include <span>

#include "atrex/common/error.h"
#include "atrex/problems/compare.h"
#include "atrex/problems/operator.h"

namespace atrex::problems::cuda {

// Draws input `index` for `seed` into device buffer `device_data` on `stream`
// (a cudaStream_t); `scale_exponent` as generate_input_cpu's (the range probe). A CUDA failure is
// a kIo Error with the runtime's words (cuda_status.h).
Status generate_input(const ResolvedShape& shape, size_t index, uint64_t seed, void* device_data,
                      void* stream, int scale_exponent = 0);

// Runs the operator's reference on device buffers (naive but parallel: one thread per row,
// fp32/fp64 accumulation). kNotFound when the operator has no CUDA reference; CUDA failures as
// generate_input's.
Status reference(const ResolvedShape& shape, std::span<const void* const> in,
                 std::span<void* const> out, void* stream);

// The correctness comparison of one output (compare.h semantics: pass, low_signal, max_abs_error,
// max_rel_error, bad_count; no message) on device buffers of `desc`'s dtype and numel, on
// `stream`; synchronises it. The caller copies to the host for the message of a failure.
// CUDA failures as generate_input's.
Status compare_output(const TensorDesc& desc, const void* candidate, const void* reference,
                      double atol, double rtol, void* stream, CompareResult& result);

// The operator's own comparison of output `index` (TensorSpec::compare, e.g. the fp8 quantisation
// comparisons of quant_norm_compare.h) on device buffers of every output (`candidate`,
// `reference`: all outputs of the shape, device pointers), where a device version of that
// comparison exists; `supported` is false otherwise and the caller compares on the host. Same
// verdict, bad_count, low_signal and max errors as the host function; no message (the caller
// words a failure on the host). Synchronises `stream`. CUDA failures as generate_input's.
Status compare_custom_output(const ResolvedShape& shape, size_t index,
                             std::span<const void* const> candidate,
                             std::span<const void* const> reference, double atol, double rtol,
                             void* stream, CompareResult& result, bool& supported);

// The offset of the first differing byte of two device buffers of `bytes` bytes (8-byte
// aligned, as cudaMalloc returns them), or -1 when they are equal; synchronises `stream`. CUDA
// failures as generate_input's.
Result<int64_t> first_difference(const void* a, const void* b, size_t bytes, void* stream);

}  // namespace atrex::problems::cuda
