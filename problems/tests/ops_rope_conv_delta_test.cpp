// Unit tests of operator group "rope_conv_delta" (problems/src/ops/rope_conv_delta_defs.cpp):
// hand-checkable cases, generator statistics, and resolution of every released shape.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "atrex/problems/compare.h"
#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"
#include "atrex/problems/suite.h"
#include "ops/rope_conv_delta_chunk.h"
#include "ops/rope_conv_delta_ops.h"
#include "op_test_util.h"

namespace atrex::problems {
namespace {

using test_util::bf16;
using test_util::resolve;
using test_util::run;

using num::bf16_to_float;
using num::float_to_bf16;

float rope_expect(float x, float partner_term_sign, float partner, float angle) {
  return x * std::cos(angle) + partner_term_sign * partner * std::sin(angle);
}

// ---- fused_qkv_rope ---------------------------------------------------------------------------

TEST(FusedQkvRope, RotatesHalvesByPositionAndCopiesV) {
  auto s = resolve("fused_qkv_rope", {{"total_tokens", 2},
                                      {"num_heads", 1},
                                      {"num_kv_heads", 1},
                                      {"head_dim", 4},
                                      {"rope_dim", 4}});
  ASSERT_EQ(s.inputs[0].dims, (std::vector<int64_t>{2, 12}));
  // token 0 (position 0) then token 1 (position 1); heads q | k | v.
  auto qkv = bf16({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,  //
                   1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  std::vector<int32_t> pos{0, 1};
  std::vector<uint16_t> q(8), k(8), v(8);
  run(s, {qkv.data(), pos.data()}, {q.data(), k.data(), v.data()});
  for (int d = 0; d < 4; ++d)
    EXPECT_EQ(bf16_to_float(q[d]), d + 1.0f) << "position 0 is the identity";
  // inv_freq = [1, 10000^-0.5 = 0.01]; lanes (0, 2) turn by 1 rad, lanes (1, 3) by 0.01 rad.
  EXPECT_EQ(q[4], float_to_bf16(rope_expect(1, -1, 3, 1.0f)));
  EXPECT_EQ(q[5], float_to_bf16(rope_expect(2, -1, 4, 0.01f)));
  EXPECT_EQ(q[6], float_to_bf16(rope_expect(3, 1, 1, 1.0f)));
  EXPECT_EQ(q[7], float_to_bf16(rope_expect(4, 1, 2, 0.01f)));
  EXPECT_EQ(k[4], float_to_bf16(rope_expect(5, -1, 7, 1.0f)));
  for (int d = 0; d < 4; ++d) EXPECT_EQ(bf16_to_float(v[4 + d]), 9.0f + d) << "v is not rotated";
}

TEST(FusedQkvRope, PartialRopeDimPassesTrailingLanes) {
  auto s = resolve("fused_qkv_rope", {{"total_tokens", 1},
                                      {"num_heads", 1},
                                      {"num_kv_heads", 1},
                                      {"head_dim", 4},
                                      {"rope_dim", 2},
                                      {"rope_base", 100.0}});
  auto qkv = bf16({1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0});
  std::vector<int32_t> pos{2};
  std::vector<uint16_t> q(4), k(4), v(4);
  run(s, {qkv.data(), pos.data()}, {q.data(), k.data(), v.data()});
  EXPECT_EQ(q[0], float_to_bf16(rope_expect(1, -1, 2, 2.0f)));  // pairs (0, 1), angle 2 * 1
  EXPECT_EQ(q[1], float_to_bf16(rope_expect(2, 1, 1, 2.0f)));
  EXPECT_EQ(bf16_to_float(q[2]), 3.0f);
  EXPECT_EQ(bf16_to_float(q[3]), 4.0f);
}

TEST(FusedQkvRope, Fp16DtypeSwitchesTensorsAndArithmetic) {
  auto s = resolve("fused_qkv_rope", {{"total_tokens", 2},
                                      {"num_heads", 1},
                                      {"num_kv_heads", 1},
                                      {"head_dim", 2},
                                      {"rope_dim", 2},
                                      {"dtype", "fp16"}});
  EXPECT_EQ(s.inputs[0].dtype, DType::kF16);
  for (const auto& o : s.outputs) EXPECT_EQ(o.dtype, DType::kF16);
  std::vector<uint16_t> qkv;
  for (float f : {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f})
    qkv.push_back(num::float_to_fp16(f));
  std::vector<int32_t> pos{0, 1};
  std::vector<uint16_t> q(4), k(4), v(4);
  run(s, {qkv.data(), pos.data()}, {q.data(), k.data(), v.data()});
  EXPECT_EQ(q[2], num::float_to_fp16(rope_expect(1, -1, 2, 1.0f)));
  EXPECT_EQ(num::fp16_to_float(v[3]), 6.0f);
}

TEST(FusedQkvRope, BiasAndUnknownDtypeAreRejected) {
  const OperatorDef* def = find_native_operator("fused_qkv_rope");
  ASSERT_NE(def, nullptr);
  Shape s;
  s.id = "x";
  s.params = {{"total_tokens", 1}, {"num_heads", 1}, {"num_kv_heads", 1},
              {"head_dim", 4},     {"rope_dim", 4},  {"with_bias", true}};
  EXPECT_FALSE(resolve_shape(*def, s));
  s.params["with_bias"] = false;
  s.params["dtype"] = "fp32";
  EXPECT_FALSE(resolve_shape(*def, s));
}

// ---- mrope --------------------------------------------------------------------------------------

TEST(Mrope, SectionedAxisMapFollowsSectionBoundaries) {
  ops::MropeHead f{};
  f.s0 = 16, f.s1 = 24, f.s2 = 24;
  EXPECT_EQ(f.axis(15), 0);
  EXPECT_EQ(f.axis(16), 1);
  EXPECT_EQ(f.axis(39), 1);
  EXPECT_EQ(f.axis(40), 2);
  EXPECT_EQ(f.axis(63), 2);
}

TEST(Mrope, InterleavedAxisMapCyclesThroughTHW) {
  ops::MropeHead f{};
  f.s0 = 24, f.s1 = 20, f.s2 = 20, f.interleaved = true;
  EXPECT_EQ(f.axis(0), 0);
  EXPECT_EQ(f.axis(1), 1);
  EXPECT_EQ(f.axis(2), 2);
  EXPECT_EQ(f.axis(3), 0);
  EXPECT_EQ(f.axis(58), 1);  // 58 % 3 == 1, 58 <= 60
  EXPECT_EQ(f.axis(61), 0);  // 61 % 3 == 1 but past 3 * s1
  EXPECT_EQ(f.axis(62), 0);  // 62 % 3 == 2 but past 3 * s2
}

// T = 2, one q head and one k head of 4 lanes, half = 2, sections [1, 1, 0]: frequency 0 reads
// axis 0, frequency 1 reads axis 1. Token 1 turns frequency 0 by 90 degrees (cos 0, sin 1) and
// leaves frequency 1 alone; every other table entry is 0.5 so a wrong axis shows.
struct MropeCase {
  std::vector<float> cos = std::vector<float>(12, 0.5f), sin = std::vector<float>(12, 0.5f);
  MropeCase() {
    auto at = [](int axis, int t, int f) { return (axis * 2 + t) * 2 + f; };
    cos[at(0, 1, 0)] = 0, sin[at(0, 1, 0)] = 1;
    cos[at(1, 1, 1)] = 1, sin[at(1, 1, 1)] = 0;
  }
};

TEST(Mrope, NeoxPairsUseTheirAxisRow) {
  auto s = resolve("mrope", {{"token_count", 2},
                             {"num_query_heads", 1},
                             {"num_kv_heads", 1},
                             {"head_size", 4},
                             {"rotary_dim", 4},
                             {"mrope_section", {1, 1, 0}}});
  MropeCase c;
  auto q = bf16({0, 0, 0, 0, 1, 2, 3, 4}), k = bf16({0, 0, 0, 0, 5, 6, 7, 8});
  std::vector<uint16_t> qo(8), ko(8);
  run(s, {q.data(), k.data(), c.cos.data(), c.sin.data()}, {qo.data(), ko.data()});
  // pairs (0, 2) and (1, 3): (x1, x2) -> (x1 c - x2 s, x2 c + x1 s)
  EXPECT_EQ(bf16_to_float(qo[4]), -3.0f);
  EXPECT_EQ(bf16_to_float(qo[6]), 1.0f);
  EXPECT_EQ(bf16_to_float(qo[5]), 2.0f);
  EXPECT_EQ(bf16_to_float(qo[7]), 4.0f);
  EXPECT_EQ(bf16_to_float(ko[4]), -7.0f);
  EXPECT_EQ(bf16_to_float(ko[6]), 5.0f);
  EXPECT_EQ(bf16_to_float(qo[0]), 0.0f);
}

TEST(Mrope, GptjPairsAreAdjacentLanes) {
  auto s = resolve("mrope", {{"token_count", 2},
                             {"num_query_heads", 1},
                             {"num_kv_heads", 1},
                             {"head_size", 4},
                             {"rotary_dim", 4},
                             {"mrope_section", {1, 1, 0}},
                             {"is_neox_style", false}});
  MropeCase c;
  auto q = bf16({0, 0, 0, 0, 1, 2, 3, 4}), k = bf16({0, 0, 0, 0, 0, 0, 0, 0});
  std::vector<uint16_t> qo(8), ko(8);
  run(s, {q.data(), k.data(), c.cos.data(), c.sin.data()}, {qo.data(), ko.data()});
  // pairs (0, 1) turn by 90 degrees, (2, 3) stay
  EXPECT_EQ(bf16_to_float(qo[4]), -2.0f);
  EXPECT_EQ(bf16_to_float(qo[5]), 1.0f);
  EXPECT_EQ(bf16_to_float(qo[6]), 3.0f);
  EXPECT_EQ(bf16_to_float(qo[7]), 4.0f);
}

TEST(Mrope, CosAndSinShareOneAngleDraw) {
  auto s = resolve("mrope", {{"token_count", 512},
                             {"num_query_heads", 1},
                             {"num_kv_heads", 1},
                             {"head_size", 128},
                             {"rotary_dim", 128},
                             {"mrope_section", {16, 24, 24}}});
  const size_t n = static_cast<size_t>(s.inputs[2].numel());
  ASSERT_EQ(n, 3u * 512 * 64);
  std::vector<float> c(n), sn(n);
  generate_input_cpu(s, 2, 7, c.data());
  generate_input_cpu(s, 3, 7, sn.data());
  double sum = 0, sum2 = 0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(c[i] * c[i] + sn[i] * sn[i], 1.0, 1e-6);
    const double angle = std::atan2(sn[i], c[i]);
    sum += angle;
    sum2 += angle * angle;
  }
  EXPECT_NEAR(sum / n, 0.0, 2e-3);
  EXPECT_NEAR(std::sqrt(sum2 / n), 0.1, 2e-3);  // angles = randn * 0.1
}

// ---- causal_conv1d ------------------------------------------------------------------------------

// One channel, width 3: padded = [s0, s1, x0, x1]; out[t] = b + w0 p[t] + w1 p[t+1] + w2 p[t+2].
TEST(CausalConv1d, WindowStartsInInitialState) {
  auto s = resolve("causal_conv1d",
                   {{"token_count", 2}, {"dim", 1}, {"width", 3}, {"activation", "none"}});
  ASSERT_EQ(s.inputs[3].dims, (std::vector<int64_t>{1, 1, 2}));
  auto x = bf16({4, 8}), w = bf16({1, 2, 0.5f}), b = bf16({0.25f}), st = bf16({1, 2});
  std::vector<uint16_t> out(2);
  run(s, {x.data(), w.data(), b.data(), st.data()}, {out.data()});
  EXPECT_EQ(bf16_to_float(out[0]), 0.25f + 1 * 1 + 2 * 2 + 0.5f * 4);  // 7.25
  EXPECT_EQ(bf16_to_float(out[1]), 0.25f + 1 * 2 + 2 * 4 + 0.5f * 8);  // 14.25
}

TEST(CausalConv1d, SiluAppliesToTheRoundedConv) {
  auto s = resolve("causal_conv1d", {{"token_count", 1}, {"dim", 2}, {"width", 2}});
  auto x = bf16({1, -1}), w = bf16({0, 1, 0, 1}), b = bf16({0, 0}), st = bf16({0, 0});
  std::vector<uint16_t> out(2);
  run(s, {x.data(), w.data(), b.data(), st.data()}, {out.data()});
  EXPECT_EQ(out[0], float_to_bf16(1.0f / (1.0f + std::exp(-1.0f))));  // silu(1)
  EXPECT_EQ(out[1], float_to_bf16(-1.0f / (1.0f + std::exp(1.0f))));  // silu(-1)
}

// ---- chunk_delta_rule_output
// ---------------------------------------------------------------------

// dk = dv = 1, chunk 2, T = 3: q = [1, 2, 1], k = [1, 1, 2], v = [1, 2, 3], h = [0.5, 0.25] per
// chunk.
struct ChunkOutputCase {
  std::vector<uint16_t> q = bf16({1, 2, 1}), k = bf16({1, 1, 2}), v = bf16({1, 2, 3}),
                        h = bf16({0.5f, 0.25f});
  std::vector<uint16_t> out = std::vector<uint16_t>(3);
  void run_with(const ResolvedShape& s, std::vector<float> g) {
    run(s, {q.data(), k.data(), v.data(), h.data(), g.data()}, {out.data()});
  }
};

Json chunk_output_params() {
  return {{"batch_size", 1}, {"token_count", 3}, {"num_q_heads", 1}, {"num_v_heads", 1},
          {"key_dim", 1},    {"value_dim", 1},   {"chunk_size", 2}};
}

TEST(ChunkDeltaRuleOutput, IntraChunkIsCausalAndChunksRestart) {
  auto s = resolve("chunk_delta_rule_output", chunk_output_params());
  ASSERT_EQ(s.inputs[3].dims, (std::vector<int64_t>{1, 2, 1, 1, 1}));  // ceil(3 / 2) chunks
  ChunkOutputCase c;
  c.run_with(s, {0, 0, 0});
  EXPECT_EQ(bf16_to_float(c.out[0]), 0.5f + 1 * 1);          // q0 h0 + (q0 k0) v0
  EXPECT_EQ(bf16_to_float(c.out[1]), 1.0f + 2 * 1 + 2 * 2);  // q1 h0 + (q1 k0) v0 + (q1 k1) v1
  EXPECT_EQ(bf16_to_float(c.out[2]), 0.25f + 2 * 3);         // chunk 1: q2 h1 + (q2 k2) v2
}

TEST(ChunkDeltaRuleOutput, GateDecaysStateAndMasksIncreasingG) {
  auto s = resolve("chunk_delta_rule_output", chunk_output_params());
  ChunkOutputCase c;
  c.run_with(s, {-0.5f, 0, 0});
  // t = 0: q0 h0 exp(-0.5) + (q0 k0) exp(0) v0; t = 1: g1 - g0 = 0.5 > 0 masks s = 0.
  EXPECT_EQ(c.out[0], float_to_bf16(0.5f * std::exp(-0.5f) + 1.0f));
  EXPECT_EQ(bf16_to_float(c.out[1]), 1.0f + 2 * 2);
  c.run_with(s, {0, -0.5f, 0});
  // t = 1: g1 - g0 = -0.5 keeps s = 0 with weight bf16(2 exp(-0.5)).
  EXPECT_EQ(c.out[1],
            float_to_bf16(std::exp(-0.5f) + num::round_bf16(2 * std::exp(-0.5f)) * 1 + 2 * 2));
}

TEST(ChunkDeltaRuleOutput, ScaleDefaultsToInverseSqrtKeyDim) {
  Json p = chunk_output_params();
  p["scale"] = 0.5;
  auto s = resolve("chunk_delta_rule_output", p);
  ChunkOutputCase c;
  c.run_with(s, {0, 0, 0});
  EXPECT_EQ(bf16_to_float(c.out[2]), (0.25f + 6) * 0.5f);
  p.erase("scale");
  p["key_dim"] = 4;
  EXPECT_FLOAT_EQ(ops::delta_rule_scale(resolve("chunk_delta_rule_output", p)), 0.5f);
}

TEST(ChunkDeltaRuleOutput, VHeadsShareQHeadsInGroups) {
  EXPECT_EQ(ops::shared_head(3, 4, 2), 1);  // 2 v heads per q head
  EXPECT_EQ(ops::shared_head(1, 4, 2), 0);
  EXPECT_EQ(ops::shared_head(2, 3, 2), 1);  // 3 / 2 = 1 per group, clamped to the last q head
  EXPECT_EQ(ops::shared_head(1, 2, 4), 1);  // more q heads than v heads
}

// ---- chunk_gated_delta_rule_state
// ----------------------------------------------------------------

// dk = dv = 1, chunk 2, T = 3, slots [0.5, 9], batch 0 -> slot 0; w = 1, k = [1, 1, 2], u = [2, 3,
// 4].
struct ChunkStateCase {
  std::vector<uint16_t> k = bf16({1, 1, 2}), w = bf16({1, 1, 1}), u = bf16({2, 3, 4});
  std::vector<float> init{0.5f, 9.0f};
  std::vector<int32_t> idx{0};
  std::vector<uint16_t> h = std::vector<uint16_t>(2), v_new = std::vector<uint16_t>(3);
  std::vector<float> final_state = init;  // the output starts as initial_state (initial_from)
  void run_with(const ResolvedShape& s, std::vector<float> g) {
    run(s, {k.data(), w.data(), u.data(), g.data(), init.data(), idx.data()},
        {h.data(), v_new.data(), final_state.data()});
  }
};

Json chunk_state_params() {
  return {{"batch_size", 1}, {"token_count", 3}, {"num_k_heads", 1}, {"num_v_heads", 1},
          {"key_dim", 1},    {"value_dim", 1},   {"state_count", 2}, {"chunk_size", 2}};
}

TEST(ChunkGatedDeltaRuleState, StateAdvancesPerChunkAndOtherSlotsStay) {
  auto s = resolve("chunk_gated_delta_rule_state", chunk_state_params());
  ASSERT_EQ(s.outputs[0].dims, (std::vector<int64_t>{1, 2, 1, 1, 1}));
  ChunkStateCase c;
  c.run_with(s, {0, 0, 0});
  // chunk 0: v = [2 - 0.5, 3 - 0.5]; h = 0.5 + 1 * 1.5 + 1 * 2.5 = 4.5. chunk 1: v = 4 - 4.5; h
  // = 4.5 + 2 * -0.5.
  EXPECT_EQ(bf16_to_float(c.h[0]), 0.5f);
  EXPECT_EQ(bf16_to_float(c.h[1]), 4.5f);
  EXPECT_EQ(bf16_to_float(c.v_new[0]), 1.5f);
  EXPECT_EQ(bf16_to_float(c.v_new[1]), 2.5f);
  EXPECT_EQ(bf16_to_float(c.v_new[2]), -0.5f);
  EXPECT_EQ(c.final_state[0], 3.5f);
  EXPECT_EQ(c.final_state[1], 9.0f) << "a slot no batch entry names must keep its value";
}

TEST(ChunkGatedDeltaRuleState, GateMasksEarlierLargerGAndDecaysState) {
  auto s = resolve("chunk_gated_delta_rule_state", chunk_state_params());
  ChunkStateCase c;
  c.run_with(s, {-1, 0, 0});
  // chunk 0: g_last = 0; token 0 has g_last - g0 = 1 > 0: its update is masked; h = 0.5 + 2.5.
  EXPECT_EQ(bf16_to_float(c.h[1]), 3.0f);
  ChunkStateCase d;
  d.run_with(s, {0, -1, 0});
  // chunk 0: g_last = -1: h = 0.5 e^-1 + bf16(1.5 e^-1) + 2.5.
  const float e = std::exp(-1.0f);
  EXPECT_EQ(d.h[1], float_to_bf16(0.5f * e + (num::round_bf16(1.5f * e) + 2.5f)));
}

// ---- gated_delta_rule_update
// ---------------------------------------------------------------------

// dk = 2, dv = 1, T = 2; A_log = 0, a = dt_bias = 0, b = 0: decay exp(-ln 2) = 0.5, beta = 0.5.
// k = [3, 4] -> [0.6, 0.8], q = [0, 2] -> [0, 1]; then k = [0, 1], q = [1, 0]; v = [1, 2]; h = [1,
// 2].
struct UpdateCase {
  std::vector<float> a_log{0};
  std::vector<uint16_t> a = bf16({0, 0}), dt = bf16({0}), q = bf16({0, 2, 1, 0}),
                        k = bf16({3, 4, 0, 1});
  std::vector<uint16_t> v = bf16({1, 2}), b = bf16({0, 0});
  std::vector<float> init{1, 2};
  std::vector<int32_t> idx{0};
  std::vector<uint16_t> out = std::vector<uint16_t>(2);
  std::vector<float> final_state = init;
  void run_with(const ResolvedShape& s) {
    run(s,
        {a_log.data(), a.data(), dt.data(), q.data(), k.data(), v.data(), b.data(), init.data(),
         idx.data()},
        {out.data(), final_state.data()});
  }
};

Json update_params() {
  return {{"batch_size", 1}, {"token_count", 2}, {"num_q_heads", 1}, {"num_v_heads", 1},
          {"key_dim", 2},    {"value_dim", 1},   {"state_count", 1}, {"scale", 1.0}};
}

TEST(GatedDeltaRuleUpdate, DecayDeltaUpdateThenReadout) {
  auto s = resolve("gated_delta_rule_update", update_params());
  UpdateCase c;
  c.run_with(s);
  // t0: h = [0.5, 1]; h.k = 1.1; v' = -0.05; h = [0.47, 0.96]; out = h.q = 0.96.
  // t1: h = [0.235, 0.48]; h.k = 0.48; v' = 0.76; h = [0.235, 1.24]; out = 0.235.
  EXPECT_EQ(c.out[0], float_to_bf16(0.96f));
  EXPECT_EQ(c.out[1], float_to_bf16(0.235f));
  EXPECT_NEAR(c.final_state[0], 0.235, 1e-6);
  EXPECT_NEAR(c.final_state[1], 1.24, 1e-6);
}

TEST(GatedDeltaRuleUpdate, SoftplusIsLinearAboveThreshold) {
  Json p = update_params();
  p["softplus_threshold"] = -1.0;  // softplus(0) = 0 -> no decay
  auto s = resolve("gated_delta_rule_update", p);
  UpdateCase c;
  c.run_with(s);
  // t0: h = [1, 2]; h.k = 2.2; v' = -0.6; h = [0.64, 1.52]; out = 1.52.
  EXPECT_EQ(c.out[0], float_to_bf16(1.52f));
}

TEST(GatedDeltaRuleUpdate, WithoutL2NormKeysAreRaw) {
  Json p = update_params();
  p["use_qk_l2norm"] = false;
  p["token_count"] = 1;
  auto s = resolve("gated_delta_rule_update", p);
  UpdateCase c;
  c.k = bf16({1, 0});
  c.run_with(s);
  // h = [0.5, 1]; h.k = 0.5; v' = 0.25; h = [0.75, 1]; out = h.q = 2 * 1 = 2.
  EXPECT_EQ(bf16_to_float(c.out[0]), 2.0f);
}

// ---- generators and released shapes
// ---------------------------------------------------------------

template <class T>
std::vector<double> draw(const ResolvedShape& s, size_t index, uint64_t seed) {
  std::vector<T> raw(static_cast<size_t>(s.inputs[index].numel()));
  generate_input_cpu(s, index, seed, raw.data());
  std::vector<double> out;
  for (size_t i = 0; i < raw.size(); ++i)
    out.push_back(element_as_double(s.inputs[index].dtype, raw.data(), static_cast<int64_t>(i)));
  return out;
}

std::pair<double, double> mean_std(const std::vector<double>& v) {
  double sum = 0, sum2 = 0;
  for (double x : v) sum += x, sum2 += x * x;
  const double n = static_cast<double>(v.size()), mean = sum / n;
  return {mean, std::sqrt(sum2 / n - mean * mean)};
}

TEST(RopeConvDeltaGenerators, MatchInputPyDistributions) {
  auto rope = resolve("fused_qkv_rope", {{"total_tokens", 64},
                                         {"num_heads", 32},
                                         {"num_kv_heads", 8},
                                         {"head_dim", 128},
                                         {"rope_dim", 128},
                                         {"dtype", "fp16"}});
  auto [qm, qs] = mean_std(draw<uint16_t>(rope, 0, 1));  // randn drawn as fp16, not bf16 bits
  EXPECT_NEAR(qm, 0.0, 0.01);
  EXPECT_NEAR(qs, 1.0, 0.01);
  auto pos = draw<int32_t>(rope, 1, 1);
  for (size_t i = 0; i < pos.size(); ++i) ASSERT_EQ(pos[i], static_cast<double>(i));
  auto cdro = resolve("chunk_delta_rule_output", {{"batch_size", 1},
                                                  {"token_count", 512},
                                                  {"num_q_heads", 4},
                                                  {"num_v_heads", 8},
                                                  {"key_dim", 128},
                                                  {"value_dim", 128}});
  EXPECT_NEAR(mean_std(draw<uint16_t>(cdro, 0, 2)).second, 0.02, 4e-4);  // q: randn * 0.02
  EXPECT_NEAR(mean_std(draw<uint16_t>(cdro, 1, 2)).second, 1.0, 0.02);   // k: randn_like(q)
  auto g = draw<float>(cdro, 4, 2);
  for (double x : g) ASSERT_TRUE(x >= -1.0 && x <= 0.0) << x;
  EXPECT_NEAR(mean_std(g).first, -0.5, 0.01);
  auto upd = resolve("gated_delta_rule_update", {{"batch_size", 3},
                                                 {"token_count", 256},
                                                 {"num_q_heads", 16},
                                                 {"num_v_heads", 32},
                                                 {"key_dim", 128},
                                                 {"value_dim", 128},
                                                 {"state_count", 5}});
  EXPECT_NEAR(mean_std(draw<uint16_t>(upd, 6, 3)).second, 1.0, 0.03);  // b: randn_like(a)
  EXPECT_NEAR(mean_std(draw<float>(upd, 7, 3)).second, 0.02, 1e-4);    // initial_state
  EXPECT_EQ(draw<int32_t>(upd, 8, 3),
            (std::vector<double>{0, 1, 2}));  // arange(batch) % state_count
}

const std::vector<std::string>& group_ops() {
  static const std::vector<std::string> kOps{"fused_qkv_rope",
                                             "mrope",
                                             "causal_conv1d",
                                             "chunk_delta_rule_output",
                                             "chunk_gated_delta_rule_state",
                                             "gated_delta_rule_update"};
  return kOps;
}

TEST(RopeConvDeltaReleasedShapes, EveryShapeResolvesWithPositiveDims) {
  auto suite = Suite::load(ATREX_TEST_SUITE_DIR);
  ASSERT_TRUE(suite) << suite.error().message;
  for (const auto& name : group_ops()) {
    const OperatorDef* def = find_native_operator(name);
    ASSERT_NE(def, nullptr) << name;
    const auto* info = suite->find(name);
    ASSERT_NE(info, nullptr) << name;
    ASSERT_FALSE(info->shapes.empty());
    for (const auto& shape : info->shapes) {
      auto r = resolve_shape(*def, shape);
      ASSERT_TRUE(r) << r.error().message;
      for (const auto* list : {&r->inputs, &r->outputs}) {
        for (const auto& t : *list) {
          for (int64_t d : t.dims)
            EXPECT_GT(d, 0) << name << " shape " << shape.id << " tensor " << t.name;
        }
      }
    }
  }
}

// W and Q of the analytic rooflines within 5% of the released roofline.json, except the
// documented differences (rope_conv_delta.md): gated_delta_rule_update's state traffic.
TEST(RopeConvDeltaReleasedShapes, AnalyticRooflineAgreesWithReleased) {
  auto suite = Suite::load(ATREX_TEST_SUITE_DIR);
  ASSERT_TRUE(suite);
  auto total = [](const RooflineCounts& c) {
    double w = 0;
    for (const auto& [k, v] : c.w_flops_by_dtype) w += v;
    return w;
  };
  for (const auto& name : group_ops()) {
    const OperatorDef* def = find_native_operator(name);
    for (const auto& shape : suite->find(name)->shapes) {
      auto released = suite->roofline(name, shape.id);
      ASSERT_TRUE(released) << released.error().message;
      const RooflineCounts ours = def->analytic(*resolve_shape(*def, shape));
      const std::string where = name + " shape " + shape.id;
      EXPECT_NEAR(total(ours) / total(*released), 1.0, 0.05) << where;
      if (name == "gated_delta_rule_update") continue;
      EXPECT_NEAR(ours.q_read_bytes / released->q_read_bytes, 1.0, 0.05) << where;
      EXPECT_NEAR(ours.q_write_bytes / released->q_write_bytes, 1.0, 0.05) << where;
    }
  }
}

}  // namespace
}  // namespace atrex::problems
