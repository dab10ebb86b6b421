// `atrex sweep run` with `cli` agents on the CPU backend, the CLIs replaced by the scripted
// agent testing/fake_cli/fake_agent_cli.sh (claude's headless JSON):
//  - an honest one starts from its workspace's reference, measures it with `atrex-eval` from
//    inside its sandbox, and the sweep scores it, with its turns, tokens and cost accounted;
//  - an adversarial one tries to read roofline.json, metadata.json, the project checkout and
//    the results folder, to write into the checkout, the results folder and the test folder,
//    to reach a live Redis port and to find queue variables or evaluator files; each attempt
//    fails, as the script reports from inside the sandbox, and nothing it wrote reaches the host.
// A control run of the same script outside the sandbox shows the probes can see each target.
// A `target: torch` agent (docs/python-candidates.md "Agents that write Python") is asked for
// Atrex-Bench's Python module, writes generated_kernel.py, and the sweep scores it as a Python
// candidate on the cpu backend: correct, DSL share 0, a PyTorch fallback. Targets the sweep
// cannot honour are refused before anything runs (exit 2, naming file, field and value).
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "atrex/common/json_io.h"
#include "atrex/common/process/subprocess.h"
#include "atrex/testing/redis_server.h"
#include "atrex/testing/python_torch.h"
#include "atrex/testing/sweep_cli.h"

namespace atrex {
namespace {
namespace fs = std::filesystem;

constexpr const char* kKey = "fake-cli-key-7f3e9a-must-not-leak";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::vector<Json> audit_events(const fs::path& p) {
  std::vector<Json> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(Json::parse(line));
  }
  return out;
}

const Json* agent_row(const Json& report, const std::string& name) {
  for (const auto& a : report["agents"])
    if (a["agent"] == name) return &a;
  return nullptr;
}

class CliAgentSweep : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("atrex_cli_e2e_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "bin");
    fs::create_directories(dir_ / "ws");
    for (const char* name : {"claude", "claude-adversarial"})
      fs::create_symlink(ATREX_TEST_FAKE_CLI, dir_ / "bin" / name);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove(fs::path(ATREX_TEST_SOURCE_DIR) / "pwned-by-agent", ec);
    fs::remove_all(dir_);
  }
  std::map<std::string, std::string> env() const {
    const char* path = std::getenv("PATH");
    return {{"PATH", (dir_ / "bin").string() + ":" + (path ? path : "/usr/bin:/bin")},
            {"ATREX_E2E_CLI_KEY", kKey},
            {"ATREX_AGENT_WORKSPACES", (dir_ / "ws").string()}};
  }
  std::vector<std::string> probes(int redis_port) const {
    const std::string suite = std::string(ATREX_TEST_SOURCE_DIR) + "/problems/atrex-bench/data";
    return {"--probe-read",  suite + "/rms_norm/roofline.json",
            "--probe-read",  suite + "/rms_norm/metadata.json",
            "--probe-read",  std::string(ATREX_TEST_SOURCE_DIR) + "/README.md",
            "--probe-read",  std::string(ATREX_TEST_SOURCE_DIR),
            "--probe-read",  (dir_ / "out" / "manifest.json").string(),
            "--probe-read",  (dir_ / "ws").string(),
            "--probe-write", std::string(ATREX_TEST_SOURCE_DIR) + "/pwned-by-agent",
            "--probe-write", (dir_ / "out" / "pwned").string(),
            "--probe-write", (dir_ / "pwned").string(),
            "--probe-port",  std::to_string(redis_port)};
  }
  fs::path dir_;
};

