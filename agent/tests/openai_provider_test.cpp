// The openai provider in the AKA loop against a loopback chat-completions server
// (testing/fake_llm_server.h) with scripted replies: a correct kernel, a wrong one then a fix
// after feedback, no code block, 429 with Retry-After, 500s, malformed JSON, a reply that never
// ends, a refused key. The evaluator is scripted (the source says how it scores), the retries'
// sleep is injected (no test sleeps for a backoff), the HTTP is real.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include <gtest/gtest.h>

#include "atrex/agent/loop.h"
#include "atrex/agent/openai_provider.h"
#include "atrex/testing/fake_llm_server.h"

namespace atrex::agent {
namespace {
namespace fs = std::filesystem;
using std::chrono::milliseconds;
using testing::FakeLlmServer;
using testing::ScriptedReply;

constexpr const char* kKeyVar = "ATREX_TEST_OPENAI_KEY";
constexpr const char* kKey = "sk-test-7f3a9c-never-written-anywhere";

// A reply holding a kernel that the scripted evaluator scores `s` (negative: wrong result).
ScriptedReply kernel_reply(double s, int64_t prompt_tokens = 1000,
                           int64_t completion_tokens = 200) {
  return ScriptedReply::completion(
      fmt::format("Here it is.\n```cuda\n// kernel S={}\n__global__ void k() {{}}\n```\n", s),
      prompt_tokens, completion_tokens);
}

// Scores a source by its "S=<x>" marker: x >= 0 is correct with S_j x, else a wrong result.
std::vector<EvalRecord> score_source(const EvalTask& t) {
  std::smatch m;
  const bool marked = std::regex_search(t.candidate.source, m, std::regex("S=(-?[0-9.]+)"));
  const double s = marked ? std::stod(m[1]) : -1;
  std::vector<EvalRecord> out;
  for (const auto& shape : t.shape_ids) {
    EvalRecord r;
    r.task_id = t.task_id;
    r.shape_id = shape;
    r.candidate = t.candidate;
    if (s >= 0) {
      r.status = EvalStatus::kOk;
      r.s_j = s;
      r.timing = TimingSummary{};
      r.timing->time_us_median = 100;
      r.t_roofline_us = 100 * s;
    } else {
      r.status = EvalStatus::kWrongResult;
      r.error = "output out: 7 of 4096 elements differ; first at [0, 5]: got 3.5, expected 0.5";
    }
    out.push_back(r);
  }
  return out;
}

class OpenAiLoop : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.ok());
    ::setenv(kKeyVar, kKey, 1);
    dir_ = fs::temp_directory_path() /
           ("atrex_openai_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    openai::RetryDeps deps;
    deps.sleep = [this](milliseconds d) { sleeps_.push_back(d); };
    deps.uniform01 = [] { return 0.5; };
    deps.wall_now = [] { return std::chrono::system_clock::from_time_t(784111777); };
    factory_ = *make_openai_provider_factory(deps);
    task_.sweep_id = "sw";
    task_.agent.name = "qwen";
    task_.agent.provider = "openai";
    task_.agent.iterations = 1;
    task_.agent.patience = 5;
    task_.agent.max_generations = 1;
    task_.agent.options = Json{{"base_url", server_.base_url()},
                               {"model", "fake-model"},
                               {"api_key_env", kKeyVar},
                               {"timeout_s", 5.0},
                               {"max_retries", 3},
                               {"price", {{"prompt_per_mtok", 0.5}, {"completion_per_mtok", 2.0}}}};
    task_.op = "rms_norm";
    task_.backend = Backend::kCuda;
    task_.hardware = "H200";
    task_.quick_shapes = {"15", "28"};
    task_.full_shapes = {"15", "28", "40"};
  }
  void TearDown() override { fs::remove_all(dir_); }

