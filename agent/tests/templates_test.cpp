#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "atrex/agent/templates.h"
#include "atrex/candidate_util.h"
#include "atrex/common/hash.h"
#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"
#include "atrex/runner/evaluator.h"

namespace atrex::agent {
namespace {
namespace fs = std::filesystem;

const char* kHeader =
    "// atrex-template: demo\n"
    "// atrex-description: a demo\n"
    "// atrex-param: BLOCK = 128 | 64, 128, 256\n"
    "// atrex-param: VEC = 1 | 1, 2\n"
    "#include \"atrex/candidate.h\"\n";

TEST(Templates, HeaderIsParsed) {
  auto t = TemplateCatalog::parse("rms_norm/cuda/demo.cu", kHeader);
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->op, "rms_norm");
  EXPECT_EQ(t->backend, Backend::kCuda);
  EXPECT_EQ(t->name, "demo");
  ASSERT_EQ(t->params.size(), 2u);
  EXPECT_EQ(t->params[0].values, (std::vector<int64_t>{64, 128, 256}));
  EXPECT_EQ(t->params[0].default_value, 128);
}

TEST(Templates, RenderDefinesParametersAndKeepsTemplateLineNumbers) {
  auto t = TemplateCatalog::parse("rms_norm/cuda/demo.cu", kHeader);
  std::string s = render(*t, {{"BLOCK", 256}, {"VEC", 2}});
  EXPECT_NE(s.find("#define BLOCK 256\n"), std::string::npos);
  EXPECT_NE(s.find("#define VEC 2\n"), std::string::npos);
  EXPECT_NE(s.find("#line 1 \"templates/rms_norm/cuda/demo.cu\""), std::string::npos);
  EXPECT_NE(sha256_hex(s), sha256_hex(render(*t, {{"BLOCK", 128}, {"VEC", 2}})));
}

TEST(Templates, DefaultOutsideValuesIsRejectedWithLine) {
  auto t = TemplateCatalog::parse("op/cpu/x.cpp",
                                  "// atrex-template: x\n// atrex-param: U = 3 | 1, 2, 4\n");
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message.find("op/cpu/x.cpp:2"), std::string::npos) << t.error().message;
}

TEST(Templates, UnsortedValuesAndMissingNameAreRejected) {
  EXPECT_FALSE(TemplateCatalog::parse("op/cpu/x.cpp",
                                      "// atrex-template: x\n// atrex-param: U = 2 | 4, 2\n"));
  EXPECT_FALSE(TemplateCatalog::parse("op/cpu/x.cpp", "// atrex-param: U = 2 | 2, 4\n"));
}

// Issue #2: the operators the built-in agent covers have at least two templates with tunables per
// backend, and every template belongs to a native operator.
TEST(Templates, EmbeddedCatalogCoversTheAgentOperatorsOnBothBackends) {
  auto cat = TemplateCatalog::embedded();
  ASSERT_TRUE(cat) << cat.error().message;
  for (const auto& t : cat->all()) EXPECT_TRUE(problems::require_native_operator(t.op)) << t.path;
  for (const char* op :
       {"rms_norm", "fused_add_rms_norm", "silu_and_mul", "l2_norm", "moe_sum_reduce",
        "reshape_and_cache", "paged_attention_decode", "mla_decode_attention",
        "unified_attention", "attention_forward", "block_scaled_mm", "fused_qkv_rope",
        "causal_conv1d", "moe_topk_gating_softmax", "fused_qk_rmsnorm", "mrope",
        "fp8_dynamic_per_token_quant", "per_token_group_quant_fp8", "gated_rms_norm",
        "linear_sigmoid_mul", "fused_rmsnorm_quant", "layer_norm", "gated_delta_rule_update",
        "chunk_delta_rule_output", "chunk_gated_delta_rule_state",
        "moe_align_block_size", "moe_count_and_sort", "topk_filter", "fused_moe",
        "fp8_blockscale_fused_moe"}) {
    for (Backend backend : {Backend::kCpu, Backend::kCuda}) {
      auto ts = cat->find(op, backend);
      EXPECT_GE(ts.size(), 2u) << op << " " << backend_name(backend);
      for (const auto* t : ts) EXPECT_FALSE(t->params.empty()) << t->path << " has nothing to tune";
    }
  }
}

