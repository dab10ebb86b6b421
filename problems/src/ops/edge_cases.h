// The operators' edge-case input rewrites (operator.h EdgeCase), attached to the native operator
// table by name (operators.cpp): one table, so the per-operator choice reads in one place.
#pragma once

#include <vector>

#include "atrex/problems/operator.h"

namespace atrex::problems::ops {

void attach_edge_cases(std::vector<OperatorDef>& ops);

}  // namespace atrex::problems::ops
