#include <map>

#include <gtest/gtest.h>

#include "atrex/common/json_io.h"
#include "atrex/scheduler/local_sweep.h"
#include "atrex/scheduler/sweep_spec.h"
#include "atrex/scheduler/resolve.h"
#include "atrex/scoring/report.h"

namespace atrex::scheduler {
namespace {

const agent::ProviderRegistry& providers() {
  static const agent::ProviderRegistry r = *agent::ProviderRegistry::builtin();
  return r;
}

TEST(SweepSpec, EmbeddedDefaultParses) {
  auto s = parse_sweep(embedded_default_sweep(), "<embedded default>", providers());
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->name, "local-default");
  ASSERT_EQ(s->agents.size(), 1u);
  EXPECT_EQ(s->agents[0].provider, "search");
  EXPECT_TRUE(s->operators.empty()) << "`operators: all`: every operator of the suite";
  EXPECT_FALSE(s->shapes.at(Backend::kCpu).all);
  EXPECT_TRUE(s->shapes.at(Backend::kCpu).reduced) << "the CPU covers all 30 operators";
  EXPECT_TRUE(s->shapes.at(Backend::kCuda).all);
  EXPECT_EQ(s->evaluation.seeds, 5);
  EXPECT_EQ(s->quick_evaluation.seeds, 2);
}

TEST(SweepSpec, ReducedIsABooleanOfTheShapeRule) {
  auto s = parse_sweep("name: x\nshapes: {cpu: {max_input_elements: 10, reduced: true}}\n",
                       "s.yaml", providers());
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_TRUE(s->shapes.at(Backend::kCpu).reduced);
  auto bad = parse_sweep("name: x\nshapes: {cpu: {reduced: 3}}\n", "s.yaml", providers());
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(bad.error().message.find("shapes.cpu.reduced"), std::string::npos)
      << bad.error().message;
}

TEST(SweepSpec, UnknownTopLevelFieldIsNamed) {
  auto s = parse_sweep("name: x\nagents: [{name: a}]\noperatorz: all\n", "bad.yaml", providers());
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(s.error().message.find("bad.yaml: field \"operatorz\""), std::string::npos)
      << s.error().message;
}

TEST(SweepSpec, BadAgentBudgetNamesPathAndValue) {
  auto s = parse_sweep("name: x\nagents:\n  - name: a\n    budget: {iterations: -2}\n", "s.yaml",
                       providers());
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("agents[0].budget.iterations"), std::string::npos)
      << s.error().message;
  EXPECT_NE(s.error().message.find("got -2"), std::string::npos);
}

TEST(SweepSpec, ClusterMetricsIsAListenAddressAndItsTargetsFolderIsRelativeToTheFile) {
  auto s = parse_sweep("name: x\ncluster: {metrics: \"0.0.0.0:0\", metrics_targets: prom}\n",
                       "/site/s.yaml", providers());
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->cluster["metrics"], "0.0.0.0:0");
  EXPECT_EQ(s->cluster["metrics_targets"], "/site/prom");
  auto bad = parse_sweep("name: x\ncluster: {metrics: \"node1:9100\"}\n", "s.yaml", providers());
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(bad.error().message.find("cluster.metrics"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("node1:9100"), std::string::npos) << bad.error().message;
}

// Running candidates unsandboxed is the submitting user's explicit flag, never a sweep file's.
TEST(SweepSpec, ASweepFileCannotTurnTheSandboxOff) {
  auto s = parse_sweep("name: x\ncluster: {sandbox: none}\n", "s.yaml", providers());
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(s.error().message.find("sandbox"), std::string::npos) << s.error().message;
}

TEST(SweepSpec, UnsupportedProviderIsRejected) {
  auto s = parse_sweep("name: x\nagents: [{name: a, provider: gpt}]\n", "s.yaml", providers());
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("agents[0].provider"), std::string::npos) << s.error().message;
}

TEST(SweepSpec, DuplicateAgentNameIsRejected) {
  auto s = parse_sweep("name: x\nagents: [{name: a}, {name: a}]\n", "s.yaml", providers());
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("duplicate agent name"), std::string::npos);
}

