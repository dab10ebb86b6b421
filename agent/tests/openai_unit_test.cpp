// The openai provider's pure parts: candidate extraction from replies, sweep-file options,
// the retry policy (Retry-After, backoff with jitter), the prompt and the feedback.
#include <cstdlib>

#include <gtest/gtest.h>

#include "atrex/agent/spec.h"
#include "openai/code_block.h"
#include "openai/options.h"
#include "openai/prompt.h"
#include "openai/retry.h"

namespace atrex::agent::openai {
namespace {
using std::chrono::milliseconds;

// --- extraction -------------------------------------------------------------------------------

TEST(OpenAiExtract, TakesTheBackendsBlockAndIgnoresOtherLanguages) {
  const std::string reply =
      "Plan:\n```python\nprint('not this')\n```\nThe kernel:\n```cuda\n__global__ void k() {}\n"
      "int main_like() { return 0; }\n```\nDone.";
  auto e = extract_candidate(reply, Backend::kCuda);
  ASSERT_TRUE(e.source);
  EXPECT_EQ(*e.source, "__global__ void k() {}\nint main_like() { return 0; }\n");
}

TEST(OpenAiExtract, LongestMatchingBlockWinsOverAShortSnippetAfterIt) {
  const std::string reply =
      "```cpp\n// full file\nint a;\nint b;\nint c;\n```\nUsage:\n```cpp\nrun();\n```\n";
  auto e = extract_candidate(reply, Backend::kCpu);
  ASSERT_TRUE(e.source);
  EXPECT_EQ(*e.source, "// full file\nint a;\nint b;\nint c;\n");
  // A tie goes to the last.
  auto tie = extract_candidate("```c++\nint x;\n```\n```cpp\nint y;\n```\n", Backend::kCpu);
  ASSERT_TRUE(tie.source);
  EXPECT_EQ(*tie.source, "int y;\n");
}

TEST(OpenAiExtract, UntaggedBlockIsTheFallbackAndLongerFencesNest) {
  auto e = extract_candidate("````\nint a;\n```\nstill inside\n````\n", Backend::kCuda);
  ASSERT_TRUE(e.source);
  EXPECT_EQ(*e.source, "int a;\n```\nstill inside\n");
  // A tagged block of the backend beats an untagged one.
  auto t = extract_candidate("```\nlong untagged block\nline\nline\n```\n```cu\nk();\n```\n",
                             Backend::kCuda);
  ASSERT_TRUE(t.source);
  EXPECT_EQ(*t.source, "k();\n");
}

TEST(OpenAiExtract, NoBlockCutBlockAndWrongLanguageAreFailuresWorthFeedingBack) {
  auto none = extract_candidate("I think you should use shared memory.", Backend::kCuda);
  EXPECT_FALSE(none.source);
  EXPECT_NE(none.failure.find("no fenced code block"), std::string::npos) << none.failure;
  EXPECT_NE(none.failure.find("```cuda"), std::string::npos);
  auto cut = extract_candidate("```cuda\n__global__ void k() {\n", Backend::kCuda);
  EXPECT_FALSE(cut.source);
  EXPECT_NE(cut.failure.find("cut off"), std::string::npos) << cut.failure;
  auto py = extract_candidate("```python\nimport triton\n```", Backend::kCuda);
  EXPECT_FALSE(py.source);
  EXPECT_NE(py.failure.find("python"), std::string::npos) << py.failure;
  // A CUDA-tagged block is not a CPU candidate.
  EXPECT_FALSE(extract_candidate("```cuda\nint a;\n```", Backend::kCpu).source);
}

// --- options ----------------------------------------------------------------------------------

Result<AgentSpec> spec_of(const std::string& yaml) {
  auto registry = ProviderRegistry::builtin();
  if (!registry) return tl::unexpected(registry.error());
  auto j = parse_yaml_to_json(yaml, "sweep.yaml");
  if (!j) return tl::unexpected(j.error());
  return agent_spec_from_json(JsonField(*j, "sweep.yaml", "agents.0"), *registry);
}

TEST(AgentSpecFleet, BudgetsAndParallelGenerationsParseStrictly) {
  auto s = spec_of(
      "{name: s, provider: search, parallel_generations: 2,"
      " budget: {iterations: 9, wall_time_s: 600, tokens: 50000, cost_usd: 1.5}}");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->parallel_generations, 2);
  EXPECT_EQ(s->iterations, 9);
  EXPECT_DOUBLE_EQ(s->wall_time_s, 600);
  EXPECT_EQ(s->tokens, 50000);
  EXPECT_DOUBLE_EQ(s->cost_usd, 1.5);
  const std::pair<const char*, const char*> bad[] = {
      {"{name: s, budget: {wall_time_s: 0}}", "budget.wall_time_s"},
      {"{name: s, budget: {cost_usd: -1}}", "budget.cost_usd"},
      {"{name: s, budget: {tokens: 1.5}}", "budget.tokens"},
      {"{name: s, budget: {tokens: 0}}", "budget.tokens"},
      {"{name: s, budget: {time: 5}}", "unknown field \"time\""},
      {"{name: s, parallel_generations: 0}", "parallel_generations"},
      {"{name: s, parallel_generations: 65}", "parallel_generations"},
  };
  for (const auto& [yaml, named] : bad) {
    auto r = spec_of(yaml);
    ASSERT_FALSE(r) << yaml;
    EXPECT_NE(r.error().message.find(named), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("sweep.yaml"), std::string::npos) << r.error().message;
  }
}

TEST(OpenAiOptions, FullEntryParsesAndRoundTrips) {
  auto s = spec_of(
      "{name: qwen, provider: openai, base_url: 'http://127.0.0.1:8000/v1/', model: qwen3,"
      " api_key_env: VLLM_KEY, temperature: 0.2, max_tokens: 4096, timeout_s: 30,"
      " max_retries: 2, price: {prompt_per_mtok: 0.5, completion_per_mtok: 2}}");
  ASSERT_TRUE(s) << s.error().message;
  auto o = options_from_json(s->options, "options");
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->base_url, "http://127.0.0.1:8000/v1") << "trailing slash dropped";
  EXPECT_EQ(o->model, "qwen3");
  EXPECT_EQ(o->api_key_env, "VLLM_KEY");
  EXPECT_DOUBLE_EQ(*o->temperature, 0.2);
  EXPECT_EQ(*o->max_tokens, 4096);
  EXPECT_DOUBLE_EQ(o->timeout_s, 30);
  EXPECT_EQ(o->max_retries, 2);
  EXPECT_DOUBLE_EQ(o->prompt_usd_per_mtok, 0.5);
  EXPECT_DOUBLE_EQ(o->completion_usd_per_mtok, 2);
  auto again = options_from_json(to_json(*o), "again");
  ASSERT_TRUE(again);
  EXPECT_EQ(to_json(*again), to_json(*o));
}