  Result<GenerationResult> run(const AgentTask& task) {
    if (!trail_) trail_ = *AuditTrail::open(dir_ / "audit.jsonl");
    ATREX_ASSIGN_OR_RETURN(auto provider, factory_->make(task.agent));
    return run_generation(task, *provider, score_source, *trail_);
  }
  std::string audit_text() const {
    std::ifstream in(dir_ / "audit.jsonl");
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }
  std::vector<Json> audit_events(const std::string& kind) const {
    std::vector<Json> out;
    std::ifstream in(dir_ / "audit.jsonl");
    for (std::string line; std::getline(in, line);) {
      Json e = Json::parse(line);
      if (e["event"] == kind) out.push_back(e);
    }
    return out;
  }
  static std::string last_user(const Json& request) {
    return request["messages"].back()["content"].get<std::string>();
  }

  FakeLlmServer server_;
  std::shared_ptr<ProviderFactory> factory_;
  std::vector<milliseconds> sleeps_;
  AgentTask task_;
  fs::path dir_;
  std::unique_ptr<AuditTrail> trail_;
};

// target: triton (docs/python-candidates.md "Agents that write Python"): the model is asked for
// Atrex-Bench's format with the reference's Python signature, its ```python block is the
// candidate, and the candidate is a .py file (a Python candidate for the evaluator).
TEST_F(OpenAiLoop, TritonTargetAsksForAPythonModuleAndItsBlockIsTheCandidate) {
  task_.agent.options["target"] = "triton";
  server_.script({ScriptedReply::completion(
      "```cuda\n// not this S=0.9\n```\n```python\n# S=0.7\nimport triton\nclass Model: pass\n```\n",
      1000, 200)});
  auto r = run(task_);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_DOUBLE_EQ(r->next.best.score, 0.7);
  EXPECT_TRUE(r->next.best.file_name.ends_with(".py")) << r->next.best.file_name;
  EXPECT_TRUE(r->next.best.file_name.starts_with("rms_norm_g0_i")) << r->next.best.file_name;
  EXPECT_NE(r->next.best.source.find("import triton"), std::string::npos);
  const Json req = server_.chat_requests()[0];
  const std::string sys = req["messages"][0]["content"].get<std::string>();
  EXPECT_NE(sys.find("class Model(torch.nn.Module)"), std::string::npos) << sys;
  EXPECT_NE(sys.find("@triton.jit"), std::string::npos) << sys;
  EXPECT_NE(last_user(req).find("def forward(self, x, weight):"), std::string::npos);
  EXPECT_EQ(last_user(req).find("## The candidate ABI"), std::string::npos);
}

TEST_F(OpenAiLoop, CorrectKernelIsEvaluatedWithTokensAndCostAccounted) {
  server_.script({kernel_reply(0.5, 1000, 200)});
  auto r = run(task_);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_DOUBLE_EQ(r->next.best.score, 0.5);
  EXPECT_NE(r->next.best.source.find("__global__ void k()"), std::string::npos);
  EXPECT_EQ(r->next.best.provenance["model"], "fake-model");
  EXPECT_EQ(r->next.usage.prompt_tokens, 1000);
  EXPECT_EQ(r->next.usage.completion_tokens, 200);
  EXPECT_EQ(r->next.usage.requests, 1);
  EXPECT_NEAR(r->next.usage.cost_usd, (1000 * 0.5 + 200 * 2.0) / 1e6, 1e-12);
  // The request: the key only in the Authorization header, the model, system + problem.
  auto seen = server_.requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].header("Authorization"), std::string("Bearer ") + kKey);
  const Json req = server_.chat_requests()[0];
  EXPECT_EQ(req["model"], "fake-model");
  ASSERT_EQ(req["messages"].size(), 2u);
  EXPECT_EQ(req["messages"][0]["role"], "system");
  EXPECT_NE(last_user(req).find("# Operator `rms_norm`"), std::string::npos);
  EXPECT_NE(last_user(req).find("atrex_candidate_run"), std::string::npos);
  // The audit trail has the iteration's and the generation's usage, never the key.
  auto evaluated = audit_events("evaluated");
  ASSERT_EQ(evaluated.size(), 1u);
  EXPECT_EQ(evaluated[0]["usage"]["prompt_tokens"], 1000);
  EXPECT_EQ(audit_events("generation_end")[0]["usage"]["completion_tokens"], 200);
  EXPECT_EQ(audit_text().find(kKey), std::string::npos);
}

