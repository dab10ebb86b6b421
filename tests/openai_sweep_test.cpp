// `atrex sweep run` with an `openai` agent against the fake chat-completions server
// (testing/fake_llm_server.h) on the CPU backend: a rate-limited first request, a reply without
// code, then the rms_norm reference candidate; the report scores it and carries the model
// usage, and the API key is in no file of the results folder and on no process's command line.
// A `target: torch` agent gets Atrex-Bench's Python format asked for, its ```python block is a
// Python candidate, and the report shows it correct with DSL adoption 0, a PyTorch fallback.

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "atrex/common/json_io.h"
#include "atrex/testing/fake_llm_server.h"
#include "atrex/testing/python_torch.h"
#include "atrex/testing/sweep_cli.h"

namespace atrex {
namespace {
namespace fs = std::filesystem;
using testing::ScriptedReply;

constexpr const char* kKey = "sk-e2e-4b1d2c-must-not-leak";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Whether any process's command line holds `needle` (/proc/<pid>/cmdline).
bool in_some_command_line(const std::string& needle) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (slurp(e.path() / "cmdline").find(needle) != std::string::npos) return true;
  }
  return false;
}

class OpenAiSweep : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("atrex_openai_e2e_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(OpenAiSweep, CpuSweepScoresTheModelsKernelAndNeverWritesTheKey) {
  testing::FakeLlmServer llm;
  ASSERT_TRUE(llm.ok());
  const std::string kernel = slurp(std::string(ATREX_TEST_REFERENCE_DIR) + "/rms_norm/naive.cpp");
  ASSERT_FALSE(kernel.empty());
  llm.script({ScriptedReply::status(429, {{"Retry-After", "1"}}),
              ScriptedReply::completion("Let me think about coalescing first.", 1000, 200),
              ScriptedReply::completion("The kernel:\n```cpp\n" + kernel + "```\n", 3000, 800)});
  std::ofstream(dir_ / "sweep.yaml") << fmt::format(R"(name: openai-e2e
backend: cpu
hardware: H20
agents:
  - name: fake-llm
    provider: openai
    base_url: {}
    model: fake-model
    api_key_env: ATREX_E2E_LLM_KEY
    max_retries: 2
    timeout_s: 60
    price: {{prompt_per_mtok: 1.0, completion_per_mtok: 4.0}}
    budget: {{iterations: 2}}
    dropout: {{patience: 5, max_generations: 1}}
operators: [rms_norm]
shapes:
  cpu: {{ids: {{rms_norm: [15, 28]}}}}
  quick: 2
evaluation: {{seeds: 2, min_iterations: 3, max_iterations: 5, min_time_s: 0, shape_timeout_s: 60}}
quick_evaluation: {{seeds: 1, min_iterations: 2, max_iterations: 3, min_time_s: 0, shape_timeout_s: 60}}
output: results/openai-e2e
)",
                                                    llm.base_url());
  testing::AtrexCli atrex(dir_, {}, {{"ATREX_E2E_LLM_KEY", kKey}});
  std::pair<int, std::string> run;
  std::atomic<bool> done{false};
  std::thread sweep([&] {
    run = atrex({"sweep", "run", (dir_ / "sweep.yaml").string(), "--out", "out"}, 600);
    done = true;
  });
  bool key_on_a_command_line = false;
  while (!done) {
    key_on_a_command_line = key_on_a_command_line || in_some_command_line(kKey);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  sweep.join();
  ASSERT_EQ(run.first, 0) << run.second;
  EXPECT_FALSE(key_on_a_command_line);
  EXPECT_EQ(run.second.find(kKey), std::string::npos) << "not in the output either";

  // The model was asked with the key, three times (429, prose, kernel).
  auto seen = llm.requests();
  ASSERT_EQ(seen.size(), 3u);
  for (const auto& r : seen) EXPECT_EQ(r.header("Authorization"), std::string("Bearer ") + kKey);
  EXPECT_NE(llm.chat_requests()[2]["messages"].back()["content"].get<std::string>().find(
                "no fenced code block"),
            std::string::npos);

  auto report = read_json_file(dir_ / "out" / "report.json");
  ASSERT_TRUE(report) << report.error().message;
  const Json& agent = (*report)["agents"][0];
  EXPECT_EQ(agent["agent"], "fake-llm");
  Json rms;
  for (const auto& o : agent["operators"])
    if (o["operator"] == "rms_norm") rms = o;
  EXPECT_EQ(rms["status"], "correct") << rms.dump();
  EXPECT_GT(rms["s_i"].get<double>(), 0.0);
  EXPECT_GT(agent["s_agg"].get<double>(), 0.0);
  EXPECT_EQ(agent["usage"]["prompt_tokens"], 4000) << agent.dump();
  EXPECT_EQ(agent["usage"]["completion_tokens"], 1000);
  EXPECT_EQ(agent["usage"]["requests"], 3);
  EXPECT_NEAR(agent["usage"]["cost_usd"].get<double>(), (4000 * 1.0 + 1000 * 4.0) / 1e6, 1e-12);
  EXPECT_NE(slurp(dir_ / "out" / "report.md").find("model usage: 4000 prompt + 1000 completion"),
            std::string::npos);

  // The key is in no file the sweep wrote.
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "out")) {
    if (!e.is_regular_file()) continue;
    ++files;
    EXPECT_EQ(slurp(e.path()).find(kKey), std::string::npos) << e.path();
  }
  EXPECT_GE(files, 4) << "manifest, results, audit trail, reports";
  const std::string audit = slurp(dir_ / "out" / "audit" / "fake-llm" / "rms_norm.jsonl");
  EXPECT_NE(audit.find("\"proposal_failed\""), std::string::npos);
  EXPECT_NE(audit.find("\"prompt_tokens\":3000"), std::string::npos);
}

