// Fresh values, not only fresh addresses (issue 14 item 5; docs/evaluation.md "Checks around
// timing", "Edge-case inputs", "Guard regions"), end to end on the cpu backend through the real
// evaluation child and judge: the edge-case input set catches shortcuts random draws never
// expose (each shown passing without it, its honest twin passing with it), the timed calls'
// rotation and per-call splices defeat a content-keyed replay cache, and guard regions reject
// writes past the end or before the start of an output. Each test evaluates one or two small
// shapes with few seeds and timed calls, a few seconds each.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>

#include <gtest/gtest.h>

#include "atrex/common/hash.h"
#include "atrex/common/json_io.h"
#include "atrex/runner/compile.h"
#include "atrex/problems/host_run.h"
#include "atrex/runner/evaluator.h"
#include "judge_process.h"
#include "atrex/common/wire/child_protocol.h"
#include "shape_batch.h"
#include "shape_run_support.h"

namespace atrex::runner {
namespace {
namespace fs = std::filesystem;

class FreshInputs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto suite = problems::Suite::load(ATREX_TEST_SUITE_DIR);
    ASSERT_TRUE(suite) << suite.error().message;
    suite_ = new problems::Suite(std::move(*suite));
    auto profiles =
        problems::load_hardware_profiles({fs::path(ATREX_TEST_SUITE_DIR) / "configs" / "hardware"});
    ASSERT_TRUE(profiles);
    hardware_ = new problems::HardwareProfile(*problems::find_hardware_profile(*profiles, "H20"));
    cache_ = new fs::path(fs::temp_directory_path() /
                          ("atrex_fresh_inputs_cache_" + std::to_string(::getpid())));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*cache_);
    delete suite_;
    delete hardware_;
    delete cache_;
  }

  struct Run {
    std::string op = "rms_norm";
    std::vector<std::string> shapes = {"15"};
    std::map<std::string, std::string> defines;  // "#define NAME old" -> new value
    bool performance = false;
    std::function<void(EvalSettings&)> adjust;
  };

  // `file` under kernels/ (faults/..., reference/...).
  std::vector<EvalRecord> evaluate(const std::string& file, const Run& run) {
    std::string source = *read_text_file(fs::path(ATREX_TEST_DATA_DIR) / ".." / file);
    for (const auto& [name, value] : run.defines) {
      const std::string key = "#define " + name + " ";
      const auto at = source.find(key);
      EXPECT_NE(at, std::string::npos) << name;
      if (at == std::string::npos) continue;
      source.replace(at, source.find('\n', at) - at, key + value);
    }
    EvalTask t;
    t.task_id = "fresh-" + fs::path(file).filename().string();
    t.operator_name = run.op;
    t.shape_ids = run.shapes;
    t.candidate.source = source;
    t.candidate.sha256 = sha256_hex(source);
    t.candidate.backend = Backend::kCpu;
    t.candidate.agent = "test";
    t.candidate.file_name = fs::path(file).filename().string();
    t.settings.seeds = 2;
    t.settings.performance = run.performance;
    t.settings.min_iterations = 10;
    t.settings.max_iterations = 40;
    t.settings.min_time_s = 0;
    t.settings.target_rse = 1;
    t.settings.shape_timeout_s = 60;
    t.settings.unseen_shapes = 0;
    if (run.adjust) run.adjust(t.settings);
    EvaluatorOptions o;
    o.suite = suite_;
    o.hardware = *hardware_;
    o.cache_dir = *cache_;
    o.include_dir = ATREX_TEST_INCLUDE_DIR;
    o.child_dir = ATREX_TEST_BIN_DIR;
    o.seed = 99;
    Evaluator ev(o);
    auto r = ev.evaluate(t);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : std::vector<EvalRecord>{};
  }

  static problems::Suite* suite_;
  static problems::HardwareProfile* hardware_;
  static fs::path* cache_;
};

problems::Suite* FreshInputs::suite_ = nullptr;
problems::HardwareProfile* FreshInputs::hardware_ = nullptr;
fs::path* FreshInputs::cache_ = nullptr;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// --- edge-case input sets (attack 10)

struct EdgeCaseAttack {
  const char* op;
  const char* fault;
  const char* twin;
  std::vector<std::string> shapes;
  const char* named;  // a part of the edge case's description the failure must name
};