// A sweep file never widens silently: an empty list is not `all`, and a repeated entry is a
// mistake named with its field.
TEST(SweepSpec, EmptyOrDuplicateOperatorsAndShapeIdsAreRefused) {
  auto empty_ops = parse_sweep("name: x\noperators: []\n", "s.yaml", providers());
  ASSERT_FALSE(empty_ops);
  EXPECT_NE(empty_ops.error().message.find("operators"), std::string::npos)
      << empty_ops.error().message;
  auto dup_ops = parse_sweep("name: x\noperators: [rms_norm, l2_norm, rms_norm]\n", "s.yaml",
                             providers());
  ASSERT_FALSE(dup_ops);
  EXPECT_NE(dup_ops.error().message.find("duplicate operator rms_norm"), std::string::npos)
      << dup_ops.error().message;
  auto empty_ids = parse_sweep("name: x\nshapes: {cpu: {ids: {rms_norm: []}}}\n", "s.yaml",
                               providers());
  ASSERT_FALSE(empty_ids);
  EXPECT_NE(empty_ids.error().message.find("shapes.cpu.ids.rms_norm"), std::string::npos)
      << empty_ids.error().message;
  auto dup_ids = parse_sweep("name: x\nshapes: {cpu: {ids: {rms_norm: [3, 5, 3]}}}\n", "s.yaml",
                             providers());
  ASSERT_FALSE(dup_ids);
  EXPECT_NE(dup_ids.error().message.find("duplicate shape id 3"), std::string::npos)
      << dup_ids.error().message;
}

TEST(SweepSpec, FixedProviderNeedsItsKernelsAndKernelsFromAddsTheAgentBest) {
  auto none = parse_sweep("name: x\nagents: [{name: r, provider: fixed}]\n", "s.yaml",
                          providers());
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("kernels"), std::string::npos) << none.error().message;
  auto ref = parse_sweep("name: x\nagents: [{name: r, provider: fixed, kernels: reference}]\n",
                         "s.yaml", providers());
  ASSERT_TRUE(ref) << ref.error().message;
  EXPECT_EQ(ref->agents[0].options["kernels"], "reference");
  const auto dir = std::filesystem::temp_directory_path() / "atrex_kernels_from_unit";
  std::filesystem::create_directories(dir / "rms_norm");
  ASSERT_TRUE(add_kernels_from_agent(*ref, dir, providers()));
  ASSERT_EQ(ref->agents.size(), 2u);
  EXPECT_EQ(ref->agents[1].name, "best");
  EXPECT_EQ(ref->agents[1].provider, "fixed");
  EXPECT_EQ(ref->raw["agents"].size(), 2u) << "the manifest and the sweep id name it";
  EXPECT_FALSE(add_kernels_from_agent(*ref, dir, providers())) << "best twice";
  auto no_agents = parse_sweep("name: x\n", "s.yaml", providers());
  ASSERT_TRUE(no_agents);
  EXPECT_FALSE(add_kernels_from_agent(*no_agents, dir, providers()));
  std::filesystem::remove_all(dir);
}

TEST(SweepSpec, YamlSyntaxErrorHasLine) {
  auto s = parse_sweep("name: x\nagents: [\n", "s.yaml", providers());
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("s.yaml: not valid YAML"), std::string::npos);
}

TEST(SweepSpec, MissingFileIsNotFound) {
  auto s = load_sweep_file("/nonexistent/sweep.yaml", providers());
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kNotFound);
}

TEST(SweepSpec, QuickEvaluationInheritsEvaluation) {
  auto s = parse_sweep(
      "name: x\nagents: [{name: a}]\nevaluation: {atol: 0.5, seeds: 3}\nquick_evaluation: {seeds: "
      "1}\n",
      "s", providers());
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_DOUBLE_EQ(s->quick_evaluation.atol, 0.5);
  EXPECT_EQ(s->quick_evaluation.seeds, 1);
}

SweepOverrides cpu_h20() {
  SweepOverrides o;
  o.backend = BackendChoice{Backend::kCpu};
  o.hardware = "H20";
  o.suite_dir = ATREX_TEST_SUITE_DIR;
  return o;
}

// The default covers all 30 operators on the CPU: up to 3 shapes under the cap each, and the six
// operators none of whose released shapes fit it on their reduced shape.
TEST(Resolve, DefaultCpuSubsetRespectsCapsAndTakesReducedShapesWhenNoneFit) {
  auto s = parse_sweep(embedded_default_sweep(), "<embedded default>", providers());
  auto r = resolve_sweep(*s, cpu_h20());
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->manifest.operators.size(), 30u);
  for (const auto& op : r->manifest.operators) {
    EXPECT_GE(op.shapes.size(), 1u) << op.name;
    EXPECT_LE(op.shapes.size(), 3u) << op.name;
    EXPECT_LE(op.quick_shapes.size(), op.shapes.size());
  }
  int reduced = 0;
  for (const auto& op : r->manifest.operators) {
    if (op.shapes == std::vector<std::string>{"reduced-0"}) ++reduced;
  }
  EXPECT_EQ(reduced, 6) << "block_scaled_mm, fused_moe, fp8_blockscale_fused_moe, moe_sum_reduce, "
                           "gated_rms_norm, chunk_gated_delta_rule_state";
  const auto& moe = *std::find_if(r->manifest.operators.begin(), r->manifest.operators.end(),
                                  [](auto& o) { return o.name == "moe_sum_reduce"; });
  EXPECT_EQ(moe.shapes, std::vector<std::string>{"reduced-0"});  // released: 4195+ tokens x 8 x 2048
  // attention_forward by explicit ids (its shapes under the cap reach 2.4 GFLOP per call);
  // unified_attention by the cap: its three shapes under 3M input elements, in suite order.
  const auto shapes_of = [&](const char* name) {
    return std::find_if(r->manifest.operators.begin(), r->manifest.operators.end(),
                        [&](auto& o) { return o.name == name; })
        ->shapes;
  };
  EXPECT_EQ(shapes_of("attention_forward"), (std::vector<std::string>{"11", "12", "20"}));
  EXPECT_EQ(shapes_of("unified_attention"), (std::vector<std::string>{"3", "14", "15"}));
  EXPECT_TRUE(r->manifest.not_covered.empty());
  EXPECT_EQ(r->sweep_id().size(), 12u);
}