TEST(OpenAiOptions, BadEntriesNameTheFileFieldAndValue) {
  struct Case {
    std::string fields, expect;
  };
  const std::vector<Case> cases = {
      {"model: m", "base_url"},
      {"base_url: 'ftp://x/v1', model: m", "ftp://x/v1"},
      {"base_url: 'http://h/v1', model: m, temperature: hot", "\"agents.0.temperature\""},
      {"base_url: 'http://h/v1', model: m, temperature: 3", "[0, 2]"},
      {"base_url: 'http://h/v1', model: m, max_tokens: 0", "\"agents.0.max_tokens\""},
      {"base_url: 'http://h/v1', model: m, timeout_s: 0", "\"agents.0.timeout_s\""},
      {"base_url: 'http://h/v1', model: m, max_retries: -1", "\"agents.0.max_retries\""},
      {"base_url: 'http://h/v1', model: m, price: {prompt: 1}", "unknown field \"prompt\""},
      {"base_url: 'http://h/v1', model: m, price: {prompt_per_mtok: x}", "prompt_per_mtok"},
      {"base_url: 'http://h/v1', model: m, api_key: sk-123", "unknown agent field \"api_key\""},
      {"base_url: 'http://h/v1', model: m, templates: t", "unknown agent field \"templates\""},
  };
  for (const auto& c : cases) {
    auto s = spec_of("{name: a, provider: openai, " + c.fields + "}");
    ASSERT_FALSE(s) << c.fields;
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidInput);
    EXPECT_NE(s.error().message.find("sweep.yaml"), std::string::npos) << s.error().message;
    EXPECT_NE(s.error().message.find(c.expect), std::string::npos)
        << c.fields << " -> " << s.error().message;
  }
}