const std::vector<EdgeCaseAttack>& edge_case_attacks() {
  static const std::vector<EdgeCaseAttack> kAttacks = {
      {"topk_filter",
       "faults/topk_filter_edge_keeps_exactly_k.cpp",
       "reference/topk_filter/naive.cpp",
       {"3", "7"},
       "ties at the k-th value"},
      {"paged_attention_decode",
       "faults/paged_attention_decode_edge_ignores_block_table.cpp",
       "reference/paged_attention_decode/naive.cpp",
       {"5"},
       "permutation of the cache's blocks"},
      {"reshape_and_cache",
       "faults/reshape_and_cache_edge_ignores_slot_mapping.cpp",
       "reference/reshape_and_cache/naive.cpp",
       {"1"},
       "permutation of the cache's slots"},
  };
  return kAttacks;
}

TEST_F(FreshInputs, EdgeCaseShortcutsPassTheUsualSeedsButFailTheEdgeSet) {
  for (const auto& a : edge_case_attacks()) {
    SCOPED_TRACE(a.fault);
    auto without = evaluate(
        a.fault,
        {.op = a.op, .shapes = a.shapes, .adjust = [](EvalSettings& s) { s.edge_cases = false; }});
    ASSERT_EQ(without.size(), a.shapes.size());
    for (const auto& r : without) {
      EXPECT_EQ(r.status, EvalStatus::kOk)
          << "the shortcut must pass the usual seeds, else it tests nothing: " << r.error;
      EXPECT_TRUE(r.edge_case.empty());
    }
    auto with = evaluate(a.fault, {.op = a.op, .shapes = a.shapes});
    ASSERT_EQ(with.size(), a.shapes.size());
    for (const auto& r : with) {
      EXPECT_EQ(r.status, EvalStatus::kWrongResult) << r.shape_id << ": " << r.error;
      EXPECT_TRUE(contains(r.error, "edge case (")) << r.error;
      EXPECT_TRUE(contains(r.error, a.named)) << r.error;
      EXPECT_EQ(r.seeds_passed, 1) << "the edge-case set runs after the first seed";
    }
  }
}

TEST_F(FreshInputs, HonestTwinsPassTheEdgeSetAndTheRecordNamesIt) {
  for (const auto& a : edge_case_attacks()) {
    SCOPED_TRACE(a.twin);
    auto recs = evaluate(a.twin, {.op = a.op, .shapes = a.shapes});
    ASSERT_EQ(recs.size(), a.shapes.size());
    for (const auto& r : recs) {
      EXPECT_EQ(r.status, EvalStatus::kOk) << r.shape_id << ": " << r.error;
      EXPECT_TRUE(contains(r.edge_case, a.named)) << r.edge_case;
      EXPECT_EQ(r.seeds_passed, 2);
    }
  }
  // An operator without edge cases records none.
  auto plain = evaluate("faults/rms_norm_correct.cpp", {});
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0].status, EvalStatus::kOk) << plain[0].error;
  EXPECT_TRUE(plain[0].edge_case.empty());
}