// The candidates' host fp8 decode (candidate_util.h) agrees with the suite's on all 256 bytes.
TEST(Templates, CandidateFp8DecodeMatchesTheSuites) {
  for (int v = 0; v < 256; ++v) {
    const float got = cand::fp8_e4m3_to_float(static_cast<uint8_t>(v));
    const float want = num::fp8e4m3_to_float(static_cast<uint8_t>(v));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << v;
    } else {
      EXPECT_EQ(got, want) << v;
      EXPECT_EQ(std::signbit(got), std::signbit(want)) << v;
    }
  }
}

TEST(Templates, EmbeddedMatchesTheSourceFolder) {
  auto embedded = TemplateCatalog::embedded();
  auto folder = TemplateCatalog::load_dir(ATREX_TEST_TEMPLATE_DIR);
  ASSERT_TRUE(embedded && folder);
  ASSERT_EQ(embedded->all().size(), folder->all().size()) << "rebuild: templates changed";
  for (size_t i = 0; i < folder->all().size(); ++i)
    EXPECT_EQ(embedded->all()[i].text, folder->all()[i].text);
}

// Parameter points worth checking: defaults, and each parameter at its extremes.
std::vector<ParamValues> corner_points(const KernelTemplate& t) {
  std::vector<ParamValues> pts{default_params(t)};
  for (const auto& p : t.params) {
    for (int64_t v : {p.values.front(), p.values.back()}) {
      ParamValues x = default_params(t);
      x[p.name] = v;
      if (std::find(pts.begin(), pts.end(), x) == pts.end()) pts.push_back(x);
    }
  }
  return pts;
}

// The two smallest shapes of an operator (by input elements), to keep CI fast.
std::vector<std::string> small_shapes(const problems::Suite& suite, const std::string& op) {
  const auto* info = suite.find(op);
  const auto* def = problems::find_native_operator(op);
  std::vector<std::pair<int64_t, std::string>> sized;
  for (const auto& s : info->shapes) {
    auto r = problems::resolve_shape(*def, s);
    int64_t n = 0;
    for (const auto& d : r->inputs) n += d.numel();
    sized.emplace_back(n, s.id);
  }
  std::sort(sized.begin(), sized.end());
  std::vector<std::string> out;
  for (size_t i = 0; i < std::min<size_t>(2, sized.size()); ++i) out.push_back(sized[i].second);
  return out;
}

// The operators that have templates for a backend, one ctest test each (so ctest -j spreads the
// corner runs and compiles over the cores instead of one serial test of many minutes).
std::vector<std::string> template_operators(Backend backend) {
  std::vector<std::string> ops;
  auto cat = TemplateCatalog::embedded();
  if (!cat) return ops;
  for (const auto& t : cat->all())
    if (t.backend == backend && std::find(ops.begin(), ops.end(), t.op) == ops.end())
      ops.push_back(t.op);
  return ops;
}

std::string op_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

class CpuCorners : public ::testing::TestWithParam<std::string> {};

