// Unit tests of operator group "attention" (problems/src/ops/attention_defs.cpp): hand-checkable
// cases, generator statistics, and resolution of every released shape.
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"
#include "atrex/problems/suite.h"
#include "op_test_util.h"

namespace atrex::problems {
namespace {

using test_util::resolve;
using test_util::run;

using num::bf16_to_float;
using num::float_to_bf16;

std::vector<uint16_t> zeros16(const TensorDesc& d) {
  return std::vector<uint16_t>(static_cast<size_t>(d.numel()), 0);
}
float out_at(const std::vector<uint16_t>& v, size_t i) { return bf16_to_float(v[i]); }

// Softmax weight of the first of two keys whose scores differ by `gap`.
double w_first(double gap) { return 1.0 / (1.0 + std::exp(-gap)); }

// Sequence 0 has one token: it attends only itself (out = its v row), not sequence 1's keys.
// Sequence 1: token 1 has q = 0, so it averages v rows 1 and 2; token 2 has q = (1, 1) against
// keys (1, 1) and (0, 0): scores sqrt(2) and 0 after the 1/sqrt(2) scale.
TEST(AttentionForward, SequencesDoNotSeeEachOtherAndScaleIsInvSqrtHeadDim) {
  auto s = resolve("attention_forward", {{"num_heads", 1}, {"head_dim", 2}, {"seq_lens", {1, 2}}});
  ASSERT_EQ(s.inputs[0].dims, (std::vector<int64_t>{3, 1, 2}));
  ASSERT_EQ(s.inputs[3].dims, (std::vector<int64_t>{3}));
  std::vector<uint16_t> q(6), k(6), v(6), out(6);
  const float qv[] = {5, -5, 0, 0, 1, 1}, kv[] = {9, 9, 1, 1, 0, 0}, vv[] = {7, -3, 1, 2, 3, 5};
  for (int i = 0; i < 6; ++i)
    q[i] = float_to_bf16(qv[i]), k[i] = float_to_bf16(kv[i]), v[i] = float_to_bf16(vv[i]);
  std::vector<int32_t> cu = {0, 1, 3};
  run(s, {q.data(), k.data(), v.data(), cu.data(), cu.data()}, {out.data()});
  EXPECT_EQ(out_at(out, 0), 7.0f);
  EXPECT_EQ(out_at(out, 1), -3.0f);
  EXPECT_EQ(out_at(out, 2), 2.0f);
  EXPECT_EQ(out_at(out, 3), 3.5f);
  const double w = w_first(std::sqrt(2.0));  // 0.80443
  EXPECT_EQ(out[4], float_to_bf16(static_cast<float>(w * 1 + (1 - w) * 3)));
  EXPECT_EQ(out[5], float_to_bf16(static_cast<float>(w * 2 + (1 - w) * 5)));
}

// 40 keys span three tiles of the online softmax (16, 16, 8): the running max and rescaling
// must give the two-pass softmax computed here in double.
TEST(AttentionForward, OnlineSoftmaxAcrossTilesMatchesTwoPassSoftmax) {
  const int64_t len = 40, heads = 2, dim = 8;
  auto s =
      resolve("attention_forward", {{"num_heads", heads}, {"head_dim", dim}, {"seq_lens", {len}}});
  std::vector<std::vector<uint16_t>> in3(3, zeros16(s.inputs[0]));
  for (size_t i = 0; i < 3; ++i) generate_input_cpu(s, i, 11, in3[i].data());
  std::vector<int32_t> cu(2);
  generate_input_cpu(s, 3, 11, cu.data());
  std::vector<uint16_t> out = zeros16(s.outputs[0]);
  run(s, {in3[0].data(), in3[1].data(), in3[2].data(), cu.data(), cu.data()}, {out.data()});
  auto at = [&](int which, int64_t t, int64_t h, int64_t i) {
    return static_cast<double>(
        bf16_to_float(in3[which][static_cast<size_t>((t * heads + h) * dim + i)]));
  };
  for (int64_t t = 0; t < len; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<double> score(len);
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < len; ++j) {
        for (int64_t i = 0; i < dim; ++i)
          score[j] += at(0, t, h, i) * at(1, j, h, i) / std::sqrt(8.0);
        mx = std::max(mx, score[j]);
      }
      for (double& x : score) sum += (x = std::exp(x - mx));
      for (int64_t i = 0; i < dim; ++i) {
        double o = 0;
        for (int64_t j = 0; j < len; ++j) o += score[j] / sum * at(2, j, h, i);
        const float got = out_at(out, static_cast<size_t>((t * heads + h) * dim + i));
        EXPECT_NEAR(got, o, std::abs(o) * 0.004 + 1e-6) << "t " << t << " h " << h << " i " << i;
      }
    }
  }
}