TEST(Resolve, AllShapesOnCudaRule) {
  auto s = parse_sweep(embedded_default_sweep(), "<embedded default>", providers());
  SweepOverrides o = cpu_h20();
  auto spec = *s;
  spec.shapes[Backend::kCpu] = problems::ShapeRule{};  // all
  auto r = resolve_sweep(spec, o);
  ASSERT_TRUE(r);
  const auto& rms = *std::find_if(r->manifest.operators.begin(), r->manifest.operators.end(),
                                  [](auto& op) { return op.name == "rms_norm"; });
  EXPECT_EQ(rms.shapes.size(), 56u);
  EXPECT_EQ(rms.quick_shapes.size(), 3u);
  size_t shapes = 0;
  for (const auto& op : r->manifest.operators) shapes += op.shapes.size();
  EXPECT_EQ(shapes, 440u) << "every released shape, no reduced one";
}

TEST(Resolve, UnknownOperatorNamesTheField) {
  auto s = parse_sweep("name: x\nagents: [{name: a}]\noperators: [rms_norm, rmsnorm]\n", "my.yaml",
                       providers());
  ASSERT_TRUE(s);
  auto r = resolve_sweep(*s, cpu_h20());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
  EXPECT_NE(r.error().message.find("my.yaml: field \"operators[1]\": unknown operator \"rmsnorm\""),
            std::string::npos)
      << r.error().message;
}

TEST(Resolve, OperatorOutsideTheSuiteIsNamedWithItsField) {
  auto s = parse_sweep("name: x\nagents: [{name: a}]\noperators: [l2_norm, fused_moee]\n",
                       "my.yaml", providers());
  auto r = resolve_sweep(*s, cpu_h20());
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("fused_moee"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("operators[1]"), std::string::npos) << r.error().message;
}

TEST(Resolve, ExplicitIdsAndBadId) {
  auto s = parse_sweep(
      "name: x\nagents: [{name: a}]\noperators: [l2_norm]\nshapes: {cpu: {ids: {l2_norm: [0, "
      "3]}}}\n",
      "my.yaml", providers());
  auto r = resolve_sweep(*s, cpu_h20());
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->manifest.operators[0].shapes, (std::vector<std::string>{"0", "3"}));
  auto bad = parse_sweep(
      "name: x\nagents: [{name: a}]\noperators: [l2_norm]\nshapes: {cpu: {ids: {l2_norm: [77]}}}\n",
      "my.yaml", providers());
  auto rb = resolve_sweep(*bad, cpu_h20());
  ASSERT_FALSE(rb);
  EXPECT_NE(rb.error().message.find("no shape \"77\""), std::string::npos);
}

TEST(Resolve, SweepIdChangesWithSettings) {
  auto a = parse_sweep("name: x\nagents: [{name: a}]\noperators: [l2_norm]\n", "s", providers());
  auto b =
      parse_sweep("name: x\nagents: [{name: a}]\noperators: [l2_norm]\nevaluation: {seeds: 3}\n",
                  "s", providers());
  auto ra = resolve_sweep(*a, cpu_h20());
  auto rb = resolve_sweep(*b, cpu_h20());
  ASSERT_TRUE(ra && rb);
  EXPECT_NE(ra->sweep_id(), rb->sweep_id());
  EXPECT_EQ(ra->sweep_id(), resolve_sweep(*a, cpu_h20())->sweep_id());
}