// Operators whose smallest released shapes take minutes per corner on the CPU (fp8 GEMMs of
// 3-8 GFLOP judged in fp64, norms over 17M+ elements, gigabytes of fp8 expert weights) run their
// corners on their reduced shapes (problems/src/ops/reduced_shapes.cpp), as the CPU sweep does.
TEST_P(CpuCorners, CpuTemplatesPassTheGatesAtTheirCorners) {
  const std::string op = GetParam();
  auto suite = problems::Suite::load(ATREX_TEST_SUITE_DIR);
  ASSERT_TRUE(suite) << suite.error().message;
  const problems::OperatorInfo* info = suite->find(op);
  ASSERT_NE(info, nullptr) << op;
  std::vector<std::string> shape_ids;
  for (const auto& r : info->reduced_shapes) shape_ids.push_back(r.id);
  if (shape_ids.empty()) shape_ids = small_shapes(*suite, op);
  auto profiles =
      problems::load_hardware_profiles({fs::path(ATREX_TEST_SUITE_DIR) / "configs" / "hardware"});
  runner::EvaluatorOptions o;
  o.suite = &*suite;
  o.hardware = *problems::find_hardware_profile(*profiles, "H20");
  o.cache_dir =
      fs::temp_directory_path() / ("atrex_tpl_cache_" + op + "_" + std::to_string(::getpid()));
  o.include_dir = ATREX_TEST_INCLUDE_DIR;
  o.child_dir = ATREX_TEST_BIN_DIR;
  runner::Evaluator ev(o);
  auto cat = TemplateCatalog::embedded();
  ASSERT_TRUE(cat);
  int evaluated = 0;
  for (const auto* t : cat->find(op, Backend::kCpu)) {
    for (const auto& pt : corner_points(*t)) {
      EvalTask task;
      task.task_id = t->path + format_params(pt);
      task.operator_name = t->op;
      task.shape_ids = shape_ids;
      task.candidate.source = render(*t, pt);
      task.candidate.sha256 = sha256_hex(task.candidate.source);
      task.candidate.backend = Backend::kCpu;
      task.candidate.agent = "test";
      task.settings.seeds = 2;
      task.settings.performance = false;
      auto recs = ev.evaluate(task);
      ASSERT_TRUE(recs) << recs.error().message;
      for (const auto& r : *recs) {
        EXPECT_EQ(r.status, EvalStatus::kOk)
            << t->path << " " << format_params(pt) << " shape " << r.shape_id << ": " << r.error;
      }
      ++evaluated;
    }
  }
  EXPECT_GT(evaluated, 0) << op;
  fs::remove_all(o.cache_dir);
}

INSTANTIATE_TEST_SUITE_P(TemplatesIntegration, CpuCorners,
                         ::testing::ValuesIn(template_operators(Backend::kCpu)), op_name);

// The released attention_forward and unified_attention shapes small enough for CI hold one
// sequence each; these batches exercise what they do not: several sequences of unaligned
// lengths (q blocks and key tiles ending mid-block, a 1-token sequence beside long ones), GQA
// groups of 3, head dims 72 and 80, block size 32. A copy of the suite with shape "3" of each
// operator replaced by such a batch goes through the real gates.
TEST(TemplatesIntegration, CpuAttentionTemplatesPassTheGatesOnMixedBatches) {
  const fs::path dir =
      fs::temp_directory_path() / ("atrex_tpl_mixed_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(ATREX_TEST_SUITE_DIR, dir, fs::copy_options::recursive);
  const std::map<std::string, std::string> batches = {
      {"unified_attention",
       R"({"3": {"init_kwargs": null, "input_kwargs": {"num_seqs": 4, "seq_lens": [37, 1, 70, 16],
           "num_query_heads": 6, "num_kv_heads": 2, "head_size": 72, "block_size": 32}}})"},
      {"attention_forward",
       R"({"3": {"init_kwargs": null, "input_kwargs": {"num_heads": 3, "head_dim": 80,
           "seq_lens": [1, 45, 130]}}})"}};
  for (const auto& [op, json] : batches) {
    std::ofstream(dir / "data" / op / "shapes.json") << json;
  }
  auto suite = problems::Suite::load(dir);
  ASSERT_TRUE(suite) << suite.error().message;
  auto profiles = problems::load_hardware_profiles({dir / "configs" / "hardware"});
  runner::EvaluatorOptions o;
  o.suite = &*suite;
  o.hardware = *problems::find_hardware_profile(*profiles, "H20");
  o.cache_dir = dir / "cache";
  o.include_dir = ATREX_TEST_INCLUDE_DIR;
  o.child_dir = ATREX_TEST_BIN_DIR;
  runner::Evaluator ev(o);
  auto cat = TemplateCatalog::embedded();
  ASSERT_TRUE(cat);
  int evaluated = 0;
  for (const auto& [op, json] : batches) {
    for (const auto* t : cat->find(op, Backend::kCpu)) {
      for (const auto& pt : corner_points(*t)) {
        EvalTask task;
        task.task_id = t->path + format_params(pt);
        task.operator_name = op;
        task.shape_ids = {"3"};
        task.candidate.source = render(*t, pt);
        task.candidate.sha256 = sha256_hex(task.candidate.source);
        task.candidate.backend = Backend::kCpu;
        task.candidate.agent = "test";
        task.settings.seeds = 2;
        task.settings.performance = false;
        task.settings.unseen_shapes = 0;
        auto recs = ev.evaluate(task);
        ASSERT_TRUE(recs) << recs.error().message;
        ASSERT_EQ(recs->size(), 1u);
        EXPECT_EQ(recs->front().status, EvalStatus::kOk)
            << t->path << " " << format_params(pt) << ": " << recs->front().error;
        ++evaluated;
      }
    }
  }
  EXPECT_GE(evaluated, 4) << "no attention cpu templates in the catalogue";
  fs::remove_all(dir);
}