// Paged layout [num_blocks, block_size, Hkv, d] through block_table, GQA (2 query heads on one kv
// head) and the causal mask (q_len == kv_len): token 0 sees key 0 only, token 1 keys 0 and 1.
TEST(UnifiedAttention, CausalWhenQLenEqualsKvLenThroughBlockTableWithGqa) {
  auto s = resolve("unified_attention", {{"num_seqs", 1},
                                         {"seq_lens", {2}},
                                         {"num_query_heads", 2},
                                         {"num_kv_heads", 1},
                                         {"head_size", 2},
                                         {"block_size", 4}});
  // max_num_blocks = ceil(2 / 4) + 2 = 3; num_blocks = 3 * 1 + 64.
  ASSERT_EQ(s.inputs[1].dims, (std::vector<int64_t>{67, 4, 1, 2}));
  ASSERT_EQ(s.inputs[5].dims, (std::vector<int64_t>{1, 3}));
  std::vector<uint16_t> q = zeros16(s.inputs[0]), kc = zeros16(s.inputs[1]),
                        vc = zeros16(s.inputs[2]);
  std::vector<uint16_t> out = zeros16(s.outputs[0]);
  const int64_t blk = 5, row = 4 * 2;                                          // elements per block
  vc[blk * row + 0] = float_to_bf16(2), vc[blk * row + 1] = float_to_bf16(4);  // key 0
  vc[blk * row + 2] = float_to_bf16(6), vc[blk * row + 3] = float_to_bf16(8);  // key 1
  std::vector<int32_t> cu = {0, 2}, used = {2}, table = {static_cast<int32_t>(blk), 0, 0};
  run(s, {q.data(), kc.data(), vc.data(), cu.data(), used.data(), table.data()}, {out.data()});
  for (int h = 0; h < 2; ++h) {  // out [token, head, dim]
    EXPECT_EQ(out_at(out, 0 * 4 + h * 2 + 0), 2.0f);
    EXPECT_EQ(out_at(out, 0 * 4 + h * 2 + 1), 4.0f);
    EXPECT_EQ(out_at(out, 1 * 4 + h * 2 + 0), 4.0f);
    EXPECT_EQ(out_at(out, 1 * 4 + h * 2 + 1), 6.0f);
  }
}

// seqused_k longer than the query (a decode-like step): not causal, every query row sees all
// kv_len keys, which span two blocks of size 2 (block ids 3 then 1).
TEST(UnifiedAttention, NotCausalWhenKvLongerThanQuery) {
  auto s = resolve("unified_attention", {{"num_seqs", 1},
                                         {"seq_lens", {2}},
                                         {"num_query_heads", 1},
                                         {"num_kv_heads", 1},
                                         {"head_size", 2},
                                         {"block_size", 2}});
  std::vector<uint16_t> q = zeros16(s.inputs[0]), kc = zeros16(s.inputs[1]),
                        vc = zeros16(s.inputs[2]);
  std::vector<uint16_t> out = zeros16(s.outputs[0]);
  auto put = [&](int64_t block, int64_t pos, float a) {
    vc[static_cast<size_t>((block * 2 + pos) * 2)] = float_to_bf16(a);
  };
  put(3, 0, 1), put(3, 1, 2), put(1, 0, 6);  // keys 0, 1, 2
  std::vector<int32_t> cu = {0, 2}, used = {3}, table = {3, 1, 0};
  run(s, {q.data(), kc.data(), vc.data(), cu.data(), used.data(), table.data()}, {out.data()});
  EXPECT_EQ(out_at(out, 0), 3.0f);  // (1 + 2 + 6) / 3 for both query rows
  EXPECT_EQ(out_at(out, 2), 3.0f);
}

