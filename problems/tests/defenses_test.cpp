// The operator-side parts of two reward-hack defenses (docs/evaluation.md): the range probe's
// scaled inputs (RangeProbe) and the unseen shapes derived from free dimensions (FreeDim).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>
#include <vector>

#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"
#include "atrex/problems/unseen.h"

namespace atrex::problems {
namespace {

const Suite& suite() {
  static const Suite s = *Suite::load(ATREX_TEST_SUITE_DIR);
  return s;
}

bool is_float(DType d) {
  return d == DType::kBF16 || d == DType::kF16 || d == DType::kF32 || d == DType::kF64;
}

// The probe may only scale floating inputs drawn from a distribution: an index, an id list or an
// fp8 tensor with its scales would change meaning (or overflow) when multiplied.
TEST(RangeProbe, ScalesOnlyFloatingInputsDrawnFromADistribution) {
  int enabled = 0;
  for (const auto& op : native_operators()) {
    if (!op.range_probe.enabled()) continue;
    ++enabled;
    EXPECT_GT(op.range_probe.exponent, 0) << op.name;
    EXPECT_FALSE(op.range_probe.why.empty()) << op.name << ": say why the exponent exposes fp16";
    for (const auto& name : op.range_probe.inputs) {
      auto it = std::find_if(op.inputs.begin(), op.inputs.end(),
                             [&](const TensorSpec& t) { return t.name == name; });
      ASSERT_NE(it, op.inputs.end()) << op.name << " has no input " << name;
      EXPECT_TRUE(is_float(it->dtype)) << op.name << "." << name;
      EXPECT_EQ(it->generate, nullptr) << op.name << "." << name << " is structured";
    }
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      const bool listed = std::count(op.range_probe.inputs.begin(), op.range_probe.inputs.end(),
                                     op.inputs[i].name) > 0;
      EXPECT_EQ(range_probe_exponent(op, i), listed ? op.range_probe.exponent : 0)
          << op.name << "." << op.inputs[i].name;
    }
  }
  EXPECT_GE(enabled, 8);
  const OperatorDef* rms = find_native_operator("rms_norm");
  ASSERT_NE(rms, nullptr);
  EXPECT_TRUE(rms->range_probe.enabled());
  const OperatorDef* bsmm =
      find_native_operator("block_scaled_mm");  // fp8 inputs with scales: left off
  ASSERT_NE(bsmm, nullptr);
  EXPECT_FALSE(bsmm->range_probe.enabled());
}

// The probe set is the usual draw times 2^e, bit for bit (so the reference on it is the
// reference of a scaled problem, not of other data), and it is not the usual draw.
TEST(RangeProbe, ProbeInputIsTheUsualDrawTimesThePowerOfTwo) {
  for (const char* op : {"rms_norm", "fused_qk_rmsnorm"}) {
    const OperatorDef* def = find_native_operator(op);
    ASSERT_NE(def, nullptr);
    auto r = resolve_shape(*def, suite().find(op)->shapes.front());
    ASSERT_TRUE(r) << r.error().message;
    const int e = def->range_probe.exponent;
    const auto& t = r->inputs[0];
    std::vector<uint8_t> usual(t.bytes()), probe(t.bytes());
    generate_input_cpu(*r, 0, 42, usual.data());
    generate_input_cpu(*r, 0, 42, probe.data(), e);
    EXPECT_NE(usual, probe) << op;
    ASSERT_TRUE(scale_by_power_of_two(t.dtype, usual.data(), t.numel(), e));
    EXPECT_EQ(usual, probe) << op;
  }
  std::vector<uint8_t> ids(16);
  EXPECT_FALSE(scale_by_power_of_two(DType::kI32, ids.data(), 4, 3));
}

// The premise of the rms_norm probe: on the scaled rows a sum of squares in fp16 overflows
// (max 65504) while the fp32 reference output is finite and equals the output of the unscaled
// rows (rms_norm does not depend on the scale of x).
TEST(RangeProbe, RmsNormProbeRowsOverflowFp16ButNotTheReference) {
  const OperatorDef* def = find_native_operator("rms_norm");
  ASSERT_NE(def, nullptr);
  Shape s;
  s.params = Json{{"token_count", 4}, {"hidden_size", 128}, {"eps", 1e-6}};
  auto r = resolve_shape(*def, s);
  ASSERT_TRUE(r);
  std::vector<uint16_t> x(512), xs(512), w(128), out(512), outs(512);
  generate_input_cpu(*r, 0, 7, x.data());
  generate_input_cpu(*r, 0, 7, xs.data(), def->range_probe.exponent);
  generate_input_cpu(*r, 1, 7, w.data());
  for (int row = 0; row < 4; ++row) {
    float ss = 0;
    for (int h = 0; h < 128; ++h)
      ss += num::bf16_to_float(xs[row * 128 + h]) * num::bf16_to_float(xs[row * 128 + h]);
    EXPECT_GT(ss, 65504.0f) << "row " << row
                            << " stays in the fp16 range: the probe would not expose fp16";
  }
  def->reference_cpu(*r, std::vector<const void*>{x.data(), w.data()},
                     std::vector<void*>{out.data()});
  def->reference_cpu(*r, std::vector<const void*>{xs.data(), w.data()},
                     std::vector<void*>{outs.data()});
  for (size_t i = 0; i < out.size(); ++i) {
    const float a = num::bf16_to_float(out[i]), b = num::bf16_to_float(outs[i]);
    ASSERT_TRUE(std::isfinite(b));
    EXPECT_NEAR(a, b, 1e-2 + 1e-2 * std::fabs(a)) << i;
  }
}

bool finite_element(DType d, const uint8_t* p) {
  switch (d) {
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return std::isfinite(num::bf16_to_float(h));
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return std::isfinite(num::fp16_to_float(h));
    }
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return std::isfinite(f);
    }
    case DType::kFP8E4M3: return (*p & 0x7f) != 0x7f;  // the e4m3fn NaN
    default: return true;
  }
}

