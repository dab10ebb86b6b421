// Unseen shapes (docs/evaluation.md "Unseen shapes"): shapes the suite does not hold, derived
// from an operator's hot shapes by setting one of its free dimensions (OperatorDef::free_dims)
// to a value no hot shape of the operator has. The evaluator checks a candidate's correctness
// on a few of them besides the hot shapes, so code that is only right at the hot sizes (shape
// hard-coding) is caught.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/problems/operator.h"
#include "atrex/problems/suite.h"

namespace atrex::problems {

struct UnseenShape {
  Shape shape;  // id "unseen-<k>"; params (and the kwargs that held it) with one dim changed
  std::string base_shape_id;     // the hot shape it was derived from
  std::string param;             // the free dimension changed ("token_count", "shape[0]")
  int64_t hot_value = 0;         // its value in the base shape
  int64_t value = 0;             // its value here: no hot shape of the operator has it
  std::string describe() const;  // "token_count = 2311 (hot shape 4 has 2500)"
};

// The values free dimension `param` takes over the operator's hot shapes (`info.shapes`).
std::vector<int64_t> hot_values(const OperatorInfo& info, const std::string& param);

// Up to `count` unseen shapes of `def`, derived from `bases` (a task's hot shapes; the smallest
// by input bytes first, cycling when count exceeds them), each with one free dimension moved to
// a value drawn from [max(min_value, v - v/4 - 1), v + v/4 + 1] around its hot value v (so the
// check costs about as much as one correctness seed of the smallest base) and held by no hot
// shape of the operator; every derived shape resolves (the operator's own constraints). Draws
// depend only on `seed`. Empty when the operator has no free dimension or `count` <= 0.
// Errors: kInvalidInput when a free dimension is not an integer parameter of the shapes.
Result<std::vector<UnseenShape>> derive_unseen_shapes(const OperatorDef& def,
                                                      const OperatorInfo& info,
                                                      std::span<const Shape* const> bases,
                                                      int count, uint64_t seed);

}  // namespace atrex::problems