// k_cache [blocks, Hkv, d/8, bs, 8] and v_cache [blocks, Hkv, d, bs]: q = 2 at dim 9 picks
// k element 9 (chunk 1, lane 1); key 0 holds 2 there, so scores are 1 and 0 (scale 1/4).
TEST(PagedAttentionDecode, ReadsTheXInterleavedKeyAndDimMajorValueLayouts) {
  auto s = resolve("paged_attention_decode", {{"num_seqs", 1},
                                              {"ctx_len", 2},
                                              {"num_query_heads", 2},
                                              {"num_kv_heads", 1},
                                              {"head_size", 16},
                                              {"block_size", 4}});
  ASSERT_EQ(s.inputs[1].dims, (std::vector<int64_t>{17, 1, 2, 4, 8}));  // 1 block + 16 spare
  std::vector<uint16_t> q = zeros16(s.inputs[0]), kc = zeros16(s.inputs[1]),
                        vc = zeros16(s.inputs[2]);
  std::vector<uint16_t> out = zeros16(s.outputs[0]);
  const int64_t blk = 6, per_block = 16 * 4;
  for (int h = 0; h < 2; ++h) q[static_cast<size_t>(h * 16 + 9)] = float_to_bf16(2);
  kc[static_cast<size_t>(blk * per_block + (1 * 4 + 0) * 8 + 1)] =
      float_to_bf16(2);  // key 0, element 9
  for (int i = 0; i < 16; ++i) {
    vc[static_cast<size_t>(blk * per_block + i * 4 + 0)] =
        float_to_bf16(static_cast<float>(i));  // value 0
    vc[static_cast<size_t>(blk * per_block + i * 4 + 1)] =
        float_to_bf16(static_cast<float>(-i));  // value 1
  }
  std::vector<int32_t> table = {static_cast<int32_t>(blk)}, lens = {2};
  run(s, {q.data(), kc.data(), vc.data(), table.data(), lens.data()}, {out.data()});
  const double w = w_first(1.0);
  for (int h = 0; h < 2; ++h) {
    for (int i : {1, 5, 9, 15}) {
      EXPECT_NEAR(out_at(out, static_cast<size_t>(h * 16 + i)), i * (2 * w - 1), i * 0.004)
          << "h " << h << " i " << i;
    }
  }
}

// dtype "fp16" switches query, caches and out to fp16; q = 0 averages values 1 and 2.
TEST(PagedAttentionDecode, Fp16DtypeReadsAndWritesHalfPrecision) {
  auto s = resolve("paged_attention_decode", {{"num_seqs", 1},
                                              {"ctx_len", 2},
                                              {"num_query_heads", 1},
                                              {"num_kv_heads", 1},
                                              {"head_size", 8},
                                              {"dtype", "fp16"}});
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(s.inputs[i].dtype, DType::kF16);
  EXPECT_EQ(s.outputs[0].dtype, DType::kF16);
  std::vector<uint16_t> q = zeros16(s.inputs[0]), kc = zeros16(s.inputs[1]),
                        vc = zeros16(s.inputs[2]);
  std::vector<uint16_t> out = zeros16(s.outputs[0]);
  for (int i = 0; i < 8; ++i) {
    vc[static_cast<size_t>(i * 16 + 0)] = num::float_to_fp16(1.0f);
    vc[static_cast<size_t>(i * 16 + 1)] = num::float_to_fp16(2.0f);
  }
  std::vector<int32_t> table = {0}, lens = {2};
  run(s, {q.data(), kc.data(), vc.data(), table.data(), lens.data()}, {out.data()});
  EXPECT_EQ(out[0], 0x3E00);  // fp16 1.5 (bf16 1.5 would be 0x3FC0)
}

