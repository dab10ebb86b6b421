// Unit tests of operator group "quant_norm" (problems/src/ops/quant_norm_defs.cpp): hand-checkable cases,
// generator statistics, and resolution of every released shape.
#include <gtest/gtest.h>

#include "atrex/problems/operator.h"