TEST(OpenAiOptions, AKeyPastedIntoApiKeyEnvIsRefusedWithoutEchoingIt) {
  auto s = spec_of(
      "{name: a, provider: openai, base_url: 'http://h/v1', model: m,"
      " api_key_env: 'sk-live-SECRET-1234'}");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("api_key_env"), std::string::npos) << s.error().message;
  EXPECT_EQ(s.error().message.find("SECRET"), std::string::npos) << s.error().message;
}

TEST(OpenAiOptions, MissingKeyVariableIsAClearErrorNamingOnlyTheVariable) {
  OpenAiOptions o;
  o.api_key_env = "ATREX_TEST_SURELY_UNSET_KEY_VAR";
  ::unsetenv(o.api_key_env.c_str());
  auto k = api_key_from_env(o, "qwen");
  ASSERT_FALSE(k);
  EXPECT_EQ(k.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(k.error().message.find("ATREX_TEST_SURELY_UNSET_KEY_VAR"), std::string::npos);
  EXPECT_NE(k.error().message.find("agent qwen"), std::string::npos);
  ::setenv(o.api_key_env.c_str(), "k-value", 1);
  EXPECT_EQ(*api_key_from_env(o, "qwen"), "k-value");
  ::unsetenv(o.api_key_env.c_str());
  o.api_key_env.clear();
  EXPECT_EQ(*api_key_from_env(o, "qwen"), "") << "no api_key_env: no key";
}

// --- retry policy -----------------------------------------------------------------------------

TEST(OpenAiRetry, RetryAfterInSecondsAndAsAnHttpDate) {
  const auto now = std::chrono::system_clock::from_time_t(784111777);  // Sun, 06 Nov 1994 08:49:37
  EXPECT_EQ(parse_retry_after("7", now), milliseconds(7000));
  EXPECT_EQ(parse_retry_after(" 0 ", now), milliseconds(0));
  EXPECT_EQ(parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now), milliseconds(30'000));
  EXPECT_EQ(parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now), milliseconds(0))
      << "a date in the past: retry now";
  EXPECT_FALSE(parse_retry_after("soon", now));
  EXPECT_FALSE(parse_retry_after("-3", now));
  EXPECT_FALSE(parse_retry_after("", now));
}

TEST(OpenAiRetry, BackoffDoublesUpToTheCapWithEqualJitter) {
  RetryPolicy p;
  p.base = milliseconds(1000);
  p.cap = milliseconds(8000);
  EXPECT_EQ(backoff_delay(p, 0, 0.0), milliseconds(500));
  EXPECT_EQ(backoff_delay(p, 0, 1.0), milliseconds(1000));
  EXPECT_EQ(backoff_delay(p, 1, 0.5), milliseconds(1500));
  EXPECT_EQ(backoff_delay(p, 2, 0.0), milliseconds(2000));
  EXPECT_EQ(backoff_delay(p, 10, 1.0), milliseconds(8000)) << "capped";
  EXPECT_EQ(backoff_delay(p, 1000, 0.0), milliseconds(4000)) << "no overflow";
  // Retry-After wins over the backoff, up to its own cap.
  EXPECT_EQ(retry_delay(p, 3, 0.9, milliseconds(7000)), milliseconds(7000));
  p.retry_after_cap = milliseconds(60'000);
  EXPECT_EQ(retry_delay(p, 0, 0.0, milliseconds(3'600'000)), milliseconds(60'000));
}

TEST(OpenAiRetry, WhichStatusesAreRetried) {
  for (int s : {429, 408, 500, 502, 503, 504}) EXPECT_TRUE(retryable_status(s)) << s;
  for (int s : {400, 401, 403, 404, 413, 422}) EXPECT_FALSE(retryable_status(s)) << s;
}

// --- prompt and feedback ----------------------------------------------------------------------

TEST(OpenAiPrompt, ProblemMessageHasTheFactsReferenceAbiAndNotesButNoHiddenData) {
  AgentTask task;
  task.op = "rms_norm";
  task.backend = Backend::kCpu;
  task.hardware = "H20";
  task.quick_shapes = {"15", "28"};
  task.full_shapes = {"15", "28", "40"};
  std::vector<Attempt> memory;
  std::set<std::string> tried;
  ProposalContext ctx{"rms_norm", Backend::kCpu, 0, 0, 1, &memory, &tried, &task.best, &task};
  auto kb = KnowledgeBase::embedded();
  ASSERT_TRUE(kb);
  const std::string m = problem_message(ctx, kb->select("norm", Backend::kCpu, std::nullopt, 3));
  for (const char* want :
       {"# Operator `rms_norm`", "kernels/reference/rms_norm/naive.cpp", "atrex_candidate_run",
        "atrex/candidate_util.h", "parallel_rows", "shapes 15, 28", "```cpp"}) {
    EXPECT_NE(m.find(want), std::string::npos) << want;
  }
  for (const char* hidden : {"production_performance", "semantic_W_flops", "SOL_time",
                             "roofline.json", "metadata.json"}) {
    EXPECT_EQ(m.find(hidden), std::string::npos) << hidden;
  }
  EXPECT_EQ(m.find("best kernel so far"), std::string::npos) << "generation 0 has none";
  task.best = BestCandidate{"int best_kernel;", "sha", "k.cpp", 0.25, Json::object()};
  ctx.generation = 1;
  const std::string g1 = problem_message(ctx, {});
  EXPECT_NE(g1.find("best kernel so far (quick median S_j 0.2500)"), std::string::npos);
  EXPECT_NE(g1.find("int best_kernel;"), std::string::npos);
  EXPECT_NE(system_message(Backend::kCuda).find("```cuda"), std::string::npos);
  EXPECT_NE(system_message(Backend::kCpu).find(".cpp"), std::string::npos);
}

TEST(OpenAiPrompt, FeedbackCarriesCompileErrorsWrongElementsTimesAndScores) {
  AgentTask task;
  std::vector<Attempt> memory;
  std::set<std::string> tried;
  ProposalContext ctx{"rms_norm", Backend::kCuda, 0, 1, 1, &memory, &tried, &task.best, &task};
  Attempt a;
  a.iteration = 0;
  a.summary = "shape 15: wrong_result: ...";
  EvalRecord wrong;
  wrong.shape_id = "15";
  wrong.status = EvalStatus::kWrongResult;
  wrong.error = "output out: 10 of 4096 elements differ; first at [0, 3]: got 1.5, expected 0.25";
  wrong.max_abs_error = 1.25;
  EvalRecord fine;
  fine.shape_id = "28";
  fine.status = EvalStatus::kOk;
  fine.timing = TimingSummary{};
  fine.timing->time_us_median = 42.5;
  fine.t_roofline_us = 10.0;
  fine.s_j = 0.235;
  fine.dsl_share = 0.5;
  a.records = {wrong, fine};
  const std::string f = feedback_message(a, ctx, {});
  for (const char* want :
       {"shape 15: wrong_result", "first at [0, 3]: got 1.5, expected 0.25", "max abs error 1.25",
        "shape 28: ok, time 42.50 us", "roofline time 10.00 us", "S_j 0.2350",
        "50% of the GPU time in your own kernels", "Fix the candidate first", "```cuda"}) {
    EXPECT_NE(f.find(want), std::string::npos) << want << "\n" << f;
  }
  Attempt c;
  EvalRecord ce;
  ce.shape_id = "15";
  ce.status = EvalStatus::kCompileError;
  ce.error = "k.cu(3): error: identifier \"x\" is undefined";
  c.records = {ce, ce};
  const std::string fc = feedback_message(c, ctx, {});
  EXPECT_NE(fc.find("The compiler said:"), std::string::npos);
  EXPECT_EQ(fc.find("identifier"), fc.rfind("identifier")) << "the compile error once";
  Attempt none;
  none.failure = "Your reply contained no fenced code block.";
  EXPECT_EQ(feedback_message(none, ctx, {}), none.failure);
}

TEST(OpenAiPrompt, TinyTimesMeanLatencyBound) {
  Attempt a;
  EvalRecord r;
  r.status = EvalStatus::kOk;
  r.timing = TimingSummary{};
  r.timing->time_us_median = 4;
  a.records = {r, r};
  EXPECT_EQ(measured_bottleneck(a), Bottleneck::kLatency);
  a.records[1].timing->time_us_median = 400;
  EXPECT_FALSE(measured_bottleneck(a));
}

}  // namespace
}  // namespace atrex::agent::openai

// --- target: what the model writes (docs/python-candidates.md "Agents that write Python") ----

namespace atrex::agent::openai {
namespace {

TEST(OpenAiTarget, TargetParsesStrictlyAndOnlyANonDefaultOneIsKept) {
  const char* base = "{name: q, provider: openai, base_url: 'http://127.0.0.1:8000/v1', model: m";
  auto triton = spec_of(std::string(base) + ", target: triton}");
  ASSERT_TRUE(triton) << triton.error().message;
  EXPECT_EQ(triton->options.value("target", ""), "triton");
  EXPECT_EQ(target_of(triton->options), Target::kTriton);
  auto o = options_from_json(triton->options, "options");
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->target, "triton");
  auto cuda = spec_of(std::string(base) + ", target: cuda}");
  ASSERT_TRUE(cuda) << cuda.error().message;
  EXPECT_FALSE(cuda->options.contains("target")) << "the default leaves sweep ids unchanged";
  EXPECT_EQ(target_of(cuda->options), Target::kNative);
  auto bad = spec_of(std::string(base) + ", target: gluon}");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("expected cuda, triton or torch"), std::string::npos)
      << bad.error().message;
  EXPECT_NE(bad.error().message.find("target"), std::string::npos) << bad.error().message;
}

TEST(OpenAiTarget, PythonTargetsAskForTheReleasesFormatWithTheReferencesSignature) {
  const std::string sys = system_message(Backend::kCuda, Target::kTriton);
  EXPECT_NE(sys.find("class Model(torch.nn.Module)"), std::string::npos) << sys;
  EXPECT_NE(sys.find("@triton.jit"), std::string::npos) << sys;
  EXPECT_NE(sys.find("no torch.compile"), std::string::npos) << sys;
  EXPECT_NE(sys.find("```python"), std::string::npos) << sys;
  EXPECT_NE(system_message(Backend::kCpu, Target::kTorch).find("PyTorch operations only"),
            std::string::npos);
  // rms_norm: eps sizes no tensor, so it is the init kwarg; x and weight are forward's inputs.
  const std::string sig = python_signature("rms_norm");
  EXPECT_NE(sig.find("def __init__(self, eps=1e-06):"), std::string::npos) << sig;
  EXPECT_NE(sig.find("def forward(self, x, weight):"), std::string::npos) << sig;
  EXPECT_NE(sig.find("return out"), std::string::npos) << sig;
  EXPECT_NE(python_signature("silu_and_mul").find("def __init__(self):"), std::string::npos)
      << python_signature("silu_and_mul");
  std::vector<Attempt> memory;
  std::set<std::string> tried;
  BestCandidate best;
  ProposalContext ctx{"rms_norm", Backend::kCuda, 0, 0, 1, &memory, &tried, &best, nullptr};
  const std::string problem = problem_message(ctx, {}, Target::kTriton);
  EXPECT_NE(problem.find("def forward(self, x, weight):"), std::string::npos) << problem;
  // The native reference stays as the semantics; the C ABI headers are not sent.
  EXPECT_EQ(problem.find("## The candidate ABI"), std::string::npos)
      << "the C ABI is not part of a Python target's problem";
  EXPECT_NE(problem.find("```python block"), std::string::npos);
  // The reply's python block is the candidate; a cuda block is not.
  auto e = extract_candidate("```cuda\nk();\n```\n```python\nimport triton\n```\n", Backend::kCuda,
                             true);
  ASSERT_TRUE(e.source);
  EXPECT_EQ(*e.source, "import triton\n");
  EXPECT_EQ(candidate_extension(Target::kTriton, Backend::kCuda), ".py");
  EXPECT_EQ(candidate_extension(Target::kNative, Backend::kCuda), ".cu");
}

}  // namespace
}  // namespace atrex::agent::openai
