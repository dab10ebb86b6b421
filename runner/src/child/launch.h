// Builds the AtrexLaunch (candidate ABI v1) for one resolved shape, owning all the storage the
// structure points into (names, dims, parameter strings and lists).
#pragma once

#include <string>
#include <vector>

#include "atrex/candidate.h"
#include "atrex/problems/operator.h"

namespace atrex::runner {

class LaunchBuilder {
 public:
  LaunchBuilder(const problems::ResolvedShape& shape, DLDevice device, void* stream);
  // Points input/output i at device memory.
  void set_input(size_t i, void* data) { inputs_[i].tensor.data = data; }
  void set_output(size_t i, void* data) { outputs_[i].tensor.data = data; }
  const AtrexLaunch* launch() const { return &launch_; }

 private:
  std::vector<std::vector<int64_t>> dims_;
  std::vector<AtrexNamedTensor> inputs_;
  std::vector<AtrexNamedTensor> outputs_;
  std::vector<std::string> names_;
  std::vector<std::vector<int64_t>> lists_;
  std::vector<AtrexParam> params_;
  AtrexLaunch launch_{};
};

}  // namespace atrex::runner