TEST_F(OpenAiLoop, WrongKernelThenAFixAfterTheFeedback) {
  task_.agent.iterations = 2;
  server_.script({kernel_reply(-1, 1000, 100), kernel_reply(0.3, 1500, 120)});
  auto r = run(task_);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_DOUBLE_EQ(r->next.best.score, 0.3);
  auto reqs = server_.chat_requests();
  ASSERT_EQ(reqs.size(), 2u);
  // The second request is the conversation so far: the wrong reply kept, then its feedback.
  const Json& msgs = reqs[1]["messages"];
  ASSERT_EQ(msgs.size(), 4u);
  EXPECT_EQ(msgs[2]["role"], "assistant");
  EXPECT_NE(msgs[2]["content"].get<std::string>().find("S=-1"), std::string::npos);
  const std::string feedback = last_user(reqs[1]);
  EXPECT_NE(feedback.find("shape 15: wrong_result"), std::string::npos) << feedback;
  EXPECT_NE(feedback.find("first at [0, 5]: got 3.5, expected 0.5"), std::string::npos);
  EXPECT_NE(feedback.find("Fix the candidate first"), std::string::npos);
  EXPECT_EQ(r->next.usage.prompt_tokens, 2500);
  EXPECT_EQ(r->next.usage.completion_tokens, 220);
  EXPECT_NEAR(r->next.usage.cost_usd, (2500 * 0.5 + 220 * 2.0) / 1e6, 1e-12);
}

TEST_F(OpenAiLoop, ReplyWithoutCodeBlockIsFedBackAndTheLoopGoesOn) {
  task_.agent.iterations = 2;
  server_.script(
      {ScriptedReply::completion("I would vectorise the loads.", 800, 10), kernel_reply(0.4)});
  auto r = run(task_);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->next.iterations_used, 2) << "the reply without a candidate counts";
  EXPECT_DOUBLE_EQ(r->next.best.score, 0.4);
  auto failed = audit_events("proposal_failed");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_NE(failed[0]["failure"].get<std::string>().find("no fenced code block"),
            std::string::npos);
  EXPECT_EQ(failed[0]["usage"]["prompt_tokens"], 800);
  auto reqs = server_.chat_requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_NE(last_user(reqs[1]).find("no fenced code block"), std::string::npos);
  EXPECT_EQ(reqs[1]["messages"][2]["content"], "I would vectorise the loads.");
  // A resumed (agent, operator) counts the iteration without a candidate and its usage.
  auto reopened = AuditTrail::open(dir_ / "audit.jsonl");
  ASSERT_TRUE(reopened) << reopened.error().message;
  EXPECT_EQ((*reopened)->progress().iterations_used, 2);
  EXPECT_EQ((*reopened)->progress().usage.prompt_tokens, 800 + 1000);
  EXPECT_EQ((*reopened)->progress().usage.requests, 2);
}

TEST_F(OpenAiLoop, RateLimitIsRetriedAfterTheRetryAfterSeconds) {
  server_.script({ScriptedReply::status(429, {{"Retry-After", "7"}}), kernel_reply(0.5)});
  auto r = run(task_);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_DOUBLE_EQ(r->next.best.score, 0.5);
  ASSERT_EQ(sleeps_.size(), 1u);
  EXPECT_EQ(sleeps_[0], milliseconds(7000));
  EXPECT_EQ(r->next.usage.requests, 2);
  EXPECT_EQ(r->next.usage.prompt_tokens, 1000) << "only the answered request has usage";
}