// "Scaling keeps the semantics well defined": on the probe's inputs the reference of every
// operator with a probe is finite everywhere, at its smallest hot shape (rows capped at 64 to
// keep this fast: the magnitudes are per row).
TEST(RangeProbe, ReferenceOnTheProbeInputsIsFinite) {
  for (const auto& op : native_operators()) {
    if (!op.range_probe.enabled()) continue;
    const OperatorInfo* info = suite().find(op.name);
    ASSERT_NE(info, nullptr);
    std::optional<ResolvedShape> smallest;
    double best = 0;
    for (Shape s : info->shapes) {
      for (const auto& dim : op.free_dims) {
        const auto open = dim.param.find('[');
        Json& v = open == std::string::npos ? s.params[dim.param]
                                            : s.params[dim.param.substr(0, open)][0];
        if (v.is_number_integer()) v = std::min<int64_t>(v.get<int64_t>(), 64);
      }
      auto r = resolve_shape(op, s);
      ASSERT_TRUE(r) << r.error().message;
      double b = 0;
      for (const auto& t : r->inputs) b += static_cast<double>(t.bytes());
      if (!smallest || b < best) smallest = *r, best = b;
    }
    std::vector<std::vector<uint8_t>> in, out;
    std::vector<const void*> in_ptr;
    std::vector<void*> out_ptr;
    for (size_t i = 0; i < smallest->inputs.size(); ++i) {
      in.emplace_back(smallest->inputs[i].bytes());
      generate_input_cpu(*smallest, i, 5, in.back().data(), range_probe_exponent(op, i));
    }
    for (auto& b : in) in_ptr.push_back(b.data());
    for (const auto& t : smallest->outputs) out.emplace_back(t.bytes(), uint8_t{0});
    for (auto& b : out) out_ptr.push_back(b.data());
    op.reference_cpu(*smallest, in_ptr, out_ptr);
    for (size_t o = 0; o < out.size(); ++o) {
      const auto& t = smallest->outputs[o];
      const size_t es = dtype_size(t.dtype);
      int64_t bad = 0;
      for (size_t k = 0; k < out[o].size(); k += es)
        bad += !finite_element(t.dtype, out[o].data() + k);
      EXPECT_EQ(bad, 0) << op.name << " shape " << smallest->shape_id << " output " << t.name;
    }
  }
}

