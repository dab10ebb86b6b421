// Throwaway stub: just enough of ResolvedShape for the reference headers to parse on the GPU box.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>
#include "atrex/problems/numeric.h"
namespace atrex::problems {
struct TensorDesc { std::vector<int64_t> dims; int64_t numel() const; };
struct ResolvedShape {
  std::vector<TensorDesc> inputs;
  int64_t int_param(std::string_view name) const;
  double float_param(std::string_view name) const;
};
}  // namespace atrex::problems
