// The CPU templates on variant shapes: parameters and sizes no released shape has, from
// kernels/variants/*.json, through the real gates.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "atrex/agent/templates.h"
#include "atrex/common/hash.h"
#include "atrex/problems/operator.h"
#include "atrex/runner/evaluator.h"

namespace atrex::agent {
namespace {
namespace fs = std::filesystem;

// Every CPU template at its defaults, through the real gates, on the variant shapes of
// kernels/variants/<file> (a copy of the suite with those operators' shapes replaced); returns
// how many templates ran. Tiny shapes, about 2 s per template on 2 cores.
int cpu_templates_pass_on_variant_shapes(const std::string& file) {
  const fs::path dir = fs::temp_directory_path() /
                       ("atrex_tpl_variants_" + file + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(ATREX_TEST_SUITE_DIR, dir, fs::copy_options::recursive);
  std::ifstream in(fs::path(ATREX_TEST_TEMPLATE_DIR).parent_path() / "variants" / file);
  EXPECT_TRUE(in) << "kernels/variants/" << file << " is missing";
  if (!in) return 0;
  const auto variants = nlohmann::json::parse(in);
  for (const auto& [op, shapes] : variants.items())
    std::ofstream(dir / "data" / op / "shapes.json") << shapes.dump();
  auto suite = problems::Suite::load(dir);
  EXPECT_TRUE(suite) << suite.error().message;
  if (!suite) return 0;
  auto profiles = problems::load_hardware_profiles({dir / "configs" / "hardware"});
  runner::EvaluatorOptions o;
  o.suite = &*suite;
  o.hardware = *problems::find_hardware_profile(*profiles, "H20");
  o.cache_dir = dir / "cache";
  o.include_dir = ATREX_TEST_INCLUDE_DIR;
  o.child_dir = ATREX_TEST_BIN_DIR;
  runner::Evaluator ev(o);
  auto cat = TemplateCatalog::embedded();
  EXPECT_TRUE(cat);
  if (!cat) return 0;
  int evaluated = 0;
  for (const auto& [op, shapes] : variants.items()) {
    std::vector<std::string> ids;
    for (const auto& [id, _] : shapes.items()) ids.push_back(id);
    for (const auto* t : cat->find(op, Backend::kCpu)) {
      EvalTask task;
      task.task_id = t->path;
      task.operator_name = op;
      task.shape_ids = ids;
      task.candidate.source = render(*t, default_params(*t));
      task.candidate.sha256 = sha256_hex(task.candidate.source);
      task.candidate.backend = Backend::kCpu;
      task.candidate.agent = "test";
      task.settings.seeds = 2;
      task.settings.performance = false;
      task.settings.unseen_shapes = 0;
      auto recs = ev.evaluate(task);
      EXPECT_TRUE(recs) << recs.error().message;
      if (!recs) continue;
      EXPECT_EQ(recs->size(), ids.size());
      for (const auto& r : *recs)
        EXPECT_EQ(r.status, EvalStatus::kOk) << t->path << " shape " << r.shape_id << ": " << r.error;
      ++evaluated;
    }
  }
  fs::remove_all(dir);
  return evaluated;
}

// The long-tail operators' parameters that no released shape exercises (kernels/variants/
// tail_shapes.json: GPT-J and interleaved mrope, partial rotary dims, group-limited routing, 60
// and 300 experts, conv width 3 with rows shorter than a pack, group sizes that force scalar
// paths) (deploy/gpu/run-gpu-checks.sh tailVariants runs the CUDA templates on them on a GPU). About 30 s on
// 2 cores: 14 compiles, tiny shapes.
TEST(TemplatesIntegration, CpuTailTemplatesPassTheGatesOnVariantShapes) {
  EXPECT_GE(cpu_templates_pass_on_variant_shapes("tail_shapes.json"), 14)
      << "long-tail cpu templates missing from the catalogue";
}

// linear_sigmoid_mul, fused_rmsnorm_quant, layer_norm and the linear-attention family on what
// no released shape has (kernels/variants/delta_norm_shapes.json): reduction and row lengths
// that are not a multiple of a vector or tile (100, 200, 999, 1001), rank-3 layer_norm input,
// value dims that end mid column block (40, 48, 96), key_dim 64 and 200, GQA groups of 3,
// two batch entries, use_qk_l2norm off (3 tokens only: unnormalised randn k makes the recurrence
// grow about |1 - beta |k|^2| a token, and at 37 tokens final states near 1e5 differed 6% between
// summation orders on some seeds), partial last chunks, chunk_size 32
// (deploy/gpu/run-gpu-checks.sh deltaNorm -- --variants runs the CUDA templates on them). 82 s for the
// 12 templates on this 2-core VM at load ~15 (12 compiles, tiny shapes).
TEST(TemplatesIntegration, CpuDeltaNormTemplatesPassTheGatesOnVariantShapes) {
  EXPECT_GE(cpu_templates_pass_on_variant_shapes("delta_norm_shapes.json"), 12)
      << "delta-rule or norm cpu templates missing from the catalogue";
}

}  // namespace
}  // namespace atrex::agent