TEST_F(CliAgentSweep, HonestAgentIsScoredThroughAtrexEvalAndTheAdversaryReachesNothing) {
  testing::RedisServer redis;  // a live port the adversary must not reach
  ASSERT_TRUE(redis.running());
  const int port = redis.options().port;
  std::string adversary_command = "[claude-adversarial";
  for (const auto& a : probes(port)) adversary_command += ", \"" + a + "\"";
  adversary_command += ", --echo-env, ATREX_E2E_CLI_KEY, -p, \"{prompt}\"]";
  std::ofstream(dir_ / "sweep.yaml") << fmt::format(R"(name: cli-e2e
backend: cpu
hardware: H20
agents:
  - name: claude-honest
    provider: cli
    preset: claude
    model: fake-sonnet
    timeout_s: 120
    evals_per_run: 2
    budget: {{iterations: 2}}
    dropout: {{patience: 5, max_generations: 1}}
  - name: adversary
    provider: cli
    command: {}
    output_format: claude
    env: [ATREX_E2E_CLI_KEY]
    timeout_s: 120
    budget: {{iterations: 1}}
    dropout: {{patience: 5, max_generations: 1}}
operators: [rms_norm]
shapes:
  cpu: {{ids: {{rms_norm: [15, 28]}}}}
  quick: 2
evaluation: {{seeds: 2, min_iterations: 3, max_iterations: 5, min_time_s: 0, shape_timeout_s: 60}}
quick_evaluation: {{seeds: 1, min_iterations: 2, max_iterations: 3, min_time_s: 0, shape_timeout_s: 60}}
output: out
)",
                                                    adversary_command);
  testing::AtrexCli atrex(dir_, {}, env());
  auto [rc, text] = atrex({"sweep", "run", (dir_ / "sweep.yaml").string(), "--out", "out"}, 600);
  ASSERT_EQ(rc, 0) << text;

  // The honest agent: scored, measured from inside its sandbox, usage from claude's JSON.
  auto report = read_json_file(dir_ / "out" / "report.json");
  ASSERT_TRUE(report) << report.error().message;
  const Json* honest = agent_row(*report, "claude-honest");
  ASSERT_NE(honest, nullptr) << report->dump();
  Json rms;
  for (const auto& o : (*honest)["operators"])
    if (o["operator"] == "rms_norm") rms = o;
  EXPECT_EQ(rms["status"], "correct") << rms.dump();
  EXPECT_GT((*honest)["s_agg"].get<double>(), 0.0);
  const Json& u = (*honest)["usage"];
  EXPECT_EQ(u["requests"], 2) << "two CLI runs: " << u.dump();
  EXPECT_EQ(u["turns"], 6);
  EXPECT_EQ(u["prompt_tokens"], 2 * 2000) << "input + cache creation + cache reads";
  EXPECT_EQ(u["completion_tokens"], 2 * 250);
  EXPECT_NEAR(u["cost_usd"].get<double>(), 2 * 0.0125, 1e-12);
  int evaluated = 0;
  for (const auto& e : audit_events(dir_ / "out" / "audit" / "claude-honest" / "rms_norm.jsonl")) {
    if (e["event"] != "evaluated") continue;
    ++evaluated;
    EXPECT_EQ(e["decision"] == "incorrect", false) << e.dump();
    const Json& evals = e["provenance"]["evals"];
    ASSERT_EQ(evals.size(), 1u) << "one atrex-eval call per run: " << e["provenance"].dump();
    EXPECT_GE(evals[0]["score"].get<double>(), 0.0) << "atrex-eval measured it correct";
    EXPECT_EQ(evals[0]["sha256"], e["sha256"]) << "the workspace file is the candidate";
    const std::string said = e["rationale"];
    EXPECT_NE(said.find("atrex-eval exit 0"), std::string::npos) << said;
    EXPECT_NE(said.find("S_j"), std::string::npos) << "the feedback reached the agent: " << said;
    EXPECT_NE(said.find("TASK.md"), std::string::npos) << said;
    EXPECT_NE(said.find("reference"), std::string::npos) << said;
    for (const char* hidden : {"roofline.json", "metadata.json", "manifest.json"})
      EXPECT_EQ(said.find(hidden), std::string::npos) << hidden << " in the workspace: " << said;
    EXPECT_EQ(e["provenance"]["preset"], "claude");
    EXPECT_EQ(e["provenance"]["model"], "fake-sonnet");
  }
  EXPECT_EQ(evaluated, 2);

  // The adversary: every probe failed inside the sandbox.
  std::string said;
  for (const auto& e : audit_events(dir_ / "out" / "audit" / "adversary" / "rms_norm.jsonl")) {
    if (e.contains("rationale")) said += e["rationale"].get<std::string>();
  }
  const std::regex probe_line("probe (read|write|port|env|find)[^\n]*");
  int probes_seen = 0;
  for (std::sregex_iterator it(said.begin(), said.end(), probe_line), end; it != end; ++it) {
    ++probes_seen;
    const std::string line = it->str();
    if (line.starts_with("probe write")) {
      // A write may land in the sandbox's private /tmp; it must never reach the host (below),
      // and the checkout is read-only.
      if (line.find(ATREX_TEST_SOURCE_DIR) != std::string::npos) {
        EXPECT_NE(line.find("denied"), std::string::npos) << line;
      }
    } else {
      EXPECT_NE(line.find(": denied"), std::string::npos) << line;
    }
  }
  EXPECT_EQ(probes_seen, 12) << said;
  EXPECT_FALSE(fs::exists(fs::path(ATREX_TEST_SOURCE_DIR) / "pwned-by-agent"));
  EXPECT_FALSE(fs::exists(dir_ / "out" / "pwned"));
  EXPECT_FALSE(fs::exists(dir_ / "pwned"));
  // The key passed in (env) was echoed by the adversary: stored as ***, nowhere in clear.
  EXPECT_NE(said.find("echo-env ATREX_E2E_CLI_KEY=***"), std::string::npos) << said;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "out")) {
    if (e.is_regular_file()) {
      EXPECT_EQ(slurp(e.path()).find(kKey), std::string::npos) << e.path();
    }
  }
  EXPECT_EQ(text.find(kKey), std::string::npos);
  // Workspaces go with their generation.
  EXPECT_TRUE(fs::is_empty(dir_ / "ws"));

  // Control: the same script outside the sandbox sees the targets, so "denied" above is the
  // sandbox's doing, not a broken probe.
  SubprocessOptions o;
  o.argv = {(dir_ / "bin" / "claude-adversarial").string(), "--no-kernel"};
  const auto all = probes(port);
  for (size_t i = 0; i + 1 < all.size(); i += 2) {
    if (all[i] == "--probe-write") continue;
    o.argv.push_back(all[i]);
    o.argv.push_back(all[i + 1]);
  }
  o.working_dir = dir_;
  o.output_tail_bytes = 1 << 20;
  // Outside the sandbox its `find /` walks the whole host: over 60 s on a loaded 2-core machine.
  o.timeout = std::chrono::minutes(5);
  auto control = run_subprocess(o);
  ASSERT_TRUE(control && control->ok()) << (control ? control->output_tail : "");
  for (const char* seen : {"roofline.json: ALLOWED", "metadata.json: ALLOWED",
                           "README.md: ALLOWED", "manifest.json: ALLOWED", "ALLOWED (connected"}) {
    EXPECT_NE(control->output_tail.find(seen), std::string::npos)
        << seen << " in " << control->output_tail;
  }
}

