// sweeps/six-agents.yaml, the paper's six agent stacks, run end to end as a cluster sweep on the
// CPU backend: `sweep submit --launcher slurm` (the cluster in a box's real single-node Slurm)
// with a real redis-server, the model server replaced by the fake chat-completions server
// (testing/fake_llm_server.h) and the three coding-agent CLIs by the scripted agent
// (testing/fake_cli, on the workers' PATH). The file itself is run, not a copy: the smoke
// settings come in through its documented ATREX_SWEEP_* variables. The report has one row per
// agent, each with the operator scored. Without a running Slurm the test FAILS (CI must not skip
// it silently) unless ATREX_SKIP_SLURM_TESTS=1.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "atrex/common/json_io.h"
#include "atrex/common/process/subprocess.h"
#include "atrex/testing/fake_llm_server.h"
#include "atrex/testing/redis_server.h"
#include "atrex/testing/sweep_cli.h"

namespace atrex {
namespace {
namespace fs = std::filesystem;

std::string slurm_conf() {
  if (const char* c = std::getenv("SLURM_CONF"); c && *c) return c;
  const char* dir = std::getenv("ATREX_CLUSTER_DIR");
  return std::string(dir && *dir ? dir : "/tmp/atrex-cluster") + "/slurm/slurm.conf";
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

bool slurm_up(std::string& why) {
  SubprocessOptions o;
  o.argv = {"sinfo", "--noheader", "--format=%P %T"};
  o.timeout = std::chrono::seconds(30);
  o.extra_env = {{"SLURM_CONF", slurm_conf()}};
  auto r = run_subprocess(o);
  why = r ? r->output_tail : r.error().message;
  return r && r->ok() && r->output_tail.find("cpu") != std::string::npos;
}

TEST(SixAgentsSweep, PaperStacksRunOnSlurmThroughRedisWithOneReportRowPerAgent) {
  std::string why;
  if (!slurm_up(why)) {
    const std::string msg = "no Slurm cluster reachable with SLURM_CONF=" + slurm_conf() +
                            " (sinfo: " + why +
                            "); start deploy/cluster-in-a-box.sh or set ATREX_SKIP_SLURM_TESTS=1";
    const char* skip = std::getenv("ATREX_SKIP_SLURM_TESTS");
    if (skip && std::string(skip) == "1") GTEST_SKIP() << msg;
    FAIL() << msg;
  }
  const fs::path dir = fs::temp_directory_path() / ("atrex_six_agents_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "bin");
  fs::create_directories(dir / "ws");
  for (const char* name : {"claude", "codex", "gemini"})
    fs::create_symlink(ATREX_TEST_FAKE_CLI, dir / "bin" / name);

  testing::RedisServer redis;
  ASSERT_TRUE(redis.running());
  testing::FakeLlmServer llm;
  ASSERT_TRUE(llm.ok());
  const std::string kernel = slurp(std::string(ATREX_TEST_REFERENCE_DIR) + "/rms_norm/naive.cpp");
  ASSERT_FALSE(kernel.empty());
  // Both models of the server answer every request with a correct kernel.
  llm.set_fallback(
      testing::ScriptedReply::completion("```cpp\n" + kernel + "```\n", 2000, 500));

  const char* path = std::getenv("PATH");
  std::map<std::string, std::string> env = {
      {"SLURM_CONF", slurm_conf()},
      {"PATH", (dir / "bin").string() + ":" + (path ? path : "/usr/bin:/bin")},
      {"ATREX_AGENT_WORKSPACES", (dir / "ws").string()},
      // The file's documented overrides: CPU backend, one operator, small budgets, the CLIs
      // without network (their model APIs are fakes), the fake model server.
      {"ATREX_SWEEP_BACKEND", "cpu"},
      {"ATREX_SWEEP_HARDWARE", "H20"},
      {"ATREX_SWEEP_OPERATORS", "[rms_norm]"},
      {"ATREX_SWEEP_ITERATIONS", "1"},
      {"ATREX_SWEEP_MODEL_ITERATIONS", "1"},
      {"ATREX_SWEEP_SEARCH_ITERATIONS", "2"},
      {"ATREX_SWEEP_QUICK_SHAPES", "1"},
      {"ATREX_SWEEP_CLI_NETWORK", "false"},
      {"ATREX_SWEEP_MODEL_SERVER", llm.base_url()},
      {"ATREX_SWEEP_MODEL_A", "fake/model-a"},
      {"ATREX_SWEEP_MODEL_B", "fake/model-b"},
      // The keys the file names (values are fakes; the CLIs get theirs through `env`).
      {"ANTHROPIC_API_KEY", "fake-anthropic-key-0001"},
      {"OPENAI_API_KEY", "fake-openai-key-0002"},
      {"GEMINI_API_KEY", "fake-gemini-key-0003"},
      {"VLLM_API_KEY", "fake-vllm-key-0004"}};
  testing::AtrexCli atrex(dir, {}, env);
  const std::string url = "redis://127.0.0.1:" + std::to_string(redis.options().port);
  const fs::path out = dir / "out";
  auto [rc, text] = atrex({"sweep", "submit", std::string(ATREX_TEST_SOURCE_DIR) +
                                                  "/sweeps/six-agents.yaml",
                           "--redis", url, "--out", out.string(), "--runners", "1",
                           "--agent-workers", "2", "--cpu-partition", "cpu"});
  ASSERT_EQ(rc, 0) << text;
  auto manifest = read_json_file(out / "manifest.json");
  ASSERT_TRUE(manifest);
  EXPECT_EQ((*manifest)["workers"]["launcher"], "slurm") << (*manifest)["workers"].dump();
  auto waited = atrex({"sweep", "wait", out.string(), "--timeout", "550"}, 600);
  ASSERT_EQ(waited.first, 0) << waited.second;

  auto report = read_json_file(out / "report.json");
  ASSERT_TRUE(report) << report.error().message;
  const std::set<std::string> want = {"claude-code", "codex",   "gemini-cli",
                                      "qwen3-coder", "gpt-oss", "search"};
  std::set<std::string> rows;
  for (const auto& a : (*report)["agents"]) {
    const std::string name = a["agent"];
    EXPECT_TRUE(rows.insert(name).second) << "one row per agent: " << name;
    Json rms;
    for (const auto& o : a["operators"])
      if (o["operator"] == "rms_norm") rms = o;
    EXPECT_EQ(rms["status"], "correct") << name << ": " << rms.dump();
    EXPECT_EQ(a["operators_attempted"], 1) << name;
    EXPECT_GT(a["s_agg"].get<double>(), 0.0) << name;
    if (name == "claude-code" || name == "codex" || name == "gemini-cli") {
      EXPECT_GT(a["usage"]["turns"].get<int>(), 0) << name << " " << a["usage"].dump();
      EXPECT_GT(a["usage"]["prompt_tokens"].get<int>(), 0) << name;
    }
    if (name == "qwen3-coder" || name == "gpt-oss") {
      EXPECT_EQ(a["usage"]["prompt_tokens"], 2000) << name << " " << a["usage"].dump();
    }
  }
  EXPECT_EQ(rows, want);
  // The codex run reports tokens but no cost: the agent's price gives it.
  for (const auto& a : (*report)["agents"]) {
    if (a["agent"] == "codex") {
      EXPECT_NEAR(a["usage"]["cost_usd"].get<double>(), (2000 * 1.25 + 400 * 10.0) / 1e6, 1e-12)
          << a["usage"].dump();
    }
  }
  std::set<std::string> models;
  for (const auto& r : llm.chat_requests()) models.insert(r["model"].get<std::string>());
  EXPECT_EQ(models, (std::set<std::string>{"fake/model-a", "fake/model-b"}))
      << "two models behind the same server";
  // No key in any file the sweep wrote.
  for (const auto& e : fs::recursive_directory_iterator(out)) {
    if (!e.is_regular_file()) continue;
    const std::string body = slurp(e.path());
    for (const char* key : {"fake-anthropic-key-0001", "fake-openai-key-0002",
                            "fake-gemini-key-0003", "fake-vllm-key-0004"})
      EXPECT_EQ(body.find(key), std::string::npos) << key << " in " << e.path();
  }
  EXPECT_TRUE(fs::is_empty(dir / "ws")) << "the generations' workspaces are gone";
  (void)atrex({"sweep", "cancel", out.string()});
  fs::remove_all(dir);
}

}  // namespace
}  // namespace atrex
