// The host executor of the shared operator functors. The CUDA twin is in src/cuda/.
#pragma once

#include <cstdint>

#include "atrex/problems/operator.h"

namespace atrex::problems {

// Runs a host/device functor f(i) for i in [0, n) on the host's cores.
struct CpuExec {
  template <class F>
  void for_each(int64_t n, const F& f) const {
    parallel_for_cpu(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) f(i);
    });
  }
};

}  // namespace atrex::problems