TEST_F(CliAgentSweep, TorchTargetWritesAPythonModuleScoredAsAPyTorchFallback) {
  ATREX_REQUIRE_PYTHON_WITH_TORCH(python);
  std::ofstream(dir_ / "sweep.yaml") << R"(name: cli-torch
backend: cpu
hardware: H20
agents:
  - name: claude-torch
    provider: cli
    preset: claude
    target: torch
    timeout_s: 300
    evals_per_run: 1
    budget: {iterations: 1}
    dropout: {patience: 5, max_generations: 1}
operators: [rms_norm]
shapes:
  cpu: {ids: {rms_norm: [15]}}
  quick: 1
evaluation: {seeds: 2, min_iterations: 3, max_iterations: 5, min_time_s: 0, shape_timeout_s: 120}
quick_evaluation: {seeds: 1, min_iterations: 2, max_iterations: 3, min_time_s: 0, shape_timeout_s: 120}
output: out
)";
  auto run_env = env();
  run_env["ATREX_PYTHON"] = python;
  testing::AtrexCli atrex(dir_, {}, run_env);
  auto [rc, text] = atrex({"sweep", "run", (dir_ / "sweep.yaml").string(), "--out", "out"}, 900);
  ASSERT_EQ(rc, 0) << text;

  // The workspace asked for the release's format, and the module it left was the candidate.
  int evaluated = 0;
  for (const auto& e : audit_events(dir_ / "out" / "audit" / "claude-torch" / "rms_norm.jsonl")) {
    if (e["event"] != "evaluated") continue;
    ++evaluated;
    EXPECT_TRUE(e["file_name"].get<std::string>().ends_with(".py")) << e["file_name"];
    EXPECT_NE(e["source"].get<std::string>().find("class Model(nn.Module)"), std::string::npos);
    EXPECT_EQ(e["provenance"]["target"], "torch") << e["provenance"].dump();
    const Json& evals = e["provenance"]["evals"];
    ASSERT_EQ(evals.size(), 1u) << e["provenance"].dump();
    EXPECT_GE(evals[0]["score"].get<double>(), 0.0) << "atrex-eval measured it correct";
    const std::string said = e["rationale"];
    for (const char* asked : {"TASK.md asks: class Model(torch.nn.Module)",
                              "TASK.md asks: no torch.compile",
                              "TASK.md asks: PyTorch operations only", "atrex-eval exit 0"}) {
      EXPECT_NE(said.find(asked), std::string::npos) << asked << " in " << said;
    }
    EXPECT_EQ(said.find("TASK.md asks: atrex_candidate_run"), std::string::npos) << said;
  }
  EXPECT_EQ(evaluated, 1);

  // Scored: correct, DSL share 0 (no target DSL compiles for the CPU), a fallback.
  auto report = read_json_file(dir_ / "out" / "report.json");
  ASSERT_TRUE(report) << report.error().message;
  const Json* agent = agent_row(*report, "claude-torch");
  ASSERT_NE(agent, nullptr) << report->dump();
  Json rms;
  for (const auto& o : (*agent)["operators"])
    if (o["operator"] == "rms_norm") rms = o;
  EXPECT_EQ(rms["status"], "correct") << rms.dump();
  EXPECT_GT(rms["s_i"].get<double>(), 0.0) << rms.dump();
  EXPECT_EQ(rms["dsl_share"], 0.0) << rms.dump();
  EXPECT_EQ(rms["fallback"], true) << rms.dump();
  EXPECT_EQ((*agent)["operators_fallback"], 1) << agent->dump();
  EXPECT_EQ((*agent)["dsl_adoption_rate"], 0.0) << agent->dump();
  const std::string md = slurp(dir_ / "out" / "report.md");
  EXPECT_NE(md.find("| 100.0% | 0.0% | 1/1 |"), std::string::npos) << "DSL adoption 0: " << md;
  EXPECT_NE(md.find("| claude-torch | 1 | 1 | 1 | rms_norm (0% DSL, Python) |"), std::string::npos) << md;
  EXPECT_TRUE(fs::is_empty(dir_ / "ws"));
}

