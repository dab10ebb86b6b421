// Helpers shared by the operator unit tests: a shape resolved from hand-written parameters, the
// CPU reference run on caller-owned buffers, bf16 test vectors.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include <gtest/gtest.h>

#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"

namespace atrex::problems::test_util {

inline std::vector<uint16_t> bf16(std::initializer_list<float> v) {
  std::vector<uint16_t> out;
  for (float f : v) out.push_back(num::float_to_bf16(f));
  return out;
}

// The native operator `op` at a shape with these parameters (fails the test when it does not
// resolve).
inline ResolvedShape resolve(const char* op, Json params) {
  const OperatorDef* def = find_native_operator(op);
  EXPECT_NE(def, nullptr) << op;
  Shape s;
  s.id = "t";
  s.params = std::move(params);
  auto r = resolve_shape(*def, s);
  EXPECT_TRUE(r) << r.error().message;
  return *r;
}

inline void run(const ResolvedShape& s, std::vector<const void*> in, std::vector<void*> out) {
  s.def->reference_cpu(s, in, out);
}

}  // namespace atrex::problems::test_util