// The judge on its own (judge_process.h): the edge-case set is required for its `ok`, so a child
// that skips it and reports ok is tampering for the runner. The twin makes every check honestly
// (the host reference's outputs) and gets ok.
TEST_F(FreshInputs, TheJudgeRefutesAChildThatSkipsTheEdgeSet) {
  const problems::OperatorDef* def = problems::find_native_operator("topk_filter");
  ASSERT_NE(def, nullptr);
  const problems::Shape* shape = nullptr;
  for (const auto& s : suite_->find("topk_filter")->shapes)
    if (s.id == "3") shape = &s;
  ASSERT_NE(shape, nullptr);
  auto resolved = problems::resolve_shape(*def, *shape);
  ASSERT_TRUE(resolved) << resolved.error().message;
  ChildTaskRequest task;
  task.operator_name = "topk_filter";
  task.nonce = "judge-nonce";
  task.seccomp = false;
  ChildShape item;
  item.shape_id = "3";
  item.params = shape->params;
  item.seeds = {11};
  item.performance = false;
  task.shapes = {item};
  for (bool skip : {true, false}) {
    SCOPED_TRACE(skip ? "the edge-case set skipped" : "every check made");
    JudgeProcess judge(task);
    auto usual = problems::run_reference_host(*resolved, 11);
    ASSERT_TRUE(usual) << usual.error().message;
    judge.publish(*usual);
    judge.send(Json{{"op", "check"},
                    {"shape_id", "3"},
                    {"seed", 11},
                    {"kind", "usual"},
                    {"variant", -1},
                    {"context", ""},
                    {"inputs", true}});
    Json r = judge.reply();
    ASSERT_EQ(r.value("pass", false), true) << r.dump();
    if (!skip) {
      const uint64_t edge_seed = 11 ^ child::kEdgeCaseSeedMix;
      auto edge = problems::run_reference_host(*resolved, edge_seed, true);
      ASSERT_TRUE(edge) << edge.error().message;
      judge.publish(*edge, false);
      judge.send(Json{{"op", "check"},
                      {"shape_id", "3"},
                      {"seed", edge_seed},
                      {"kind", "edge_case"},
                      {"variant", -1},
                      {"context", "edge case: "},
                      {"inputs", false}});
      r = judge.check_answer(*edge);
      ASSERT_EQ(r.value("pass", false), true) << r.dump();
    }
    judge.send(Json{{"op", "shape_end"}, {"shape_id", "3"}, {"status", "ok"}});
    const JudgeVerdict v = judge.verdict();
    ChildShapeResponse c;
    c.shape_id = "3";
    c.status = EvalStatus::kOk;
    EvalRecord rec;
    apply_child_response(rec, c);
    const std::string tampering = judge_record(rec, c, &v);
    if (skip) {
      EXPECT_EQ(v.status, EvalStatus::kRejected);
      EXPECT_TRUE(contains(v.error, "the edge-case set")) << v.error;
      EXPECT_TRUE(contains(tampering, "the edge-case set")) << tampering;
    } else {
      EXPECT_EQ(v.status, EvalStatus::kOk) << v.error;
      EXPECT_TRUE(contains(v.edge_case, "ties at the k-th value")) << v.edge_case;
      EXPECT_EQ(tampering, "");
      EXPECT_EQ(rec.edge_case, v.edge_case);
    }
  }
}

// --- rotation, splices and re-checks of timed calls (attack 7)

// A cache keyed on a sample of the inputs (the first 64 values of x) either returns a stale
// answer that a re-check catches (the splice moved a few values elsewhere: cuda, hip), or never
// hits at all (cpu: the window splice rotates the whole of x at each go, so the sample differs
// from call to call) and is timed as what it is, honest work: never the 3-4x of two alternating
// sets.
TEST_F(FreshInputs, ContentKeyedReplayCacheReturnsStaleAnswersOrNeverHits) {
  auto recs =
      evaluate("faults/rms_norm_replays_by_content.cpp", {.shapes = {"5"}, .performance = true});
  ASSERT_EQ(recs.size(), 1u);
  const auto& r = recs[0];
  if (r.status == EvalStatus::kWrongResult) {
    EXPECT_TRUE(contains(r.error, "re-check of timed call") ||
                contains(r.error, "outputs of the last timed call"))
        << r.error;
    EXPECT_FALSE(r.s_j.has_value()) << "a wrong candidate is not scored";
    return;
  }
  ASSERT_EQ(r.status, EvalStatus::kOk) << r.error;
  auto honest = evaluate("faults/rms_norm_correct.cpp", {.shapes = {"5"}, .performance = true});
  ASSERT_EQ(honest.size(), 1u);
  ASSERT_EQ(honest[0].status, EvalStatus::kOk) << honest[0].error;
  ASSERT_TRUE(r.timing && honest[0].timing);
  EXPECT_GT(r.timing->time_us_median, 0.5 * honest[0].timing->time_us_median)
      << "the sampled cache hit on timed calls";
}

TEST_F(FreshInputs, EveryTimedCallSeesContentNoCallSawBefore) {
  // The same cache keyed on all of the inputs is correct; it fails only when more calls repeat
  // content than the warm-up and the checks after timing explain (two alternating sets made
  // every timed call a repeat).
  auto full =
      evaluate("faults/rms_norm_replays_by_content.cpp",
               {.shapes = {"15", "5"}, .defines = {{"ATTACK_FULL_KEY", "1"}}, .performance = true});
  ASSERT_EQ(full.size(), 2u);
  for (const auto& r : full) {
    EXPECT_EQ(r.status, EvalStatus::kOk) << r.shape_id << ": " << r.error;
    ASSERT_TRUE(r.timing.has_value());
    EXPECT_GE(r.timing->n, 10);
  }
  // Its honest twin, timed the same way.
  auto honest =
      evaluate("faults/rms_norm_correct.cpp", {.shapes = {"15", "5"}, .performance = true});
  ASSERT_EQ(honest.size(), 2u);
  for (const auto& r : honest) EXPECT_EQ(r.status, EvalStatus::kOk) << r.error;
}

