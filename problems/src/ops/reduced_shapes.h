// The operators' reduced shapes (operator.h ReducedShape), attached to the native operator table
// by name (operators.cpp): one table, so which operators have them, and why, reads in one place.
#pragma once

#include <vector>

#include "atrex/problems/operator.h"

namespace atrex::problems::ops {

void attach_reduced_shapes(std::vector<OperatorDef>& ops);

}  // namespace atrex::problems::ops