// Batch b reads kv rows from sum(seq_lens[:b]); keys include the rope dim, values do not.
// Batch 1: q = (0, 0, 1) against rope elements 3 and 0: scores 3 / sqrt(3) = sqrt(3) and 0.
TEST(MlaDecodeAttention, KeysIncludeRopeDimsValuesAreTheLatentPrefix) {
  auto s = resolve("mla_decode_attention", {{"batch_size", 2},
                                            {"ctx_len", 2},
                                            {"nhead", 1},
                                            {"kv_lora_rank", 2},
                                            {"qk_rope_head_dim", 1}});
  ASSERT_EQ(s.inputs[1].dims, (std::vector<int64_t>{4, 1, 3}));
  ASSERT_EQ(s.outputs[0].dims, (std::vector<int64_t>{2, 1, 2}));
  std::vector<uint16_t> q(6, 0), kv(12), out(4);
  const float rows[] = {1, 2, 0, 3, 4, 0, 5, 6, 3, 7, 8, 0};
  for (int i = 0; i < 12; ++i) kv[i] = float_to_bf16(rows[i]);
  q[5] = float_to_bf16(1);
  std::vector<int32_t> lens = {2, 2};
  run(s, {q.data(), kv.data(), lens.data()}, {out.data()});
  EXPECT_EQ(out_at(out, 0), 2.0f);  // batch 0, q = 0: mean of (1, 2) and (3, 4)
  EXPECT_EQ(out_at(out, 1), 3.0f);
  const double w = w_first(std::sqrt(3.0));
  EXPECT_EQ(out[2], float_to_bf16(static_cast<float>(w * 5 + (1 - w) * 7)));
  EXPECT_EQ(out[3], float_to_bf16(static_cast<float>(w * 6 + (1 - w) * 8)));
}

// Token 0 goes to slot 3 (block 0, position 3), token 1 has slot -1 (padding) and is skipped;
// every other cache element keeps its starting value.
TEST(ReshapeAndCache, WritesMappedSlotsOnlyAndSkipsNegativeSlots) {
  auto s = resolve("reshape_and_cache", {{"shape", {2, 1, 2}}, {"block_size", 4}});
  ASSERT_EQ(s.outputs[0].dims, (std::vector<int64_t>{1, 4, 1, 2}));
  std::vector<uint16_t> key = {float_to_bf16(1), float_to_bf16(2), float_to_bf16(3),
                               float_to_bf16(4)};
  std::vector<uint16_t> value = {float_to_bf16(5), float_to_bf16(6), float_to_bf16(7),
                                 float_to_bf16(8)};
  std::vector<uint16_t> kc(8, float_to_bf16(9)), vc(8, float_to_bf16(9));
  std::vector<uint16_t> kout = kc, vout = vc;  // initial_from: outputs start as the caches
  std::vector<int64_t> slots = {3, -1};
  run(s, {key.data(), value.data(), kc.data(), vc.data(), slots.data()},
      {kout.data(), vout.data()});
  for (int i = 0; i < 8; ++i) {
    const float k_expect = i == 6 ? 1.0f : i == 7 ? 2.0f : 9.0f;
    const float v_expect = i == 6 ? 5.0f : i == 7 ? 6.0f : 9.0f;
    EXPECT_EQ(out_at(kout, static_cast<size_t>(i)), k_expect) << i;
    EXPECT_EQ(out_at(vout, static_cast<size_t>(i)), v_expect) << i;
  }
  EXPECT_EQ(s.def->outputs[0].initial_from, "key_cache");
  EXPECT_EQ(s.def->outputs[1].initial_from, "value_cache");
}

struct Moments {
  double mean, std;
};

Moments moments(const ResolvedShape& s, size_t index, uint64_t seed) {
  std::vector<uint16_t> data(static_cast<size_t>(s.inputs[index].numel()));
  generate_input_cpu(s, index, seed, data.data());
  const bool fp16 = s.inputs[index].dtype == DType::kF16;
  double sum = 0, sum2 = 0;
  for (uint16_t v : data) {
    const double f = fp16 ? num::fp16_to_float(v) : bf16_to_float(v);
    sum += f;
    sum2 += f * f;
  }
  const double n = static_cast<double>(data.size()), mean = sum / n;
  return {mean, std::sqrt(sum2 / n - mean * mean)};
}

