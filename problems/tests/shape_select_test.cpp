// Shape selection for sweeps (shapes.<backend> rules) and `atrex eval --shapes`, on the
// released suite.
#include <gtest/gtest.h>

#include "atrex/problems/roofline.h"
#include "atrex/problems/shape_select.h"

namespace atrex::problems {
namespace {

struct Fixture {
  Suite suite;
  const OperatorInfo* info = nullptr;
  const OperatorDef* def = nullptr;
};

Fixture rms_norm() {
  Fixture f;
  auto s = Suite::load(ATREX_TEST_SUITE_DIR);
  EXPECT_TRUE(s) << s.error().message;
  f.suite = std::move(*s);
  f.info = f.suite.find("rms_norm");
  f.def = find_native_operator("rms_norm");
  EXPECT_TRUE(f.info && f.def);
  return f;
}

TEST(ShapeSelect, SmallestAndLargestFollowInputElements) {
  auto f = rms_norm();
  auto sized = sized_shapes(*f.info, *f.def);
  ASSERT_TRUE(sized);
  ASSERT_EQ(sized->size(), f.info->shapes.size());
  EXPECT_LE(sized->front().input_elements, sized->back().input_elements);
  auto small = select_shapes(*f.info, *f.def, "smallest:2");
  ASSERT_TRUE(small) << small.error().message;
  EXPECT_EQ(*small, (std::vector<std::string>{(*sized)[0].id, (*sized)[1].id}));
  auto large = select_shapes(*f.info, *f.def, "largest");
  ASSERT_TRUE(large);
  EXPECT_EQ(*large, std::vector<std::string>{sized->back().id});
  EXPECT_EQ(select_shapes(*f.info, *f.def, "all")->size(), f.info->shapes.size());
}

TEST(ShapeSelect, BadSelectorsNameTheFlagAndTheValue) {
  auto f = rms_norm();
  auto bad = select_shapes(*f.info, *f.def, "smallest:0");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "--shapes: expected `smallest` or `smallest:N` with N >= 1; got \"smallest:0\"");
  auto unknown = select_shapes(*f.info, *f.def, "1,999");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::kNotFound);
  EXPECT_NE(unknown.error().message.find("no shape \"999\""), std::string::npos);
  EXPECT_FALSE(select_shapes(*f.info, *f.def, ","));
}

TEST(ShapeSelect, RuleCapsSpreadsAndKeepsSuiteOrder) {
  auto f = rms_norm();
  ShapeRule rule;
  rule.all = false;
  rule.max_input_elements = 3'000'000;
  rule.max_per_operator = 3;
  auto picked = apply_shape_rule(rule, *f.info, *f.def, "sweep.yaml");
  ASSERT_TRUE(picked) << picked.error().message;
  ASSERT_FALSE(picked->empty());
  EXPECT_LE(picked->size(), 3u);
  auto sized = *sized_shapes(*f.info, *f.def);
  for (const auto& id : *picked) {
    auto it = std::find_if(sized.begin(), sized.end(), [&](auto& s) { return s.id == id; });
    EXPECT_LE(it->input_elements, 3'000'000) << id;
  }
  EXPECT_TRUE(std::is_sorted(picked->begin(), picked->end(), [](const auto& a, const auto& b) {
    return std::stoi(a) < std::stoi(b);
  }));
  // Nothing fits: at_least keeps the smallest.
  rule.max_input_elements = 1;
  rule.at_least = 1;
  EXPECT_EQ(*apply_shape_rule(rule, *f.info, *f.def, "sweep.yaml"),
            std::vector<std::string>{sized.front().id});
  // Explicit ids win and are checked.
  rule.ids["rms_norm"] = {"5", "99"};
  auto bad = apply_shape_rule(rule, *f.info, *f.def, "sweep.yaml");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("sweep.yaml: field \"shapes.*.ids.rms_norm\""),
            std::string::npos);
}

TEST(ShapeSelect, QuickShapesSpreadOverTheChosenOnesBySize) {
  auto f = rms_norm();
  auto sized = *sized_shapes(*f.info, *f.def);
  std::vector<std::string> all;
  for (const auto& s : f.info->shapes) all.push_back(s.id);
  auto q = quick_shapes(*f.info, *f.def, all, 3);
  ASSERT_TRUE(q);
  ASSERT_EQ(q->size(), 3u);
  EXPECT_EQ(q->front(), sized.front().id);
  EXPECT_EQ(q->back(), sized.back().id);
}

