// Device versions of the operators' own output comparisons (TensorSpec::compare); see
// cuda_ops.h. None yet: every custom comparison runs on the host.
#include "atrex/problems/cuda_ops.h"

namespace atrex::problems::cuda {

std::string compare_custom_output(const ResolvedShape& shape, size_t index, std::span<const void* const> candidate,
                                  std::span<const void* const> reference, double atol, double rtol, void* stream,
                                  CompareResult& result, bool& supported) {
  (void)shape, (void)index, (void)candidate, (void)reference, (void)atol, (void)rtol, (void)stream, (void)result;
  supported = false;
  return {};
}

}  // namespace atrex::problems::cuda
