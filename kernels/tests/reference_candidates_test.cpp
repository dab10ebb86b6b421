// The CPU reference candidates (kernels/reference/<op>/naive.cpp) through the real gates: each
// re-expresses its operator's reference semantics as a standalone candidate, so it must pass
// the correctness gate (fresh seeds, poisoned outputs, unchanged inputs, range probe) on a small
// shape of its operator. A change to an operator definition (signature, input generator,
// reference) that its candidate no longer matches fails here, as does a missing candidate.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include <gtest/gtest.h>

#include "atrex/common/hash.h"
#include "atrex/problems/operator.h"
#include "atrex/runner/evaluator.h"

namespace atrex {
namespace {
namespace fs = std::filesystem;

// Shapes whose inputs hold more elements than this are too slow for the CPU backend in CI (the
// structured MoE generators take minutes); an operator whose smallest shape is larger runs on its
// reduced shape, or is skipped with that reason where it has none (the GPU check
// `deploy/gpu/run-gpu-checks.sh refs` covers it).
constexpr int64_t kMaxInputElements = 120'000'000;

const problems::Suite& suite() {
  static const problems::Suite* s = [] {
    auto loaded = problems::Suite::load(ATREX_TEST_SUITE_DIR);
    EXPECT_TRUE(loaded) << loaded.error().message;
    return new problems::Suite(loaded ? std::move(*loaded) : problems::Suite{});
  }();
  return *s;
}

std::vector<std::string> reference_operators() {
  std::vector<std::string> ops;
  for (const auto& e : fs::directory_iterator(fs::path(ATREX_TEST_KERNELS_DIR) / "reference")) {
    if (e.is_directory()) ops.push_back(e.path().filename().string());
  }
  std::sort(ops.begin(), ops.end());
  return ops;
}

TEST(ReferenceCandidates, EveryNativeOperatorHasACpuAndACudaCandidate) {
  const auto ops = reference_operators();
  const std::set<std::string> have(ops.begin(), ops.end());
  int native = 0;
  for (const auto& info : suite().operators()) {
    if (!problems::find_native_operator(info.name)) continue;
    ++native;
    EXPECT_TRUE(have.count(info.name)) << info.name << " has no kernels/reference/<op>/";
    for (const char* file : {"naive.cpp", "naive.cu"}) {
      EXPECT_TRUE(fs::exists(fs::path(ATREX_TEST_KERNELS_DIR) / "reference" / info.name / file))
          << info.name << ": " << file << " is missing";
    }
  }
  EXPECT_EQ(native, static_cast<int>(suite().operators().size()));
  for (const auto& op : ops) EXPECT_TRUE(suite().find(op)) << op << " is not a suite operator";
}

class CpuReference : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuReference, PassesTheCorrectnessGateOnItsSmallestShape) {
  const std::string op = GetParam();
  auto info = suite().require(op);
  ASSERT_TRUE(info) << info.error().message;
  auto def = problems::require_native_operator(op);
  ASSERT_TRUE(def) << def.error().message;
  const problems::Shape* smallest = nullptr;
  int64_t fewest = 0;
  for (const auto& s : (*info)->shapes) {
    auto r = problems::resolve_shape(**def, s);
    ASSERT_TRUE(r) << r.error().message;
    int64_t n = 0;
    for (const auto& d : r->inputs) n += d.numel();
    if (!smallest || n < fewest) smallest = &s, fewest = n;
  }
  ASSERT_NE(smallest, nullptr);
  // Past the budget the operator's reduced shape stands in (docs/sweeps.md "Reduced shapes":
  // fp8_blockscale_fused_moe's smallest released shape holds 604M elements of fp8 weights).
  if (fewest > kMaxInputElements && !(*info)->reduced_shapes.empty()) {
    smallest = &(*info)->reduced_shapes.front();
  } else if (fewest > kMaxInputElements) {
    GTEST_SKIP() << op << ": the smallest shape (" << smallest->id << ") has " << fewest
                 << " input elements, over the CPU budget of " << kMaxInputElements;
  }
  const fs::path file = fs::path(ATREX_TEST_KERNELS_DIR) / "reference" / op / "naive.cpp";
  auto source = read_text_file(file);
  ASSERT_TRUE(source) << source.error().message;

  EvalTask t;
  t.task_id = "reference-" + op;
  t.operator_name = op;
  t.shape_ids = {smallest->id};
  t.hardware = "H20";
  t.candidate.source = *source;
  t.candidate.sha256 = sha256_hex(*source);
  t.candidate.backend = Backend::kCpu;
  t.candidate.agent = "reference";
  t.candidate.file_name = "naive.cpp";
  t.settings.seeds = 2;
  t.settings.performance = false;
  t.settings.unseen_shapes = 0;
  t.settings.shape_timeout_s = 600;
  runner::EvaluatorOptions o;
  o.suite = &suite();
  auto profiles =
      problems::load_hardware_profiles({fs::path(ATREX_TEST_SUITE_DIR) / "configs" / "hardware"});
  ASSERT_TRUE(profiles) << profiles.error().message;
  auto h20 = problems::find_hardware_profile(*profiles, "H20");
  ASSERT_TRUE(h20) << h20.error().message;
  o.hardware = *h20;
  o.cache_dir = fs::temp_directory_path() / ("atrex_reference_cache_" + std::to_string(::getpid()));
  o.include_dir = ATREX_TEST_INCLUDE_DIR;
  o.child_dir = ATREX_TEST_BIN_DIR;
  o.seed = 20261201;
  runner::Evaluator ev(o);
  auto records = ev.evaluate(t);
  std::error_code ec;
  fs::remove_all(o.cache_dir, ec);
  ASSERT_TRUE(records) << records.error().message;
  ASSERT_EQ(records->size(), 1u);
  const EvalRecord& r = records->front();
  EXPECT_EQ(r.status, EvalStatus::kOk) << op << " shape " << r.shape_id << ": " << r.error;
  EXPECT_EQ(r.seeds_passed, 2);
}

INSTANTIATE_TEST_SUITE_P(Kernels, CpuReference, ::testing::ValuesIn(reference_operators()),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace atrex
