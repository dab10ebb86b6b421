// The device versions of the operators' own comparisons
// (problems/src/cuda/compare_custom*.{cpp,cu}) must agree exactly with the host functions the child
// falls back to (TensorSpec::compare: quant_norm_compare.h, moe_gemm_compare.h): verdict,
// wrong-element count, low-signal flag and maximum errors, on passing and failing candidates and on
// every pair of fp8 bytes. Needs a CUDA device (label gpu).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "atrex/problems/compare.h"
#include "atrex/problems/cuda_ops.h"
#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"
#include "atrex/problems/suite.h"

namespace atrex::problems {
namespace {

using Buffers = std::vector<std::vector<uint8_t>>;

ResolvedShape resolve(const char* op, Json params) {
  const OperatorDef* def = find_native_operator(op);
  EXPECT_NE(def, nullptr) << op;
  if (!def) return {};
  Shape shape;
  shape.id = "t";
  shape.params = std::move(params);
  auto r = resolve_shape(*def, shape);
  EXPECT_TRUE(r) << r.error().message;
  return r ? *r : ResolvedShape{};
}

// The CPU reference's outputs for inputs drawn with `seed`.
Buffers reference_outputs(const ResolvedShape& s, uint64_t seed) {
  Buffers in(s.inputs.size()), out(s.outputs.size());
  std::vector<const void*> in_p;
  std::vector<void*> out_p;
  for (size_t i = 0; i < in.size(); ++i) {
    in[i].resize(s.inputs[i].bytes());
    generate_input_cpu(s, i, seed, in[i].data());
    in_p.push_back(in[i].data());
  }
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].resize(s.outputs[i].bytes());
    out_p.push_back(out[i].data());
  }
  s.def->reference_cpu(s, in_p, out_p);
  return out;
}

float get_f32(const std::vector<uint8_t>& b, size_t i) {
  float f;
  std::memcpy(&f, b.data() + i * sizeof f, sizeof f);
  return f;
}
void set_f32(std::vector<uint8_t>& b, size_t i, float f) {
  std::memcpy(b.data() + i * sizeof f, &f, sizeof f);
}

// Index of the first positive normal fp8 value below 0x70 (so +2 bytes stays a finite value).
size_t first_positive_normal(const std::vector<uint8_t>& q) {
  size_t i = 0;
  while (i < q.size() && !(q[i] >= 0x20 && q[i] < 0x70)) ++i;
  return i;
}

class GpuCustomCompareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
  }
  void TearDown() override {
    for (void* p : owned_) cudaFree(p);
  }
  void* upload(const std::vector<uint8_t>& host) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(host.size(), 16)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
    owned_.push_back(p);
    return p;
  }
  // Output `index`'s own comparison on the host (as the child's fallback runs it) and on the
  // device: the device version must exist and give the same figures. Returns the host's.
  CompareResult both(const ResolvedShape& s, size_t index, const Buffers& cand, const Buffers& ref,
                     double atol = 1e-2, double rtol = 5e-2) {
    std::vector<const void*> host_c, host_r, dev_c, dev_r;
    for (const auto& b : cand) {
      host_c.push_back(b.data());
      dev_c.push_back(upload(b));
    }
    for (const auto& b : ref) {
      host_r.push_back(b.data());
      dev_r.push_back(upload(b));
    }
    const std::string what = s.def->name + " output " + s.outputs[index].name;
    const CompareResult host =
        s.def->outputs[index].compare(s, index, host_c, host_r, {}, atol, rtol);
    CompareResult dev;
    bool supported = false;
    const auto compared =
        cuda::compare_custom_output(s, index, dev_c, dev_r, atol, rtol, nullptr, dev, supported);
    EXPECT_TRUE(compared) << what << ": " << compared.error().message;
    EXPECT_TRUE(supported) << what;
    EXPECT_EQ(dev.pass, host.pass) << what;
    EXPECT_EQ(dev.bad_count, host.bad_count) << what;
    EXPECT_EQ(dev.low_signal, host.low_signal) << what;
    EXPECT_EQ(dev.max_abs_error, host.max_abs_error) << what;
    EXPECT_EQ(dev.max_rel_error, host.max_rel_error) << what;
    return host;
  }
  std::vector<void*> owned_;
};

