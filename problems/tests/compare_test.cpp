#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "atrex/problems/numeric.h"
#include "atrex/problems/compare.h"

namespace atrex::problems {
namespace {

TEST(Compare, WithinAtolPlusRtolPasses) {
  TensorDesc d{"out", DType::kF32, {3}};
  float ref[] = {1.0f, -2.0f, 0.0f};
  float cand[] = {1.05f, -2.1f,
                  0.009f};  // 0.05 <= 0.01 + 0.05 * 1; 0.1 <= 0.01 + 0.1; 0.009 <= 0.01
  auto r = compare_output(d, cand, ref, 1e-2, 5e-2);
  EXPECT_TRUE(r.pass) << r.message;
  EXPECT_NEAR(r.max_abs_error, 0.1, 1e-6);
}

TEST(Compare, OutsideToleranceNamesCoordinatesAndCount) {
  TensorDesc d{"out", DType::kF32, {2, 3}};
  float ref[] = {1, 1, 1, 1, 1, 1};
  float cand[] = {1, 1, 1, 1, 1.5f, 1};
  auto r = compare_output(d, cand, ref, 1e-2, 5e-2);
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.bad_count, 1);
  EXPECT_NE(r.message.find("out[1, 1]: got 1.5, expected 1"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("1 of 6 elements wrong"), std::string::npos);
}

TEST(Compare, NanWhereReferenceIsFiniteFails) {
  TensorDesc d{"out", DType::kBF16, {2}};
  uint16_t ref[] = {num::float_to_bf16(1.0f), num::float_to_bf16(2.0f)};
  uint16_t cand[] = {num::float_to_bf16(1.0f), 0x7fc0};
  auto r = compare_output(d, cand, ref, 1e-2, 5e-2);
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.message.find("non-finite"), std::string::npos);
}

TEST(Compare, InfiniteReferenceMustBeMatchedExactly) {
  TensorDesc d{"logits", DType::kF32, {3}};
  const float inf = std::numeric_limits<float>::infinity();
  float ref[] = {-inf, 0.5f, inf};
  float good[] = {-inf, 0.5f, inf};
  float bad[] = {-3e38f, 0.5f, inf};
  EXPECT_TRUE(compare_output(d, good, ref, 1e-2, 5e-2).pass);
  auto r = compare_output(d, bad, ref, 1e-2, 5e-2);
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.message.find("infinite"), std::string::npos);
}

TEST(Compare, LowSignalOutputIsJudgedRelativeToItsMagnitude) {
  // Quantisation scales ~2e-3: all zeros would pass atol 1e-2, so the test becomes relative.
  TensorDesc d{"scale", DType::kF32, {4}};
  float ref[] = {2e-3f, 1e-3f, 3e-3f, 2.5e-3f};
  float zeros[] = {0, 0, 0, 0};
  auto z = compare_output(d, zeros, ref, 1e-2, 5e-2);
  EXPECT_TRUE(z.low_signal);
  EXPECT_FALSE(z.pass) << "an all-zero output must not pass a low-signal comparison";
  float close[] = {2.02e-3f, 1.01e-3f, 2.99e-3f, 2.5e-3f};
  EXPECT_TRUE(compare_output(d, close, ref, 1e-2, 5e-2).pass);
}

TEST(Compare, AtolThatIsALargeFractionOfTheOutputMakesItLowSignal) {
  // fused_moe-like outputs: peak 0.02, many elements well below atol 1e-2. Zeros would fail on
  // the peaks, so the old rule did not engage, and an output that drops half of every
  // contribution (half the experts skipped) passed the absolute tolerance almost everywhere.
  TensorDesc d{"out", DType::kF32, {6}};
  float ref[] = {0.02f, -0.015f, 0.004f, -0.002f, 0.011f, 0.0005f};
  float half[6], honest[6];
  for (int i = 0; i < 6; ++i) {
    half[i] = ref[i] * 0.5f;
    honest[i] = ref[i] * 1.004f + 1e-5f;  // a bf16 rounding step and an fp32 ordering difference
  }
  auto h = compare_output(d, half, ref, 1e-2, 5e-2);
  EXPECT_TRUE(h.low_signal);
  EXPECT_FALSE(h.pass) << "dropping half of every contribution must fail a low-signal output";
  EXPECT_TRUE(compare_output(d, honest, ref, 1e-2, 5e-2).pass);
  // The same output scaled up 100x (max 2.0: atol is 0.5% of it) is judged by plain allclose.
  float big[6], big_half[6];
  for (int i = 0; i < 6; ++i) big[i] = ref[i] * 100, big_half[i] = half[i] * 100;
  auto b = compare_output(d, big_half, big, 1e-2, 5e-2);
  EXPECT_FALSE(b.low_signal);
  EXPECT_FALSE(b.pass);
}

TEST(Compare, LowSignalEngagesAtTheDocumentedFraction) {
  TensorDesc d{"out", DType::kF32, {2}};
  float below[] = {0.05f, -0.2f};  // atol 1e-2 is 5% of max|r| = 0.2: allclose
  float above[] = {0.05f, -0.09f};  // atol 1e-2 is 11% of max|r| = 0.09: low-signal
  EXPECT_FALSE(compare_output(d, below, below, 1e-2, 5e-2).low_signal);
  EXPECT_TRUE(compare_output(d, above, above, 1e-2, 5e-2).low_signal);
  EXPECT_TRUE(is_low_signal(false, 0.1, 0.1 * kLowSignalFraction));
  EXPECT_FALSE(is_low_signal(false, 0.1, 0.099 * kLowSignalFraction));
  EXPECT_FALSE(is_low_signal(false, 0.0, 1e-2)) << "an all-zero reference is decided by zeros";
}

TEST(Compare, NormalOutputIsNotLowSignal) {
  TensorDesc d{"out", DType::kF32, {2}};
  float ref[] = {0.5f, 1.0f};
  float cand[] = {0.5f, 1.0f};
  EXPECT_FALSE(compare_output(d, cand, ref, 1e-2, 5e-2).low_signal);
}

TEST(Compare, IntegersMustMatchExactly) {
  TensorDesc d{"ids", DType::kI32, {3}};
  int32_t ref[] = {1, 2, 3};
  int32_t cand[] = {1, 2, 4};
  EXPECT_FALSE(compare_output(d, cand, ref, 1e-2, 5e-2).pass);
  int32_t same[] = {1, 2, 3};
  EXPECT_TRUE(compare_output(d, same, ref, 1e-2, 5e-2).pass);
}

}  // namespace
}  // namespace atrex::problems