#ifdef ATREX_TEST_HAVE_NVCC
class CudaCorners : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaCorners, CudaTemplatesCompilesAtTheirCorners) {
  const std::string op = GetParam();
  const fs::path dir =
      fs::temp_directory_path() / ("atrex_tpl_nvcc_" + op + "_" + std::to_string(::getpid()));
  runner::CompileCache cache(dir, ATREX_TEST_INCLUDE_DIR);
  auto cat = TemplateCatalog::embedded();
  ASSERT_TRUE(cat);
  int compiled = 0;
  for (const auto* t : cat->find(op, Backend::kCuda)) {
    for (const auto& pt : corner_points(*t)) {
      CandidateRef c;
      c.source = render(*t, pt);
      c.sha256 = sha256_hex(c.source);
      c.backend = Backend::kCuda;
      c.file_name = t->name + ".cu";
      auto r = cache.compile(c, "sm_90a", 600);
      ASSERT_TRUE(r) << r.error().message;
      EXPECT_TRUE(r->ok) << t->path << " " << format_params(pt) << ":\n" << r->log;
      ++compiled;
    }
  }
  EXPECT_GT(compiled, 0) << op;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(TemplatesIntegration, CudaCorners,
                         ::testing::ValuesIn(template_operators(Backend::kCuda)), op_name);
#endif

// The hip templates compile with hipcc at their corners, for gfx90a (Debian 12's hipcc 5.2 does
// not know MI300X's gfx942). Compile only: no AMD GPU runs them. Skipped without hipcc, unless
// ATREX_REQUIRE_HIP=1 (.ci/run), where that fails.
TEST(TemplatesIntegration, HipTemplatesCompilesAtTheirCorners) {
  bool hipcc = false;
  std::stringstream dirs(std::getenv("PATH") ? std::getenv("PATH") : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    hipcc = hipcc || (!dir.empty() && fs::exists(fs::path(dir) / "hipcc"));
  if (!hipcc) {
    const char* required = std::getenv("ATREX_REQUIRE_HIP");
    if (required && std::string(required) == "1")
      FAIL() << "hipcc is not installed (ATREX_REQUIRE_HIP=1)";
    GTEST_SKIP() << "hipcc is not installed";
  }
  runner::CompileCache cache(
      fs::temp_directory_path() / ("atrex_tpl_hipcc_" + std::to_string(::getpid())),
      ATREX_TEST_INCLUDE_DIR);
  auto cat = TemplateCatalog::embedded();
  ASSERT_TRUE(cat);
  int compiled = 0;
  for (const auto& t : cat->all()) {
    if (t.backend != Backend::kHip) continue;
    for (const auto& pt : corner_points(t)) {
      CandidateRef c;
      c.source = render(t, pt);
      c.sha256 = sha256_hex(c.source);
      c.backend = Backend::kHip;
      c.file_name = t.name + ".hip";
      auto r = cache.compile(c, "gfx90a", 600);
      ASSERT_TRUE(r) << r.error().message;
      EXPECT_TRUE(r->ok) << t.path << " " << format_params(pt) << ":\n" << r->log;
      ++compiled;
    }
  }
  EXPECT_GT(compiled, 0) << "no hip template in the catalogue";
  fs::remove_all(fs::temp_directory_path() / ("atrex_tpl_hipcc_" + std::to_string(::getpid())));
}

}  // namespace
}  // namespace atrex::agent
