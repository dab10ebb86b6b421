// Unit tests of operator group "moe_gemm" (problems/src/ops/moe_gemm_defs.cpp): hand-checkable cases,
// generator statistics, and resolution of every released shape.
#include <gtest/gtest.h>

#include "atrex/problems/operator.h"