TEST_F(OpenAiLoop, RetryAfterAsAnHttpDateIsHonoured) {
  // The injected wall clock is Sun, 06 Nov 1994 08:49:37 GMT.
  server_.script({ScriptedReply::status(503, {{"Retry-After", "Sun, 06 Nov 1994 08:50:07 GMT"}}),
                  kernel_reply(0.5)});
  auto r = run(task_);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(sleeps_.size(), 1u);
  EXPECT_EQ(sleeps_[0], milliseconds(30'000));
}

TEST_F(OpenAiLoop, ServerErrorsThenSuccessBackOffExponentially) {
  server_.script({ScriptedReply::status(500), ScriptedReply::status(502), kernel_reply(0.5)});
  auto r = run(task_);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_DOUBLE_EQ(r->next.best.score, 0.5);
  // Equal jitter at uniform 0.5: 3/4 of 1 s, then of 2 s.
  EXPECT_EQ(sleeps_, (std::vector<milliseconds>{milliseconds(750), milliseconds(1500)}));
  EXPECT_EQ(server_.requests().size(), 3u);
}

TEST_F(OpenAiLoop, ServerErrorForeverIsBoundedAndEachIterationFailsWithoutACrash) {
  task_.agent.iterations = 2;
  task_.agent.options["max_retries"] = 2;  // fallback: 500 for every request
  auto r = run(task_);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->end, GenerationEnd::kBudget);
  EXPECT_FALSE(r->next.best.valid());
  EXPECT_EQ(server_.requests().size(), 6u) << "1 + 2 retries per iteration, no more";
  EXPECT_EQ(r->next.usage.requests, 6);
  auto failed = audit_events("proposal_failed");
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_NE(failed[0]["failure"].get<std::string>().find("HTTP 500"), std::string::npos);
  EXPECT_NE(failed[0]["failure"].get<std::string>().find("after 3 attempts"), std::string::npos);
  // A server failure is not the model's: the same conversation goes out again.
  auto reqs = server_.chat_requests();
  EXPECT_EQ(reqs.back()["messages"].size(), 2u);
  auto final_eval = run_final_evaluation(r->next, score_source, *trail_);
  ASSERT_FALSE(final_eval);
  EXPECT_EQ(final_eval.error().code, ErrorCode::kNotFound);
}

TEST_F(OpenAiLoop, MalformedJsonAndEmptyChoicesAreRetried) {
  server_.script({ScriptedReply::body("{\"choices\": [ not json"),
                  ScriptedReply::body(
                      R"({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 0}})"),
                  kernel_reply(0.5)});
  auto r = run(task_);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_DOUBLE_EQ(r->next.best.score, 0.5);
  EXPECT_EQ(sleeps_.size(), 2u);
  EXPECT_EQ(r->next.usage.prompt_tokens, 1005) << "usage of the empty reply still counts";
}

// A reply nested 300000 levels deep (1.2 MB) is malformed, retried, and never reaches a
// recursive copy, comparison or dump (which overflowed the stack of the process holding it:
// attack round 9, docs/evaluation.md "Threat model").
TEST_F(OpenAiLoop, AReplyNestedDeeplyEnoughToOverflowTheStackIsMalformedAndRetried) {
  const size_t depth = 300000;
  server_.script({ScriptedReply::body("{\"choices\": " + std::string(depth, '[') +
                                      std::string(depth, ']') + "}"),
                  kernel_reply(0.5)});
  auto r = run(task_);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_DOUBLE_EQ(r->next.best.score, 0.5);
  EXPECT_EQ(sleeps_.size(), 1u) << "the deep reply was not retried once";
}

TEST_F(OpenAiLoop, AReplyThatNeverEndsTimesOutAndIsRetried) {
  task_.agent.options["timeout_s"] = 0.3;
  server_.script({ScriptedReply::hang(), kernel_reply(0.5)});
  const auto start = std::chrono::steady_clock::now();
  auto r = run(task_);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_DOUBLE_EQ(r->next.best.score, 0.5);
  EXPECT_EQ(sleeps_.size(), 1u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // Hanging forever: a failed iteration saying it timed out.
  sleeps_.clear();
  server_.set_fallback(ScriptedReply::hang());
  task_.agent.options["max_retries"] = 0;
  // A fresh audit trail: the first run spent this (agent, operator)'s one iteration, and the
  // trail is where budgets are accounted.
  trail_.reset();
  fs::remove_all(dir_);
  auto hung = run(task_);
  ASSERT_TRUE(hung) << hung.error().message;
  auto failed = audit_events("proposal_failed");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_NE(failed[0]["failure"].get<std::string>().find("timed out"), std::string::npos)
      << failed[0].dump();
}

TEST_F(OpenAiLoop, RefusedKeyEndsTheOperatorWithAClearErrorAndNoRetry) {
  server_.script({ScriptedReply::status(
      401, {}, R"({"error": {"message": "bad key sk-test-7f3a9c-never-written-anywhere"}})")});
  auto r = run(task_);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(r.error().message.find("HTTP 401"), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().message.find(kKey), std::string::npos) << "an echoed key is redacted";
  EXPECT_EQ(server_.requests().size(), 1u);
  EXPECT_TRUE(sleeps_.empty());
}

TEST_F(OpenAiLoop, MissingKeyVariableIsAClearErrorBeforeAnyRequest) {
  ::unsetenv(kKeyVar);
  auto made = factory_->make(task_.agent);
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(made.error().message.find(kKeyVar), std::string::npos);
  EXPECT_TRUE(server_.requests().empty());
}

TEST_F(OpenAiLoop, DropoutStartsAFreshConversationWithTheBestKernel) {
  task_.agent.iterations = 3;
  task_.agent.patience = 1;
  task_.agent.max_generations = 2;
  server_.script(
      {kernel_reply(0.5, 100, 10), kernel_reply(0.45, 200, 20), kernel_reply(0.6, 300, 30)});
  auto g0 = run(task_);
  ASSERT_TRUE(g0) << g0.error().message;
  ASSERT_EQ(g0->end, GenerationEnd::kDropout);
  EXPECT_EQ(g0->next.usage.prompt_tokens, 300) << "generation 0's usage travels in the task";
  auto g1 = run(g0->next);
  ASSERT_TRUE(g1) << g1.error().message;
  EXPECT_DOUBLE_EQ(g1->next.best.score, 0.6);
  auto reqs = server_.chat_requests();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[1]["messages"].size(), 4u) << "generation 0's memory";
  EXPECT_EQ(reqs[2]["messages"].size(), 2u) << "generation 1 starts a fresh conversation";
  const std::string first = last_user(reqs[2]);
  EXPECT_NE(first.find("best kernel so far (quick median S_j 0.5000)"), std::string::npos);
  EXPECT_NE(first.find("// kernel S=0.5\n"), std::string::npos);
  EXPECT_EQ(g1->next.usage.prompt_tokens, 600);
  EXPECT_NEAR(g1->next.usage.cost_usd, (600 * 0.5 + 60 * 2.0) / 1e6, 1e-12);
  auto ends = audit_events("generation_end");
  ASSERT_EQ(ends.size(), 2u);
  EXPECT_EQ(ends[1]["usage"]["prompt_tokens"], 300) << "per generation";
  EXPECT_EQ(ends[1]["usage_total"]["prompt_tokens"], 600) << "per (agent, operator)";
  // Each generation's direction is a knowledge-base technique, recorded and in its first
  // message; generation 1's differs from generation 0's.
  auto starts = audit_events("generation_start");
  ASSERT_EQ(starts.size(), 2u);
  const std::string d0 = starts[0]["direction"]["title"], d1 = starts[1]["direction"]["title"];
  EXPECT_EQ(starts[0]["direction"]["id"].get<std::string>().rfind("kb:", 0), 0u);
  EXPECT_NE(starts[0]["direction"]["id"], starts[1]["direction"]["id"]);
  const std::string first0 = reqs[0]["messages"][1]["content"];
  EXPECT_NE(first0.find("This attempt's optimisation direction\n\n" + d0), std::string::npos);
  EXPECT_NE(first.find("This attempt's optimisation direction\n\n" + d1), std::string::npos);
  EXPECT_EQ(first.find("This attempt's optimisation direction\n\n" + d0), std::string::npos)
      << "generation 1 is not sent generation 0's direction";
}

}  // namespace
}  // namespace atrex::agent