// The three quantisation operators on their own reference outputs: a one-step rounding flip of
// q passes, two steps or a NaN fail, a NaN reference must be matched; scales twice the
// reference's fail both the dequantised q and the relative scale comparison.
TEST_F(GpuCustomCompareTest, Fp8QuantOutputsOneStepPassesTwoStepsNaNAndDoubledScalesFail) {
  const std::vector<std::pair<const char*, Json>> cases = {
      {"fp8_dynamic_per_token_quant", {{"token_count", 64}, {"hidden_size", 512}}},
      {"per_token_group_quant_fp8",
       {{"group_size", 128}, {"token_count", 64}, {"hidden_size", 512}}},
      {"fused_rmsnorm_quant", {{"token_count", 64}, {"hidden_size", 512}}}};
  for (const auto& [op, params] : cases) {
    SCOPED_TRACE(op);
    const ResolvedShape s = resolve(op, params);
    ASSERT_NE(s.def, nullptr);
    const Buffers ref = reference_outputs(s, 3);
    EXPECT_TRUE(both(s, 0, ref, ref).pass);
    EXPECT_TRUE(both(s, 1, ref, ref).pass);

    Buffers flip = ref;  // positive fp8 bytes are monotonic: +1 is the next grid value
    for (size_t i = 0; i < flip[0].size(); i += 7) {
      if ((flip[0][i] & 0x80) == 0 && flip[0][i] < 0x7d) flip[0][i] += 1;
    }
    const CompareResult one = both(s, 0, flip, ref);
    EXPECT_TRUE(one.pass);
    EXPECT_GT(one.max_abs_error, 0);

    Buffers two = ref;
    const size_t k = first_positive_normal(two[0]);
    ASSERT_LT(k, two[0].size());
    two[0][k] += 2;
    EXPECT_EQ(both(s, 0, two, ref).bad_count, 1);

    Buffers nan = ref, ref_nan = ref;
    nan[0][100] = 0xff;  // the runner's poison byte, NaN in e4m3
    EXPECT_EQ(both(s, 0, nan, ref).bad_count, 1);
    ref_nan[0][100] = 0x7f;
    EXPECT_EQ(both(s, 0, nan, ref_nan).bad_count, 0)
        << "a NaN reference is matched by a NaN of either sign";
    EXPECT_EQ(both(s, 0, ref, ref_nan).bad_count, 1)
        << "a NaN reference is not matched by a finite value";

    Buffers doubled = ref, ulp = ref;
    const size_t scales = static_cast<size_t>(s.outputs[1].numel());
    for (size_t i = 0; i < scales; ++i) {
      set_f32(doubled[1], i, 2 * get_f32(ref[1], i));
      set_f32(ulp[1], i, std::nextafter(get_f32(ref[1], i), 1.0f));
    }
    EXPECT_FALSE(both(s, 0, doubled, ref).pass);
    const CompareResult scale2 = both(s, 1, doubled, ref);
    EXPECT_EQ(scale2.bad_count, static_cast<int64_t>(scales)) << "atol must not apply to scales";
    EXPECT_TRUE(both(s, 1, ulp, ref).pass);
    EXPECT_TRUE(both(s, 0, ulp, ref).pass);
  }
}

// Every (candidate, reference) pair of fp8 bytes, 32 times over with different scales, on
// 2^21 elements (more than the device grid's threads: two grid-stride rounds): NaN, signs,
// subnormals, the step at each binade and the rtol term.
TEST_F(GpuCustomCompareTest, Fp8DequantisedAgreesOnEveryBytePair) {
  const ResolvedShape s =
      resolve("per_token_group_quant_fp8",
              {{"group_size", 64}, {"token_count", 16384}, {"hidden_size", 128}});
  ASSERT_NE(s.def, nullptr);
  const size_t n = static_cast<size_t>(s.outputs[0].numel()),
               scales = static_cast<size_t>(s.outputs[1].numel());
  ASSERT_EQ(n, size_t{1} << 21);
  Buffers cand = {std::vector<uint8_t>(n), std::vector<uint8_t>(scales * 4)}, ref = cand;
  for (size_t i = 0; i < n; ++i) {
    cand[0][i] = static_cast<uint8_t>(i >> 8);
    ref[0][i] = static_cast<uint8_t>(i);
  }
  for (size_t g = 0; g < scales; ++g) {
    const float r = 0.01f * (1.0f + static_cast<float>(g % 97) / 16.0f);
    set_f32(ref[1], g, r);
    set_f32(cand[1], g, g % 3 == 0 ? r : g % 3 == 1 ? std::nextafter(r, 1.0f) : r * 1.03f);
  }
  const CompareResult plain = both(s, 0, cand, ref);
  EXPECT_FALSE(plain.pass);
  EXPECT_GT(plain.bad_count, 0);
  EXPECT_LT(plain.bad_count, static_cast<int64_t>(n));
  EXPECT_TRUE(std::isfinite(plain.max_abs_error));

  // The same bytes pass with scales within rtol (one ulp, 3%). Then non-finite and zero scales:
  // 0 * NaN and NaN scales make NaN products, an infinite reference product makes |diff| inf
  // and |diff| / |ref| NaN (left out of the maximum on the host).
  cand[0] = ref[0];
  EXPECT_TRUE(both(s, 0, cand, ref).pass);
  const float inf = std::numeric_limits<float>::infinity(),
              nan = std::numeric_limits<float>::quiet_NaN();
  set_f32(ref[1], 5, 0.0f);
  set_f32(ref[1], 7, inf);
  set_f32(cand[1], 9, nan);
  set_f32(cand[1], 11, inf);
  set_f32(ref[1], 13, nan);
  set_f32(cand[1], 15, 0.0f);
  const CompareResult special = both(s, 0, cand, ref);
  EXPECT_GT(special.bad_count, 0);
  EXPECT_TRUE(std::isinf(special.max_abs_error));
  EXPECT_TRUE(std::isfinite(special.max_rel_error));
}