TEST(UnseenShapes, FreeDimensionsAreIntegerParametersOfEveryHotShape) {
  int with_free = 0;
  for (const auto& op : native_operators()) {
    if (op.free_dims.empty()) continue;
    ++with_free;
    const OperatorInfo* info = suite().find(op.name);
    ASSERT_NE(info, nullptr) << op.name;
    for (const auto& dim : op.free_dims) {
      EXPECT_FALSE(hot_values(*info, dim.param).empty()) << op.name << "." << dim.param;
      auto u =
          derive_unseen_shapes(op, *info, std::vector<const Shape*>{&info->shapes.front()}, 1, 3);
      EXPECT_TRUE(u) << op.name << ": " << u.error().message;
    }
  }
  EXPECT_GE(with_free, 15);
}

// Every derived shape resolves, differs from its base only in the free dimension, and holds a
// value no hot shape of the operator has (a candidate that hard-codes them gets no hit).
TEST(UnseenShapes, AvoidEveryHotValueAndResolve) {
  for (const auto& op : native_operators()) {
    if (op.free_dims.empty()) continue;
    const OperatorInfo* info = suite().find(op.name);
    ASSERT_NE(info, nullptr);
    std::vector<const Shape*> bases;
    for (const auto& s : info->shapes) bases.push_back(&s);
    auto u = derive_unseen_shapes(op, *info, bases, 3, 11);
    ASSERT_TRUE(u) << u.error().message;
    ASSERT_EQ(u->size(), 3u) << op.name;
    for (const auto& x : *u) {
      const auto hot = hot_values(*info, x.param);
      EXPECT_FALSE(std::binary_search(hot.begin(), hot.end(), x.value))
          << op.name << " " << x.describe();
      EXPECT_TRUE(resolve_shape(op, x.shape)) << op.name << " " << x.describe();
      const Shape* base = info->find_shape(x.base_shape_id);
      ASSERT_NE(base, nullptr);
      Json diff = Json::diff(base->params, x.shape.params);
      EXPECT_EQ(diff.size(), 1u) << op.name << ": " << diff.dump();
      EXPECT_NE(x.value, x.hot_value);
      EXPECT_LE(std::llabs(x.value - x.hot_value), x.hot_value / 4 + 1 + 4096);
    }
  }
}

TEST(UnseenShapes, DrawsDependOnlyOnTheSeedAndStartFromTheSmallestBase) {
  const OperatorDef* def = find_native_operator("rms_norm");
  const OperatorInfo* info = suite().find("rms_norm");
  ASSERT_TRUE(def && info);
  std::vector<const Shape*> bases{info->find_shape("4"), info->find_shape("15"),
                                  info->find_shape("0")};
  auto a = derive_unseen_shapes(*def, *info, bases, 2, 5),
       b = derive_unseen_shapes(*def, *info, bases, 2, 5);
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->size(), 2u);
  EXPECT_EQ(a->at(0).base_shape_id, "15");  // token_count 3 x 128: the smallest input
  EXPECT_EQ(a->at(0).value, b->at(0).value);
  EXPECT_EQ(a->at(1).value, b->at(1).value);
  std::set<int64_t> seen;
  for (uint64_t seed = 0; seed < 16; ++seed)
    seen.insert(derive_unseen_shapes(*def, *info, bases, 2, seed)->at(1).value);
  EXPECT_GT(seen.size(), 4u) << "the values must not be predictable";
}

TEST(UnseenShapes, NoneWithoutFreeDimensionsOrWhenNotAsked) {
  const OperatorDef* attn = find_native_operator("unified_attention");  // seq_lens lists: left out
  ASSERT_NE(attn, nullptr);
  EXPECT_TRUE(attn->free_dims.empty());
  const OperatorInfo* info = suite().find("rms_norm");
  std::vector<const Shape*> bases{&info->shapes.front()};
  EXPECT_TRUE(derive_unseen_shapes(*find_native_operator("rms_norm"), *info, bases, 0, 1)->empty());
}

}  // namespace
}  // namespace atrex::problems