// fused_moe's smallest released shape holds 100M input elements: a capped rule with `reduced`
// picks its reduced shape, one without keeps at_least's smallest released one, and `all` (the GPU
// rule) never sees a reduced shape. rms_norm, which has none, is unchanged by `reduced`.
TEST(ShapeSelect, ReducedShapesReplaceReleasedOnesOverTheCapOnlyWhenAskedFor) {
  auto s = Suite::load(ATREX_TEST_SUITE_DIR);
  ASSERT_TRUE(s) << s.error().message;
  const OperatorInfo* moe = s->find("fused_moe");
  const OperatorDef* moe_def = find_native_operator("fused_moe");
  ASSERT_TRUE(moe && moe_def);
  ASSERT_EQ(moe->reduced_shapes.size(), 1u);
  EXPECT_EQ(moe->reduced_shapes[0].id, "reduced-0");
  EXPECT_TRUE(moe->reduced_shapes[0].reduced);
  EXPECT_EQ(moe->find_shape("reduced-0"), &moe->reduced_shapes[0]);
  for (const auto& hot : moe->shapes) EXPECT_FALSE(hot.reduced) << hot.id;

  ShapeRule rule;
  rule.all = false;
  rule.max_input_elements = 3'000'000;
  rule.max_per_operator = 3;
  rule.at_least = 1;
  auto released = apply_shape_rule(rule, *moe, *moe_def, "sweep.yaml");
  ASSERT_TRUE(released) << released.error().message;
  EXPECT_EQ(*released, std::vector<std::string>{sized_shapes(*moe, *moe_def)->front().id});
  rule.reduced = true;
  EXPECT_EQ(*apply_shape_rule(rule, *moe, *moe_def, "sweep.yaml"),
            std::vector<std::string>{"reduced-0"});
  EXPECT_EQ(*quick_shapes(*moe, *moe_def, {"reduced-0"}, 3), std::vector<std::string>{"reduced-0"});
  EXPECT_EQ(*select_shapes(*moe, *moe_def, "reduced-0"), std::vector<std::string>{"reduced-0"});
  ShapeRule all;
  auto every = apply_shape_rule(all, *moe, *moe_def, "sweep.yaml");
  EXPECT_EQ(every->size(), moe->shapes.size());
  EXPECT_EQ(std::count(every->begin(), every->end(), "reduced-0"), 0);

  auto f = rms_norm();
  EXPECT_TRUE(f.info->reduced_shapes.empty());
  ShapeRule capped = rule;
  capped.max_input_elements = 1;
  EXPECT_EQ(*apply_shape_rule(capped, *f.info, *f.def, "sweep.yaml"),
            std::vector<std::string>{sized_shapes(*f.info, *f.def)->front().id});
}

// Every reduced shape resolves, is far smaller than its operator's smallest released shape, and
// gets its T_roofline from the analytic counts (the release has none for it) under either source.
TEST(ShapeSelect, EveryReducedShapeIsSmallAndHasAnAnalyticRoofline) {
  auto s = Suite::load(ATREX_TEST_SUITE_DIR);
  ASSERT_TRUE(s) << s.error().message;
  int reduced = 0;
  for (const auto& op : s->operators()) {
    const OperatorDef* def = find_native_operator(op.name);
    ASSERT_NE(def, nullptr) << op.name;
    if (op.reduced_shapes.empty()) continue;
    const int64_t smallest = sized_shapes(op, *def)->front().input_elements;
    for (const auto& r : op.reduced_shapes) {
      ++reduced;
      auto resolved = resolve_shape(*def, r);
      ASSERT_TRUE(resolved) << op.name << " " << r.id << ": " << resolved.error().message;
      int64_t n = 0;
      for (const auto& t : resolved->inputs) n += t.numel();
      EXPECT_LT(n * 10, smallest) << op.name << " " << r.id;
      EXPECT_LE(n, 3'000'000) << op.name << " " << r.id << ": the CPU default's cap";
      auto released = roofline_counts(*s, op.name, r, RooflineSource::kReleased);
      auto analytic = roofline_counts(*s, op.name, r, RooflineSource::kAnalytic);
      ASSERT_TRUE(released && analytic) << op.name;
      EXPECT_EQ(released->q_read_bytes, analytic->q_read_bytes) << op.name;
      EXPECT_GT(analytic->q_read_bytes, 0) << op.name;
    }
  }
  EXPECT_EQ(reduced, 6);
}

}  // namespace
}  // namespace atrex::problems
