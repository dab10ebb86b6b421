// Unit tests of operator group "rope_conv_delta" (problems/src/ops/rope_conv_delta_defs.cpp): hand-checkable cases,
// generator statistics, and resolution of every released shape.
#include <gtest/gtest.h>

#include "atrex/problems/operator.h"