// A reference of all-zero scales makes the relative scale comparison low-signal (atol 0 there).
TEST_F(GpuCustomCompareTest, ScaleRelativeLowSignalAndNaN) {
  const ResolvedShape s =
      resolve("fp8_dynamic_per_token_quant", {{"token_count", 1000}, {"hidden_size", 16}});
  ASSERT_NE(s.def, nullptr);
  Buffers ref = {std::vector<uint8_t>(16'000), std::vector<uint8_t>(4000)}, cand = ref;
  const CompareResult zero = both(s, 1, cand, ref);
  EXPECT_TRUE(zero.pass);
  EXPECT_TRUE(zero.low_signal);
  set_f32(cand[1], 999, 1e-30f);
  EXPECT_EQ(both(s, 1, cand, ref).bad_count, 1);
  for (size_t i = 0; i < 1000; ++i) set_f32(ref[1], i, 1e-3f * static_cast<float>(i % 13 + 1));
  cand = ref;
  set_f32(cand[1], 0, std::numeric_limits<float>::quiet_NaN());
  set_f32(cand[1], 500, get_f32(ref[1], 500) * 1.04f);  // within rtol
  set_f32(cand[1], 501, get_f32(ref[1], 501) * 1.06f);  // beyond it
  const CompareResult r = both(s, 1, cand, ref, 1e-2, 5e-2);
  EXPECT_FALSE(r.low_signal);
  EXPECT_EQ(r.bad_count, 2);
}

// fp8_blockscale_fused_moe's out: every byte pair, then the hand cases of the host unit test
// (one step passes, two fail, NaN only next to ±448 of its sign).
TEST_F(GpuCustomCompareTest, Fp8OutputAgreesOnEveryBytePairAndOverflowRules) {
  const ResolvedShape s = resolve("fp8_blockscale_fused_moe", {{"num_experts", 1},
                                                               {"intermediate_size", 128},
                                                               {"top_k", 1},
                                                               {"token_count", 512},
                                                               {"hidden_size", 128}});
  ASSERT_NE(s.def, nullptr);
  ASSERT_EQ(s.outputs[0].numel(), 65536);
  Buffers cand = {std::vector<uint8_t>(65536)}, ref = cand;
  for (size_t i = 0; i < 65536; ++i) {
    cand[0][i] = static_cast<uint8_t>(i >> 8);
    ref[0][i] = static_cast<uint8_t>(i);
  }
  const CompareResult all = both(s, 0, cand, ref);
  EXPECT_GT(all.bad_count, 0);
  EXPECT_LT(all.bad_count, 65536);
  both(s, 0, cand, ref, 0.0, 0.0);

  ref = {std::vector<uint8_t>(65536, num::float_to_fp8e4m3(8))};
  cand = ref;
  cand[0][0] = num::float_to_fp8e4m3(9);  // one step
  EXPECT_TRUE(both(s, 0, cand, ref).pass);
  cand[0][0] = num::float_to_fp8e4m3(10);  // two steps
  EXPECT_EQ(both(s, 0, cand, ref).bad_count, 1);
  cand[0][0] = ref[0][0];
  ref[0][1] = 0xff;  // torch's overflow NaN, negative
  cand[0][1] = num::float_to_fp8e4m3(-448);
  EXPECT_TRUE(both(s, 0, cand, ref).pass) << "saturation next to overflow";
  cand[0][1] = num::float_to_fp8e4m3(448);
  EXPECT_EQ(both(s, 0, cand, ref).bad_count, 1) << "wrong sign";
  cand[0][1] = ref[0][1];
  cand[0][65535] = 0x7f;  // NaN where the reference is a finite 8, in the last element
  EXPECT_EQ(both(s, 0, cand, ref).bad_count, 1);
}

// Comparisons without a device version are left to the host, and nothing is read.
TEST_F(GpuCustomCompareTest, RoutingComparisonsStayOnTheHost) {
  const ResolvedShape s = resolve("moe_count_and_sort", {{"token_count", 4}, {"top_k", 2}});
  ASSERT_NE(s.def, nullptr);
  ASSERT_NE(s.def->outputs[0].compare, nullptr);
  const std::vector<const void*> none(s.outputs.size(), nullptr);
  CompareResult r;
  bool supported = true;
  EXPECT_TRUE(cuda::compare_custom_output(s, 0, none, none, 1e-2, 5e-2, nullptr, r, supported));
  EXPECT_FALSE(supported);
}

}  // namespace
}  // namespace atrex::problems