template <class T>
std::vector<T> generated(const ResolvedShape& s, size_t index, uint64_t seed = 1) {
  std::vector<T> data(static_cast<size_t>(s.inputs[index].numel()));
  generate_input_cpu(s, index, seed, data.data());
  return data;
}

TEST(AttentionGenerators, RandnTensorsAreStandardNormal) {
  auto af =
      resolve("attention_forward", {{"num_heads", 4}, {"head_dim", 64}, {"seq_lens", {300, 212}}});
  for (size_t i = 0; i < 3; ++i) {
    const Moments m = moments(af, i, 7);
    EXPECT_NEAR(m.mean, 0.0, 0.01) << i;
    EXPECT_NEAR(m.std, 1.0, 0.01) << i;
  }
  auto mla = resolve("mla_decode_attention", {{"batch_size", 2},
                                              {"ctx_len", 64},
                                              {"nhead", 16},
                                              {"kv_lora_rank", 512},
                                              {"qk_rope_head_dim", 64}});
  EXPECT_NEAR(moments(mla, 1, 3).std, 1.0, 0.01);
  // fp16 draws must be decoded as fp16: read as bf16 the std would be far from 1.
  auto pa = resolve("paged_attention_decode", {{"num_seqs", 4},
                                               {"ctx_len", 64},
                                               {"num_query_heads", 8},
                                               {"num_kv_heads", 2},
                                               {"head_size", 128},
                                               {"dtype", "fp16"}});
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(moments(pa, i, 5).std, 1.0, 0.02) << i;
  EXPECT_NE(generated<uint16_t>(pa, 1, 1),
            generated<uint16_t>(pa, 1, 2));  // seeds give fresh caches
}

TEST(AttentionGenerators, CuSeqlensAreCumulativeSeqLens) {
  auto s =
      resolve("attention_forward", {{"num_heads", 1}, {"head_dim", 8}, {"seq_lens", {3, 5, 1}}});
  EXPECT_EQ(generated<int32_t>(s, 3), (std::vector<int32_t>{0, 3, 8, 9}));
  EXPECT_EQ(generated<int32_t>(s, 4), (std::vector<int32_t>{0, 3, 8, 9}));
}

// seq_lens [20, 5], block_size 16: max_num_blocks = 2 + 2; sequence 1 starts at block 4.
TEST(AttentionGenerators, UnifiedBlockTableGivesEachSequenceItsOwnBlocksAsInputPy) {
  auto s = resolve("unified_attention", {{"num_seqs", 2},
                                         {"seq_lens", {20, 5}},
                                         {"num_query_heads", 4},
                                         {"num_kv_heads", 2},
                                         {"head_size", 64},
                                         {"block_size", 16}});
  EXPECT_EQ(s.inputs[1].dims[0], 4 * 2 + 64);
  EXPECT_EQ(generated<int32_t>(s, 3), (std::vector<int32_t>{0, 20, 25}));
  EXPECT_EQ(generated<int32_t>(s, 4), (std::vector<int32_t>{20, 5}));
  EXPECT_EQ(generated<int32_t>(s, 5), (std::vector<int32_t>{0, 1, 0, 0, 4, 0, 0, 0}));
}