// --- guard regions (attack 8)

TEST_F(FreshInputs, WritesPastTheEndOrBeforeTheStartAreRejectedNamingTheSide) {
  const std::string file = "faults/rms_norm_guard_writes_out_of_bounds.cpp";
  for (const char* n : {"1", "7"}) {
    auto recs = evaluate(file, {.shapes = {"15", "5"}, .defines = {{"ATTACK_OVERRUN", n}}});
    ASSERT_EQ(recs.size(), 2u);
    for (const auto& r : recs) {
      EXPECT_EQ(r.status, EvalStatus::kRejected) << n << ": " << r.error;
      EXPECT_TRUE(contains(r.error, "past the end of output out")) << r.error;
      EXPECT_TRUE(contains(r.error, "element 1 past its last")) << r.error;
    }
  }
  auto before = evaluate(file, {.defines = {{"ATTACK_BEFORE", "1"}, {"ATTACK_OVERRUN", "3"}}});
  ASSERT_EQ(before.size(), 1u);
  EXPECT_EQ(before[0].status, EvalStatus::kRejected) << before[0].error;
  EXPECT_TRUE(contains(before[0].error, "before the start of output out")) << before[0].error;
  EXPECT_TRUE(contains(before[0].error, "element -3")) << before[0].error;
}

TEST_F(FreshInputs, GuardsAreCheckedAfterTimedCallsToo) {
  // In bounds through the checked calls and the warm-up (2 seeds, the range probe, 3 warm-up
  // calls), one element past the end from the first timed call on.
  auto recs = evaluate("faults/rms_norm_guard_writes_out_of_bounds.cpp",
                       {.defines = {{"ATTACK_AFTER_CALLS", "6"}}, .performance = true});
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, EvalStatus::kRejected) << recs[0].error;
  EXPECT_TRUE(contains(recs[0].error, "past the end of output out")) << recs[0].error;
  EXPECT_TRUE(contains(recs[0].error, "in timed call 0")) << recs[0].error;
  // The same candidate that never overruns within the task passes (the honest twin).
  auto honest = evaluate("faults/rms_norm_guard_writes_out_of_bounds.cpp",
                         {.defines = {{"ATTACK_AFTER_CALLS", "100000"}}, .performance = true});
  ASSERT_EQ(honest.size(), 1u);
  EXPECT_EQ(honest[0].status, EvalStatus::kOk) << honest[0].error;
}

#ifdef ATREX_TEST_HAVE_NVCC
// The CUDA twins of the attacks above (run on the H200: deploy/gpu/run-gpu-checks.sh fresh) must
// at least compile where CI has nvcc and no GPU. Four nvcc compiles, ~10 s each on CI.
TEST(FreshInputsCuda, AttackTwinsCompileWithNvcc) {
  const fs::path dir = fs::temp_directory_path() / ("atrex_fresh_cu_" + std::to_string(::getpid()));
  CompileCache cache(dir, ATREX_TEST_INCLUDE_DIR);
  for (const char* file :
       {"topk_filter_edge_keeps_exactly_k.cu", "paged_attention_decode_edge_ignores_block_table.cu",
        "reshape_and_cache_edge_ignores_slot_mapping.cu",
        "rms_norm_guard_writes_out_of_bounds.cu"}) {
    CandidateRef c;
    c.source = *read_text_file(fs::path(ATREX_TEST_DATA_DIR) / file);
    c.sha256 = sha256_hex(c.source);
    c.backend = Backend::kCuda;
    c.file_name = file;
    c.agent = "test";
    auto r = cache.compile(c, "sm_90a", 300);
    ASSERT_TRUE(r) << file << ": " << r.error().message;
    EXPECT_TRUE(r->ok) << file << ": " << r->log;
  }
  fs::remove_all(dir);
}
#endif

}  // namespace
}  // namespace atrex::runner