TEST_F(CliAgentSweep, TargetsTheSweepCannotHonourAreRefusedNamingFileFieldAndValue) {
  const fs::path file = dir_ / "sweep.yaml";
  auto plan = [&](const std::string& backend, const std::string& agent) {
    std::ofstream(file) << "name: t\nbackend: " << backend << "\nhardware: H20\nagents:\n"
                        << agent << "operators: [rms_norm]\n";
    testing::AtrexCli atrex(dir_, {}, env());
    return atrex({"sweep", "plan", file.string()});
  };
  const std::string cli = "  - {name: tr, provider: cli, preset: claude, target: triton}\n";
  auto [rc, text] = plan("cpu", cli);
  EXPECT_EQ(rc, 2) << text;
  for (const char* said : {"sweep.yaml: field \"agents[0].target\"", "cuda backend", "\"triton\""})
    EXPECT_NE(text.find(said), std::string::npos) << said << " in " << text;
  auto [hip_rc, hip_text] = plan("hip", "  - {name: t, provider: cli, preset: claude, target: torch}\n");
  EXPECT_EQ(hip_rc, 2) << hip_text;
  EXPECT_NE(hip_text.find("agents[0].target"), std::string::npos) << hip_text;
  auto [fixed_rc, fixed_text] =
      plan("cpu", "  - {name: f, provider: fixed, kernels: [a.cpp], target: torch}\n");
  EXPECT_EQ(fixed_rc, 2) << fixed_text;
  EXPECT_NE(fixed_text.find("agents[0].target"), std::string::npos) << fixed_text;
  EXPECT_NE(fixed_text.find("cannot write to a target"), std::string::npos) << fixed_text;
  // The twin: the same entry with a target the backend evaluates is planned.
  auto [ok_rc, ok_text] = plan("cuda", cli);
  EXPECT_EQ(ok_rc, 0) << ok_text;
  auto [torch_rc, torch_text] =
      plan("cpu", "  - {name: t, provider: cli, preset: claude, target: torch}\n");
  EXPECT_EQ(torch_rc, 0) << torch_text;
}

}  // namespace
}  // namespace atrex
