// Unit tests of operator group "attention" (problems/src/ops/attention_defs.cpp): hand-checkable cases,
// generator statistics, and resolution of every released shape.
#include <gtest/gtest.h>

#include "atrex/problems/operator.h"
