// Edge-case input sets (operator.h EdgeCase): each rewrite produces the case it names, stays in
// the operator's domain, and changes the answer a candidate taking a shortcut would give.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <vector>

#include "atrex/problems/compare.h"
#include "atrex/problems/host_run.h"
#include "atrex/problems/operator.h"

namespace atrex::problems {
namespace {

const Suite& suite() {
  static const Suite s = *Suite::load(ATREX_TEST_SUITE_DIR);
  return s;
}

// The operator's hot shape with the fewest input bytes, free dimensions set to 64 (rows and
// tokens: enough of them for every rewrite to show, few enough to be quick).
ResolvedShape small_shape(const char* op) {
  const OperatorDef* def = find_native_operator(op);
  EXPECT_NE(def, nullptr) << op;
  std::optional<ResolvedShape> best;
  double best_bytes = 0;
  for (Shape s : suite().find(op)->shapes) {
    for (const auto& dim : def->free_dims) {
      const auto open = dim.param.find('[');
      Json& v = open == std::string::npos ? s.params[dim.param]
                                          : s.params[dim.param.substr(0, open)][0];
      if (v.is_number_integer()) v = 64;
    }
    auto r = resolve_shape(*def, s);
    EXPECT_TRUE(r) << r.error().message;
    double b = 0;
    for (const auto& t : r->inputs) b += static_cast<double>(t.bytes());
    if (!best || b < best_bytes) best = *r, best_bytes = b;
  }
  return *best;
}

size_t input_index(const ResolvedShape& s, const char* name) {
  for (size_t i = 0; i < s.inputs.size(); ++i)
    if (s.inputs[i].name == name) return i;
  ADD_FAILURE() << "no input " << name;
  return 0;
}

template <class T>
std::vector<T> as(const std::vector<uint8_t>& b) {
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

TEST(EdgeCases, EveryRewriteNamesAnInputOfItsOperator) {
  int ops_with = 0;
  for (const auto& def : native_operators()) {
    if (def.edge_cases.empty()) continue;
    ++ops_with;
    for (const auto& e : def.edge_cases) {
      EXPECT_NE(e.apply, nullptr) << def.name;
      EXPECT_FALSE(e.what.empty()) << def.name;
      EXPECT_TRUE(std::any_of(def.inputs.begin(), def.inputs.end(),
                              [&](const auto& t) { return t.name == e.input; }))
          << def.name << " has no input " << e.input;
    }
  }
  EXPECT_EQ(ops_with, 11);
}

TEST(EdgeCases, TopkFilterRowsTieAtTheKthValueAndKeepingExactlyKFails) {
  const ResolvedShape s = small_shape("topk_filter");
  auto run = run_reference_host(s, 3, true);
  ASSERT_TRUE(run) << run.error().message;
  const int64_t cols = s.inputs[0].dims[1], rows = s.inputs[0].dims[0];
  const int64_t k = std::min<int64_t>(s.int_param("top_k"), cols);
  const auto out = as<float>(run->outputs[0]);
  int rows_with_ties = 0;
  std::vector<float> exactly_k = out;  // what a candidate that keeps exactly k values writes
  for (int64_t r = 0; r < rows; ++r) {
    int64_t kept = 0;
    for (int64_t c = 0; c < cols; ++c) kept += std::isfinite(out[r * cols + c]);
    EXPECT_GE(kept, k);
    if (kept > k) ++rows_with_ties;
    for (int64_t c = 0, seen = 0; c < cols; ++c) {
      float& v = exactly_k[r * cols + c];
      if (std::isfinite(v) && ++seen > k) v = -std::numeric_limits<float>::infinity();
    }
  }
  EXPECT_EQ(rows_with_ties, rows) << "every row should tie at its k-th value";
  auto plain = run_reference_host(s, 3, false);
  ASSERT_TRUE(plain);
  const auto plain_out = as<float>(plain->outputs[0]);
  int64_t plain_kept = 0;
  for (float v : plain_out) plain_kept += std::isfinite(v);
  EXPECT_EQ(plain_kept, rows * k) << "the usual draws hold no ties (why the edge set exists)";
  EXPECT_FALSE(
      compare_output(s.outputs[0], exactly_k.data(), run->outputs[0].data(), 1e-2, 5e-2).pass);
}

TEST(EdgeCases, QuantiserRowsOfZerosGiveFiniteScales) {
  for (const char* op :
       {"fp8_dynamic_per_token_quant", "per_token_group_quant_fp8", "fused_rmsnorm_quant"}) {
    const ResolvedShape s = small_shape(op);
    auto run = run_reference_host(s, 5, true);
    ASSERT_TRUE(run) << op;
    const auto x = as<uint16_t>(run->inputs[input_index(s, "x")]);
    const int64_t cols = s.inputs[0].dims.back(), rows = s.inputs[0].dims[0];
    int zero_rows = 0;
    for (int64_t r = 0; r < rows; ++r)
      zero_rows += std::all_of(x.begin() + r * cols, x.begin() + (r + 1) * cols,
                               [](uint16_t v) { return v == 0; });
    EXPECT_GE(zero_rows, 1) << op;
    EXPECT_LT(zero_rows, rows) << op;
    for (size_t o = 0; o < s.outputs.size(); ++o) {
      if (s.outputs[o].dtype != DType::kF32) continue;
      for (float v : as<float>(run->outputs[o]))
        ASSERT_TRUE(std::isfinite(v)) << op << " " << s.outputs[o].name;
    }
  }
}

TEST(EdgeCases, RoutingLeavesHalfTheExpertsEmpty) {
  const ResolvedShape s = small_shape("moe_count_and_sort");
  auto run = run_reference_host(s, 2, true);
  ASSERT_TRUE(run);
  const auto counts = as<int32_t>(run->outputs[1]);
  int empty = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    if (e % 2 == 1) {
      EXPECT_EQ(counts[e], 0) << e;
    }
    empty += counts[e] == 0;
  }
  EXPECT_GE(empty, static_cast<int>(counts.size() / 2));
  auto plain = run_reference_host(s, 2, false);
  ASSERT_TRUE(plain);
  const auto plain_counts = as<int32_t>(plain->outputs[1]);
  int odd_used = 0;
  for (size_t e = 1; e < plain_counts.size(); e += 2) odd_used += plain_counts[e] > 0;
  EXPECT_GT(odd_used, 0) << "the usual draws route tokens to odd experts too";
}

TEST(EdgeCases, PagedBlockTablesArePermutedAndAnIdentityReaderFails) {
  const ResolvedShape s = small_shape("paged_attention_decode");
  auto edge = run_reference_host(s, 4, true);
  ASSERT_TRUE(edge);
  const auto table = as<int32_t>(edge->inputs[input_index(s, "block_tables")]);
  const int64_t num_blocks = s.inputs[input_index(s, "k_cache")].dims[0];
  std::set<int32_t> distinct(table.begin(), table.end());
  EXPECT_EQ(distinct.size(), table.size()) << "block tables must stay injective";
  EXPECT_GE(*distinct.begin(), 0);
  EXPECT_LT(*distinct.rbegin(), num_blocks);
  int moved = 0;
  for (size_t i = 0; i < table.size(); ++i) moved += table[i] != static_cast<int32_t>(i);
  EXPECT_GT(moved, static_cast<int>(table.size() / 2));
  const auto lens = as<int32_t>(edge->inputs[input_index(s, "seq_lens")]);
  const int64_t bs = s.int_param("block_size"), ctx = s.int_param("ctx_len");
  bool partial = false;
  for (int32_t l : lens) {
    EXPECT_GE(l, 1);
    EXPECT_LE(l, ctx);
    partial |= l % bs != 0;
  }
  EXPECT_TRUE(partial || lens.size() < 3) << "some sequence should end in a partial block";
  // A candidate that reads block s*max_blocks+j (the identity table) instead of the table.
  std::vector<std::vector<uint8_t>> ident = edge->inputs;
  auto* t = reinterpret_cast<int32_t*>(ident[input_index(s, "block_tables")].data());
  for (size_t i = 0; i < table.size(); ++i) t[i] = static_cast<int32_t>(i);
  std::vector<const void*> in;
  for (auto& b : ident) in.push_back(b.data());
  std::vector<uint8_t> wrong(s.outputs[0].bytes());
  std::vector<void*> out{wrong.data()};
  s.def->reference_cpu(s, in, out);
  EXPECT_FALSE(compare_output(s.outputs[0], wrong.data(), edge->outputs[0].data(), 1e-2, 5e-2).pass);
}

TEST(EdgeCases, SlotMappingIsAPermutationWithSkippedTokens) {
  // reshape_and_cache has no free dimension: its smallest hot shape, with 64 tokens.
  const OperatorDef* def = find_native_operator("reshape_and_cache");
  Shape shape = suite().find("reshape_and_cache")->shapes.front();
  shape.params["shape"][0] = 64;
  auto resolved = resolve_shape(*def, shape);
  ASSERT_TRUE(resolved) << resolved.error().message;
  const ResolvedShape& s = *resolved;
  auto run = run_reference_host(s, 6, true);
  ASSERT_TRUE(run);
  const auto map = as<int64_t>(run->inputs[input_index(s, "slot_mapping")]);
  const auto& kc = s.inputs[input_index(s, "key_cache")];
  std::set<int64_t> used;
  int skipped = 0, moved = 0;
  for (size_t t = 0; t < map.size(); ++t) {
    if (map[t] < 0) {
      ++skipped;
      continue;
    }
    EXPECT_LT(map[t], kc.dims[0] * kc.dims[1]);
    EXPECT_TRUE(used.insert(map[t]).second) << "slot " << map[t] << " mapped twice";
    moved += map[t] != static_cast<int64_t>(t);
  }
  EXPECT_GT(skipped, 0);
  EXPECT_GT(moved, static_cast<int>(map.size() / 2));
}

TEST(EdgeCases, RewritesAreDeterministicInTheSeed) {
  const ResolvedShape s = small_shape("unified_attention");
  auto a = run_reference_host(s, 9, true), b = run_reference_host(s, 9, true),
       c = run_reference_host(s, 10, true);
  ASSERT_TRUE(a && b && c);
  const size_t bt = input_index(s, "block_table");
  EXPECT_EQ(a->inputs[bt], b->inputs[bt]);
  EXPECT_NE(a->inputs[bt], c->inputs[bt]);
  EXPECT_EQ(a->outputs[0], b->outputs[0]);
}

}  // namespace
}  // namespace atrex::problems