TEST_F(OpenAiSweep, TorchTargetSweepCompletesWithDslAdoptionZeroAndAPyTorchFallback) {
  ATREX_REQUIRE_PYTHON_WITH_TORCH(python);
  const std::string module =
      slurp(std::string(ATREX_TEST_CANDIDATES_DIR) + "/python/rms_norm_torch.py");
  ASSERT_FALSE(module.empty());
  testing::FakeLlmServer llm;
  ASSERT_TRUE(llm.ok());
  llm.script({ScriptedReply::completion("The module:\n```python\n" + module + "```\n", 2000, 400)});
  std::ofstream(dir_ / "sweep.yaml") << fmt::format(R"(name: openai-torch
backend: cpu
hardware: H20
agents:
  - name: fake-torch
    provider: openai
    base_url: {}
    model: fake-model
    target: torch
    timeout_s: 60
    budget: {{iterations: 1}}
    dropout: {{patience: 5, max_generations: 1}}
operators: [rms_norm]
shapes:
  cpu: {{ids: {{rms_norm: [15]}}}}
  quick: 1
evaluation: {{seeds: 2, min_iterations: 3, max_iterations: 5, min_time_s: 0, shape_timeout_s: 120}}
quick_evaluation: {{seeds: 1, min_iterations: 2, max_iterations: 3, min_time_s: 0, shape_timeout_s: 120}}
output: out
)",
                                                    llm.base_url());
  testing::AtrexCli atrex(dir_, {}, {{"ATREX_PYTHON", python}});
  auto [rc, text] = atrex({"sweep", "run", (dir_ / "sweep.yaml").string(), "--out", "out"}, 900);
  ASSERT_EQ(rc, 0) << text;
  // The model was asked for the release's format.
  const auto chats = llm.chat_requests();
  ASSERT_EQ(chats.size(), 1u);
  const std::string system = chats[0]["messages"][0]["content"];
  EXPECT_NE(system.find("generated_kernel.py"), std::string::npos) << system;
  EXPECT_NE(system.find("PyTorch operations only"), std::string::npos) << system;

  auto report = read_json_file(dir_ / "out" / "report.json");
  ASSERT_TRUE(report) << report.error().message;
  const Json& agent = (*report)["agents"][0];
  Json rms;
  for (const auto& o : agent["operators"])
    if (o["operator"] == "rms_norm") rms = o;
  EXPECT_EQ(rms["status"], "correct") << rms.dump();
  EXPECT_EQ(rms["dsl_share"], 0.0) << rms.dump();
  EXPECT_EQ(rms["fallback"], true) << rms.dump();
  EXPECT_EQ(agent["dsl_adoption_rate"], 0.0) << agent.dump();
  const std::string md = slurp(dir_ / "out" / "report.md");
  EXPECT_NE(md.find("| 100.0% | 0.0% | 1/1 |"), std::string::npos) << "DSL adoption 0: " << md;
  EXPECT_NE(md.find("| fake-torch | 1 | 1 | 1 | rms_norm (0% DSL, Python) |"), std::string::npos) << md;
  const std::string audit = slurp(dir_ / "out" / "audit" / "fake-torch" / "rms_norm.jsonl");
  EXPECT_NE(audit.find("\"file_name\":\"rms_norm_g0_i"), std::string::npos) << audit;
  EXPECT_NE(audit.find(".py\""), std::string::npos) << audit;
}

}  // namespace
}  // namespace atrex
