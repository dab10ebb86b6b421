// `gpu` label (deploy/gpu/run-gpu-checks.sh tests): `atrex sweep run` on the cuda backend with two
// `openai` agents against the fake chat-completions server (testing/fake_llm_server.h), one asked
// for `target: triton` and one for `target: torch` (issue 19 item 3). The triton agent's reply
// is the release-format Triton rms_norm of kernels/python/, the torch agent's the PyTorch-only
// module of kernels/faults/python/. Both are correct on every shape; the report must tell them
// apart the way the paper does: DSL adoption 100% for the Triton agent, 0% and a listed fallback
// (the correctness illusion) for the PyTorch one. Needs a GPU and a Python site with torch and
// triton ($ATREX_PYTHON); skips without them (the label only runs on GPU hosts).

#include <filesystem>
#include <fstream>
#include <iostream>

#include <gtest/gtest.h>

#include "atrex/common/json_io.h"
#include "atrex/runner/python_site.h"
#include "atrex/testing/fake_llm_server.h"
#include "atrex/testing/sweep_cli.h"

namespace atrex {
namespace {
namespace fs = std::filesystem;
using testing::ScriptedReply;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// The operator entry of `agent` in report.json, or null.
Json operator_of(const Json& report, const std::string& agent, const std::string& op) {
  for (const auto& a : report["agents"]) {
    if (a["agent"] != agent) continue;
    for (const auto& o : a["operators"])
      if (o["operator"] == op) return o;
  }
  return Json();
}

Json agent_of(const Json& report, const std::string& agent) {
  for (const auto& a : report["agents"])
    if (a["agent"] == agent) return a;
  return Json();
}

TEST(OpenAiGpuSweep, TritonAgentAdoptsTheDslAndTheTorchAgentIsAFallback) {
  if (!fs::exists("/dev/nvidiactl")) GTEST_SKIP() << "no NVIDIA GPU on this host";
  const char* env = std::getenv("ATREX_PYTHON");
  const std::string python = env && *env ? env : "python3";
  auto site = runner::probe_python_site(python);
  ASSERT_TRUE(site) << site.error().message;
  ASSERT_TRUE(runner::python_site_supports(*site, Backend::kCuda))
      << python << " has no torch or no triton";

  const fs::path dir = fs::temp_directory_path() / ("atrex_openai_gpu_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string triton =
      slurp(std::string(ATREX_TEST_KERNELS_DIR) + "/python/rms_norm/generated_kernel.py");
  const std::string torch =
      slurp(std::string(ATREX_TEST_KERNELS_DIR) + "/faults/python/rms_norm_torch.py");
  ASSERT_FALSE(triton.empty());
  ASSERT_FALSE(torch.empty());
  // One server per agent: each agent's one request gets its own module.
  testing::FakeLlmServer triton_llm, torch_llm;
  ASSERT_TRUE(triton_llm.ok() && torch_llm.ok());
  triton_llm.script(
      {ScriptedReply::completion("The module:\n```python\n" + triton + "```\n", 2000, 900)});
  torch_llm.script(
      {ScriptedReply::completion("The module:\n```python\n" + torch + "```\n", 2000, 300)});
  // Every rms_norm shape in the final evaluation (2 seeds), one quick shape per iteration.
  std::ofstream(dir / "sweep.yaml") << fmt::format(R"(name: openai-gpu-targets
backend: cuda
agents:
  - name: model-triton
    provider: openai
    base_url: {}
    model: fake-model
    target: triton
    timeout_s: 60
    budget: {{iterations: 1}}
    dropout: {{patience: 5, max_generations: 1}}
  - name: model-torch
    provider: openai
    base_url: {}
    model: fake-model
    target: torch
    timeout_s: 60
    budget: {{iterations: 1}}
    dropout: {{patience: 5, max_generations: 1}}
operators: [rms_norm]
shapes:
  cuda: all
  quick: 1
evaluation: {{seeds: 2, shape_timeout_s: 120}}
quick_evaluation: {{seeds: 1, shape_timeout_s: 120}}
output: out
)",
                                                   triton_llm.base_url(), torch_llm.base_url());
  testing::AtrexCli atrex(dir, {}, {{"ATREX_PYTHON", python}});
  auto [rc, text] = atrex({"sweep", "run", (dir / "sweep.yaml").string(), "--out", "out"}, 900);
  ASSERT_EQ(rc, 0) << text;
  std::cout << text << "\n" << slurp(dir / "out" / "report.md") << std::endl;

  // What each model was asked for.
  const std::string triton_system =
      triton_llm.chat_requests().at(0)["messages"][0]["content"].get<std::string>();
  EXPECT_NE(triton_system.find("@triton.jit"), std::string::npos) << triton_system;
  const std::string torch_system =
      torch_llm.chat_requests().at(0)["messages"][0]["content"].get<std::string>();
  EXPECT_NE(torch_system.find("PyTorch operations only"), std::string::npos) << torch_system;

  auto report = read_json_file(dir / "out" / "report.json");
  ASSERT_TRUE(report) << report.error().message;
  const Json tri = operator_of(*report, "model-triton", "rms_norm");
  const Json tor = operator_of(*report, "model-torch", "rms_norm");
  ASSERT_FALSE(tri.is_null() || tor.is_null()) << report->dump();
  // Both correct on all 56 shapes; only the Triton one ran in its own DSL.
  EXPECT_EQ(tri["status"], "correct") << tri.dump();
  EXPECT_EQ(tri["shapes_correct"], tri["shapes_evaluated"]) << tri.dump();
  EXPECT_GT(tri["s_i"].get<double>(), 0.0);
  EXPECT_GT(tri["dsl_share"].get<double>(), 0.9) << tri.dump();
  EXPECT_EQ(tri["fallback"], false) << tri.dump();
  EXPECT_EQ(tor["status"], "correct") << tor.dump();
  EXPECT_EQ(tor["dsl_share"], 0.0) << tor.dump();
  EXPECT_EQ(tor["fallback"], true) << tor.dump();
  EXPECT_EQ(agent_of(*report, "model-triton")["dsl_adoption_rate"], 1.0);
  EXPECT_EQ(agent_of(*report, "model-torch")["dsl_adoption_rate"], 0.0);
  // The illusion table names the PyTorch agent's operator, not the Triton agent's.
  const std::string md = slurp(dir / "out" / "report.md");
  EXPECT_NE(md.find("| model-torch | 1 | 1 | 1 | rms_norm (0% DSL, Python) |"), std::string::npos) << md;
  EXPECT_EQ(md.find("| model-triton | 1 | 1 | 1 |"), std::string::npos) << md;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace atrex