TEST(AttentionGenerators, PagedBlockTablesSeqLensAndCacheSlotsFollowInputPy) {
  auto pa = resolve("paged_attention_decode", {{"num_seqs", 2},
                                               {"ctx_len", 40},
                                               {"num_query_heads", 4},
                                               {"num_kv_heads", 4},
                                               {"head_size", 64}});
  EXPECT_EQ(pa.inputs[0].dtype, DType::kBF16);  // dtype defaults to bf16
  EXPECT_EQ(generated<int32_t>(pa, 3), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(generated<int32_t>(pa, 4), (std::vector<int32_t>{40, 40}));
  auto rc = resolve("reshape_and_cache", {{"shape", {5, 2, 8}}});
  EXPECT_EQ(generated<int64_t>(rc, 4), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  const auto cache = generated<uint16_t>(rc, 2);
  EXPECT_EQ(cache.size(), 16u * 2 * 8);       // one block of 16 slots
  for (uint16_t v : cache) ASSERT_EQ(v, 0u);  // +0.0, as torch.zeros
}

TEST(AttentionSignature, InconsistentParametersAreRejectedWithTheirValues) {
  Shape s;
  s.id = "x";
  s.params = {{"num_seqs", 2},     {"seq_lens", {4}}, {"num_query_heads", 4},
              {"num_kv_heads", 2}, {"head_size", 64}, {"block_size", 16}};
  auto r = resolve_shape(*find_native_operator("unified_attention"), s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("\"seq_lens\" has 1 entries, num_seqs is 2"), std::string::npos)
      << r.error().message;
  s.params = {{"num_seqs", 1},
              {"ctx_len", 4},
              {"num_query_heads", 4},
              {"num_kv_heads", 3},
              {"head_size", 64}};
  r = resolve_shape(*find_native_operator("paged_attention_decode"), s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("4 query heads are not a multiple of 3 kv heads"),
            std::string::npos);
  s.params = {{"num_heads", 1}, {"head_dim", 512}, {"seq_lens", {4}}};
  r = resolve_shape(*find_native_operator("attention_forward"), s);
  ASSERT_FALSE(r);  // the reference holds at most 256 elements per head
}

const char* const kAttentionOps[] = {"attention_forward", "unified_attention",
                                     "paged_attention_decode", "mla_decode_attention",
                                     "reshape_and_cache"};

TEST(AttentionSuite, EveryReleasedShapeResolvesWithPositiveDims) {
  auto suite = Suite::load(ATREX_TEST_SUITE_DIR);
  ASSERT_TRUE(suite) << suite.error().message;
  for (const char* op : kAttentionOps) {
    const OperatorInfo* info = suite->find(op);
    ASSERT_NE(info, nullptr) << op;
    for (const Shape& shape : info->shapes) {
      auto r = resolve_shape(*find_native_operator(op), shape);
      ASSERT_TRUE(r) << op << " " << shape.id << ": " << r.error().message;
      for (const auto* list : {&r->inputs, &r->outputs}) {
        for (const auto& t : *list) {
          for (int64_t d : t.dims) EXPECT_GT(d, 0) << op << " " << shape.id << " " << t.name;
        }
      }
    }
  }
}

// The analytic counts reproduce the released roofline.json where the two agree by design
// (docs/operators/attention.md explains the others): exact for attention_forward and
// unified_attention, W within 0.2% for paged_attention_decode.
TEST(AttentionSuite, AnalyticRooflineMatchesReleasedWhereDocumented) {
  auto suite = Suite::load(ATREX_TEST_SUITE_DIR);
  ASSERT_TRUE(suite) << suite.error().message;
  auto total_w = [](const RooflineCounts& c) {
    double w = 0;
    for (const auto& [k, v] : c.w_flops_by_dtype) w += v;
    return w;
  };
  for (const char* op : {"attention_forward", "unified_attention", "paged_attention_decode"}) {
    const OperatorDef* def = find_native_operator(op);
    for (const Shape& shape : suite->find(op)->shapes) {
      auto r = resolve_shape(*def, shape);
      ASSERT_TRUE(r);
      auto released = suite->roofline(op, shape.id);
      ASSERT_TRUE(released);
      const RooflineCounts a = def->analytic(*r);
      EXPECT_NEAR(total_w(a), total_w(*released), total_w(*released) * 2e-3)
          << op << " " << shape.id;
      if (std::string(op) != "paged_attention_decode") {
        EXPECT_EQ(a.q_read_bytes, released->q_read_bytes) << op << " " << shape.id;
        EXPECT_EQ(a.q_write_bytes, released->q_write_bytes) << op << " " << shape.id;
      }
    }
  }
}

}  // namespace
}  // namespace atrex::problems
