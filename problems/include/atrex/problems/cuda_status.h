// CUDA runtime results in the house's error vocabulary (atrex/common/error.h): every CUDA-facing
// function of the evaluation children and of atrex_problems_cuda returns a Status (or a Result),
// never an error string. A failed runtime call is ErrorCode::kIo with the runtime's own words,
// "cudaErrorName: description" (cudaGetErrorName, cudaGetErrorString; CUDA Runtime API,
// "Error Handling"), optionally prefixed with what was being done.
//
// Needs the CUDA runtime headers (translation units of atrex_problems_cuda and of the CUDA
// children include it; it is left out of the header self-containment test like cuda_ops.h).
#pragma once

#include <string>
#include <string_view>

#include <cuda_runtime.h>

#include "atrex/common/error.h"

namespace atrex::problems::cuda {

// "cudaErrorName: description" of `e` (for cudaSuccess too: "cudaSuccess: no error").
inline std::string cuda_error_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

// ok() for cudaSuccess, else an kIo Error "[where: ]cudaErrorName: description".
inline Status cuda_status(cudaError_t e, std::string_view where = {}) {
  if (e == cudaSuccess) return ok();
  std::string message = where.empty() ? std::string() : std::string(where) + ": ";
  return io_error(message + cuda_error_text(e));
}

// The status of the last launch on this thread (cudaGetLastError, which also clears a non-sticky
// error): a launch that failed to configure or found no kernel image fails here.
inline Status cuda_last_launch(std::string_view where = {}) {
  return cuda_status(cudaGetLastError(), where);
}

}  // namespace atrex::problems::cuda
