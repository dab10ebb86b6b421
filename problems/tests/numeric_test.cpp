#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "atrex/problems/numeric.h"

namespace atrex::num {
namespace {

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even -> 1.
  EXPECT_EQ(float_to_bf16(1.00390625f), 0x3f80);
  // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even) -> up.
  EXPECT_EQ(float_to_bf16(1.01171875f), 0x3f82);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_FLOAT_EQ(bf16_to_float(0x3fc0), 1.5f);
}

TEST(Bf16, NanStaysNanAndInfStaysInf) {
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  // The largest finite float rounds up to infinity in bf16, as __float2bfloat16_rn does.
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
}

TEST(Fp16, MatchesIeeeHalf) {
  EXPECT_EQ(float_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);                 // rounds to inf
  EXPECT_EQ(float_to_fp16(5.9604644775390625e-08f), 0x0001);  // smallest subnormal
  EXPECT_FLOAT_EQ(fp16_to_float(0x3555), 0.33325195f);
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite positive half round-trips
    ASSERT_EQ(float_to_fp16(fp16_to_float(static_cast<uint16_t>(h))), h);
  }
}

TEST(Rng, StandardNormalHasUnitMoments) {
  double sum = 0, sum2 = 0;
  constexpr int kN = 200000;
  for (int i = 0; i < kN; ++i) {
    double v = standard_normal(42, 7, static_cast<uint64_t>(i));
    sum += v;
    sum2 += v * v;
  }
  double mean = sum / kN, var = sum2 / kN - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.01);
}

TEST(Rng, StreamsAndSeedsDiffer) {
  EXPECT_NE(standard_normal(1, 0, 5), standard_normal(2, 0, 5));
  EXPECT_NE(standard_normal(1, 0, 5), standard_normal(1, 1, 5));
  EXPECT_EQ(standard_normal(1, 0, 5), standard_normal(1, 0, 5));
}

}  // namespace
}  // namespace atrex::num

namespace atrex::num {
namespace {

TEST(Fp8E4M3, KnownValuesAndRounding) {
  EXPECT_EQ(float_to_fp8e4m3(1.0f), 0x38);
  EXPECT_EQ(float_to_fp8e4m3(448.0f), 0x7e);
  EXPECT_EQ(float_to_fp8e4m3(-448.0f), 0xfe);
  EXPECT_EQ(float_to_fp8e4m3(464.0f), 0x7e);         // below the 480 boundary: rounds to 448
  EXPECT_EQ(float_to_fp8e4m3(480.0f), 0x7f);         // torch c10: >= 480 is NaN
  EXPECT_EQ(float_to_fp8e4m3(0.001953125f), 0x01);   // 2^-9, smallest subnormal
  EXPECT_EQ(float_to_fp8e4m3(0.0009765625f), 0x00);  // half of it: ties to even -> 0
  EXPECT_EQ(float_to_fp8e4m3(1.0625f), 0x38);        // halfway 1 and 1.125: even -> 1
  EXPECT_EQ(float_to_fp8e4m3(1.1875f), 0x3a);        // halfway 1.125 (odd) and 1.25: -> 1.25
  EXPECT_TRUE(std::isnan(fp8e4m3_to_float(0x7f)));
  EXPECT_FLOAT_EQ(fp8e4m3_to_float(0x7e), 448.0f);
  EXPECT_FLOAT_EQ(fp8e4m3_to_float(0x08), 0.015625f);  // 2^-6, smallest normal
}

TEST(Fp8E4M3, EveryFiniteCodeRoundTrips) {
  for (uint32_t v = 0; v < 256; ++v) {
    if ((v & 0x7f) == 0x7f) continue;
    ASSERT_EQ(float_to_fp8e4m3(fp8e4m3_to_float(static_cast<uint8_t>(v))), v) << v;
  }
}

TEST(Fp8E4M3, RoundsToTheNearestCode) {
  // For many floats, the chosen code is at least as close as its neighbours.
  for (float f = -460.f; f < 460.f; f += 0.37f) {
    const uint8_t c = float_to_fp8e4m3(f);
    const float d = std::fabs(fp8e4m3_to_float(c) - f);
    for (int delta : {-1, 1}) {
      const int n = (c & 0x7f) + delta;
      if (n < 0 || n > 0x7e) continue;
      const uint8_t nb = static_cast<uint8_t>((c & 0x80) | n);
      ASSERT_LE(d, std::fabs(fp8e4m3_to_float(nb) - f) + 1e-6f) << f;
    }
  }
}

}  // namespace
}  // namespace atrex::num