// report.md's dead-letter table: a worker's last error is free text (a shell pipeline, a
// multi-line stack); a `|` or a line break in it must not split or end the row.
TEST(DeadLetters, ErrorWithPipeAndNewlineStaysInItsTableCell) {
  DeadLetter d;
  d.message_id = "1-0";
  d.delivery_count = 3;
  d.last_error = "worker died: sh -c 'a | b' failed\nterminate called <here>";
  d.body = Json{{"kind", "eval"},
                {"operator", "rms_norm"},
                {"task_id", "t1"},
                {"candidate", {{"agent", "search"}, {"file_name", "x|y.cpp"}, {"sha256", "ab"}}}};
  const std::string md = scoring::render_markdown(
      scoring::Report{{}, {}, {scoring::summarize_dead_letter("eval", d)}});
  const std::string row = md.substr(md.rfind("\n| eval |") + 1);
  EXPECT_EQ(row,
            "| eval | rms_norm | search | x\\|y.cpp | 3 | worker died: sh -c 'a \\| b' "
            "failed<br>terminate called "
            "&lt;here&gt; |\n")
      << md;
}

}  // namespace
}  // namespace atrex::scheduler

namespace atrex::scheduler {
namespace {

SweepEnv env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(SweepVariables, ValueThenDefaultAndOnlyTheSweepPrefix) {
  auto e = expand_sweep_variables("a: ${ATREX_SWEEP_A}\nb: ${ATREX_SWEEP_B:-x:y}\nc: $HOME\n",
                                  "f.yaml", env_of({{"ATREX_SWEEP_A", "1"}}));
  ASSERT_TRUE(e) << e.error().message;
  EXPECT_EQ(*e, "a: 1\nb: x:y\nc: $HOME\n");
  auto empty = expand_sweep_variables("b: ${ATREX_SWEEP_B:-d}\n", "f.yaml",
                                      env_of({{"ATREX_SWEEP_B", ""}}));
  EXPECT_EQ(*empty, "b: d\n") << "an empty variable takes the default";
  // Another variable of the environment (an API key) is never pulled into a manifest.
  auto other = expand_sweep_variables("x: 1\nkey: ${OPENAI_API_KEY}\n", "f.yaml",
                                      env_of({{"OPENAI_API_KEY", "sk-secret"}}));
  ASSERT_FALSE(other);
  EXPECT_NE(other.error().message.find("f.yaml:2"), std::string::npos) << other.error().message;
  EXPECT_EQ(other.error().message.find("sk-secret"), std::string::npos);
  auto unset = expand_sweep_variables("x: ${ATREX_SWEEP_NOPE}\n", "f.yaml", env_of({}));
  ASSERT_FALSE(unset);
  EXPECT_NE(unset.error().message.find("ATREX_SWEEP_NOPE is not set"), std::string::npos);
  EXPECT_FALSE(expand_sweep_variables("x: ${ATREX_SWEEP_A\ny: }\n", "f.yaml", env_of({})));
}

TEST(SixAgentsSweep, FileParsesWithItsDefaultsAndWithTheSmokeTestOverrides) {
  const std::string path = std::string(ATREX_TEST_SWEEPS_DIR) + "/six-agents.yaml";
  auto text = read_text_file(path);
  ASSERT_TRUE(text) << text.error().message;
  auto defaults = expand_sweep_variables(*text, path, env_of({}));
  ASSERT_TRUE(defaults) << defaults.error().message;
  auto s = parse_sweep(*defaults, path, providers());
  ASSERT_TRUE(s) << s.error().message;
  ASSERT_EQ(s->agents.size(), 6u);
  std::map<std::string, int> providers_used;
  for (const auto& a : s->agents) ++providers_used[a.provider];
  EXPECT_EQ(providers_used["cli"], 3);
  EXPECT_EQ(providers_used["openai"], 2);
  EXPECT_EQ(providers_used["search"], 1);
  EXPECT_TRUE(s->operators.empty()) << "all operators";
  EXPECT_EQ(s->cluster.value("launcher", ""), "slurm");
  EXPECT_EQ(s->agents[0].options["preset"], "claude");
  EXPECT_EQ(s->agents[0].options["network"], true);
  auto smoke = expand_sweep_variables(*text, path,
                                      env_of({{"ATREX_SWEEP_BACKEND", "cpu"},
                                              {"ATREX_SWEEP_OPERATORS", "[rms_norm]"},
                                              {"ATREX_SWEEP_ITERATIONS", "1"},
                                              {"ATREX_SWEEP_CLI_NETWORK", "false"},
                                              {"ATREX_SWEEP_MODEL_SERVER", "http://127.0.0.1:9/v1"}}));
  ASSERT_TRUE(smoke);
  auto t = parse_sweep(*smoke, path, providers());
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->operators, std::vector<std::string>{"rms_norm"});
  EXPECT_EQ(t->agents[0].iterations, 1);
  EXPECT_EQ(t->agents[0].options["network"], false);
  EXPECT_EQ(t->agents[3].options["base_url"], "http://127.0.0.1:9/v1");
  EXPECT_EQ(t->agents[4].options["base_url"], "http://127.0.0.1:9/v1") << "the same server";
}

}  // namespace
}  // namespace atrex::scheduler
