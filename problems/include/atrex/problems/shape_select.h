// Which shapes of an operator are evaluated: the sweep file's per-backend rules (shapes.<backend>
// in docs/sweeps.md) and `atrex eval --shapes`, in one place. Sizes are input elements of the
// resolved shape (the sum over the operator's input tensors).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/problems/operator.h"
#include "atrex/problems/suite.h"

namespace atrex::problems {

// A sweep's shape rule for one backend: every shape (`all`), explicit ids per operator, or a
// size cap with a per-operator count (spread from the smallest to the largest that fit).
struct ShapeRule {
  bool all = true;
  std::map<std::string, std::vector<std::string>> ids;  // per operator (overrides the caps)
  int64_t max_input_elements = 0;                       // 0 = no cap
  int max_per_operator = 0;                             // 0 = no cap
  int at_least = 0;  // keep this many smallest shapes when none fit the cap
  // When none fit the cap: the operator's reduced shapes (suite.h OperatorInfo::reduced_shapes),
  // where it has any, instead of `at_least` smallest released ones.
  bool reduced = false;
};

// One shape (hot or reduced) and its input elements.
struct SizedShape {
  int64_t input_elements = 0;
  std::string id;
  bool operator<(const SizedShape& o) const {
    return std::pair(input_elements, id) < std::pair(o.input_elements, o.id);
  }
};

// Every hot shape of `info` with its size, smallest first (ties by id, as strings).
Result<std::vector<SizedShape>> sized_shapes(const OperatorInfo& info, const OperatorDef& def);

// `k` picks spread evenly over `sorted` (the first and the last when k >= 2), no duplicates.
std::vector<std::string> spread(const std::vector<SizedShape>& sorted, size_t k);

// The shapes `rule` selects of `info`, in the suite's id order. kInvalidInput naming `source`
// (the sweep file) for an explicit id the operator does not have.
Result<std::vector<std::string>> apply_shape_rule(const ShapeRule& rule, const OperatorInfo& info,
                                                  const OperatorDef& def,
                                                  const std::string& source);

// `k` of `chosen` (ids of `info`, hot or reduced) spread by size: an agent iteration's
// quick-evaluation shapes.
Result<std::vector<std::string>> quick_shapes(const OperatorInfo& info, const OperatorDef& def,
                                              const std::vector<std::string>& chosen, size_t k);

// A selector as `atrex eval --shapes` takes it: `all`, `smallest[:N]` / `largest[:N]` (the N
// shapes with the fewest / most input elements, default 1) or comma-separated ids. Errors name
// `what` (the flag) and the value: kInvalidInput for a malformed selector, kNotFound for an
// unknown id.
Result<std::vector<std::string>> select_shapes(const OperatorInfo& info, const OperatorDef& def,
                                               std::string_view spec,
                                               std::string_view what = "--shapes");

}  // namespace atrex::problems
