// The cli provider's parts that need no CLI: sweep-file options and presets, the three result
// formats, the staged workspace's file handling (links never followed), the evaluation socket.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "atrex/agent/spec.h"
#include "atrex/common/json_io.h"
#include "atrex/common/process/sandbox.h"
#include "cli/eval_server.h"
#include "cli/options.h"
#include "cli/output.h"
#include "cli/sandbox.h"
#include "cli/task_text.h"
#include "cli/workspace.h"

namespace atrex::agent::cli {
namespace {
namespace fs = std::filesystem;

Result<AgentSpec> spec_of(const std::string& yaml) {
  auto registry = ProviderRegistry::builtin();
  EXPECT_TRUE(registry) << registry.error().message;
  auto j = parse_yaml_to_json(yaml, "/sweeps/sweep.yaml");
  EXPECT_TRUE(j) << j.error().message;
  return agent_spec_from_json(JsonField(*j, "/sweeps/sweep.yaml", "agents.0"), *registry);
}

// --- options ----------------------------------------------------------------------------------

TEST(CliOptions, PresetExpandsToTheHeadlessCommandAndRoundTrips) {
  auto s = spec_of(
      "name: cc\nprovider: cli\npreset: claude\nmodel: claude-sonnet-4-5\nextra_args: "
      "[--max-turns, \"40\"]\nenv: [ANTHROPIC_API_KEY]\nnetwork: true\nro_binds: [node]\n"
      "timeout_s: 900\nevals_per_run: 5\n");
  ASSERT_TRUE(s) << s.error().message;
  auto o = options_from_json(s->options, "t");
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->output_format, OutputFormat::kClaude);
  EXPECT_EQ(o->command.front(), "claude");
  EXPECT_EQ(o->command.back(), "40");
  EXPECT_TRUE(o->network);
  EXPECT_EQ(o->ro_binds, std::vector<std::string>{"/sweeps/node"}) << "relative to the file";
  EXPECT_EQ(o->evals_per_run, 5);
  auto argv = expand_command(*o, "do {model} it", "/workspace/kernel.cpp");
  const std::vector<std::string> want = {"claude", "-p", "do {model} it", "--output-format",
                                         "json", "--dangerously-skip-permissions", "--model",
                                         "claude-sonnet-4-5", "--max-turns", "40"};
  EXPECT_EQ(argv, want) << "the prompt's own braces are never placeholders";
  auto back = options_from_json(to_json(*o), "t");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->command, o->command);
}

TEST(CliOptions, PresetWithoutModelDropsTheModelFlag) {
  auto s = spec_of("name: cx\nprovider: cli\npreset: codex\n");
  ASSERT_TRUE(s) << s.error().message;
  auto o = options_from_json(s->options, "t");
  ASSERT_TRUE(o);
  auto argv = expand_command(*o, "P", "c");
  for (const auto& a : argv) EXPECT_NE(a, "--model");
  EXPECT_EQ(argv.back(), "P");
  EXPECT_EQ(o->output_format, OutputFormat::kCodex);
}

TEST(CliOptions, StrictFieldsNameThemselves) {
  auto unknown = spec_of("name: a\nprovider: cli\npreset: claude\nsandbox: off\n");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("unknown agent field \"sandbox\""), std::string::npos)
      << unknown.error().message;
  auto both = spec_of("name: a\nprovider: cli\npreset: claude\ncommand: [x]\n");
  ASSERT_FALSE(both);
  EXPECT_NE(both.error().message.find("exactly one of"), std::string::npos);
  auto neither = spec_of("name: a\nprovider: cli\n");
  ASSERT_FALSE(neither);
  auto preset = spec_of("name: a\nprovider: cli\npreset: aider\n");
  ASSERT_FALSE(preset);
  EXPECT_NE(preset.error().message.find("unknown preset"), std::string::npos);
  EXPECT_NE(preset.error().message.find("aider"), std::string::npos) << "names the value";
  auto fmt = spec_of("name: a\nprovider: cli\ncommand: [x]\noutput_format: xml\n");
  ASSERT_FALSE(fmt);
  EXPECT_NE(fmt.error().message.find("output_format"), std::string::npos);
  auto tmpl = spec_of("name: a\nprovider: cli\ncommand: [\"{prompt}\"]\n");
  ASSERT_FALSE(tmpl);
  auto timeout = spec_of("name: a\nprovider: cli\npreset: gemini\ntimeout_s: 0\n");
  ASSERT_FALSE(timeout);
  EXPECT_NE(timeout.error().message.find("timeout_s"), std::string::npos);
  auto price = spec_of("name: a\nprovider: cli\npreset: gemini\nprice: {per_turn: 1}\n");
  ASSERT_FALSE(price);
  EXPECT_NE(price.error().message.find("per_turn"), std::string::npos);
}

TEST(CliOptions, EnvTakesNamesNeverValuesAndNeverTheQueuesAddress) {
  auto pasted = spec_of("name: a\nprovider: cli\npreset: claude\nenv: [\"sk-ant-secret-123\"]\n");
  ASSERT_FALSE(pasted);
  EXPECT_EQ(pasted.error().message.find("sk-ant-secret-123"), std::string::npos)
      << "a pasted key is not printed: " << pasted.error().message;
  auto redis = spec_of("name: a\nprovider: cli\npreset: claude\nenv: [ATREX_REDIS_URL]\n");
  ASSERT_FALSE(redis);
  EXPECT_NE(redis.error().message.find("queue"), std::string::npos) << redis.error().message;
  auto path = spec_of("name: a\nprovider: cli\npreset: claude\nenv: [PATH]\n");
  ASSERT_FALSE(path);
}

// --- the sandbox's command line ----------------------------------------------------------------

bool has_pair(const std::vector<std::string>& a, const std::string& x, const std::string& y) {
  for (size_t i = 0; i + 1 < a.size(); ++i)
    if (a[i] == x && a[i + 1] == y) return true;
  return false;
}

TEST(CliSandboxArgv, NoNetworkByDefaultOnlyTheWorkspaceWritableAndTheProgramOffItsHostPath) {
  CliSandbox box{"/host/ws/workspace", "/host/ws/run", "/build/bin/atrex-agent-eval",
                 "/home/u/checkout/bin/claude", "/home/u/checkout/tools/fake.sh", {}, false};
  auto a = cli_bwrap_argv("bwrap", box, {"claude", "-p", "hi"});
  EXPECT_NE(std::find(a.begin(), a.end(), "--unshare-net"), a.end());
  EXPECT_TRUE(has_pair(a, "--bind", "/host/ws/workspace"));
  int writable = 0;
  for (const auto& x : a) writable += x == "--bind" || x == "--bind-try" || x == "--dev-bind";
  EXPECT_EQ(writable, 1) << "the workspace is the only read-write bind";
  EXPECT_TRUE(has_pair(a, "--ro-bind", "/home/u/checkout/tools/fake.sh"));
  for (const auto& x : a) {
    EXPECT_NE(x, "/home/u/checkout/bin/claude") << "no host path of the checkout inside";
    EXPECT_NE(x, "/etc/resolv.conf") << "no /etc beyond the loader cache without network";
  }
  const std::vector<std::string> tail(a.end() - 4, a.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"--", "/atrex/cli/claude", "-p", "hi"}));
  box.network = true;
  box.program_found = box.program_real = "/usr/local/bin/claude";
  auto n = cli_bwrap_argv("bwrap", box, {"claude"});
  EXPECT_EQ(std::find(n.begin(), n.end(), "--unshare-net"), n.end());
  EXPECT_TRUE(has_pair(n, "--ro-bind-try", "/etc/resolv.conf"));
  EXPECT_EQ(n.back(), "/usr/local/bin/claude") << "visible where it is";
}

// --- result formats ---------------------------------------------------------------------------

TEST(CliOutput, ClaudeResultObjectGivesTurnsTokensCostAndText) {
  auto r = parse_cli_output(
      OutputFormat::kClaude,
      R"({"type":"result","subtype":"success","is_error":false,"num_turns":7,"result":"done",)"
      R"("total_cost_usd":0.42,"usage":{"input_tokens":10,"cache_creation_input_tokens":20,)"
      R"("cache_read_input_tokens":30,"output_tokens":5}})");
  EXPECT_TRUE(r.parsed);
  EXPECT_EQ(r.turns, 7);
  EXPECT_EQ(r.prompt_tokens, 60);
  EXPECT_EQ(r.completion_tokens, 5);
  ASSERT_TRUE(r.cost_usd);
  EXPECT_DOUBLE_EQ(*r.cost_usd, 0.42);
  EXPECT_EQ(r.final_text, "done");
  EXPECT_TRUE(r.error.empty());
  // A verbose array of messages and stream-json lines end with the same result object; the
  // older `cost_usd` spelling counts too; error subtypes are errors.
  auto arr = parse_cli_output(
      OutputFormat::kClaude,
      R"([{"type":"system","subtype":"init"},{"type":"result","subtype":"error_max_turns",)"
      R"("is_error":true,"num_turns":40,"cost_usd":1.5}])");
  EXPECT_EQ(arr.turns, 40);
  EXPECT_DOUBLE_EQ(arr.cost_usd.value_or(0), 1.5);
  EXPECT_NE(arr.error.find("error_max_turns"), std::string::npos);
  auto stream = parse_cli_output(OutputFormat::kClaude,
                                 "{\"type\":\"system\"}\nnot json\n{\"type\":\"result\","
                                 "\"subtype\":\"success\",\"num_turns\":2,\"result\":\"x\"}\n");
  EXPECT_TRUE(stream.parsed);
  EXPECT_EQ(stream.turns, 2);
  EXPECT_FALSE(stream.cost_usd);
  auto garbage = parse_cli_output(OutputFormat::kClaude, "Error: not logged in\n");
  EXPECT_FALSE(garbage.parsed);
}

// A coding agent is untrusted: output nested 300000 levels deep (whole, on a line of its own, or
// pretty-printed after progress text) is no result and no crash (nlohmann's copies, comparisons
// and dumps recurse; attack round 9), while a result beside it still counts.
TEST(CliOutput, OutputNestedDeeplyEnoughToOverflowTheStackIsNoResult) {
  const std::string deep = "{\"type\":\"result\",\"num_turns\":3,\"x\":" +
                           std::string(300000, '[') + std::string(300000, ']') + "}";
  EXPECT_FALSE(parse_cli_output(OutputFormat::kClaude, deep).parsed);
  EXPECT_FALSE(parse_cli_output(OutputFormat::kClaude, "progress\n" + deep + "\n").parsed);
  EXPECT_FALSE(parse_cli_output(OutputFormat::kCodex, deep + "\n").parsed);
  auto beside = parse_cli_output(OutputFormat::kClaude,
                                 deep + "\n{\"type\":\"result\",\"subtype\":\"success\","
                                        "\"num_turns\":2,\"result\":\"x\"}\n");
  EXPECT_TRUE(beside.parsed);
  EXPECT_EQ(beside.turns, 2);
}

TEST(CliOutput, CodexEventsSumTurnsAndUsageAndKeepTheLastMessage) {
  auto r = parse_cli_output(
      OutputFormat::kCodex,
      "progress on stderr\n"
      R"({"type":"thread.started","thread_id":"t"})"
      "\n"
      R"({"type":"item.completed","item":{"id":"a","type":"agent_message","text":"first"}})"
      "\n"
      R"({"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":40,"output_tokens":10}})"
      "\n"
      R"({"type":"item.completed","item":{"id":"b","type":"agent_message","text":"last"}})"
      "\n"
      R"({"type":"turn.completed","usage":{"input_tokens":50,"output_tokens":5}})"
      "\n");
  EXPECT_TRUE(r.parsed);
  EXPECT_EQ(r.turns, 2);
  EXPECT_EQ(r.prompt_tokens, 150);
  EXPECT_EQ(r.completion_tokens, 15);
  EXPECT_EQ(r.final_text, "last");
  EXPECT_FALSE(r.cost_usd) << "codex reports no cost: the agent's price gives it";
  auto failed = parse_cli_output(
      OutputFormat::kCodex,
      R"({"type":"turn.failed","error":{"message":"rate limit reached"}})"
      "\n");
  EXPECT_NE(failed.error.find("rate limit reached"), std::string::npos);
}

TEST(CliOutput, GeminiStatsSumOverModels) {
  auto r = parse_cli_output(
      OutputFormat::kGemini,
      R"({"response":"ok","stats":{"models":{"a":{"api":{"totalRequests":3},"tokens":)"
      R"({"prompt":100,"candidates":20,"thoughts":5}},"b":{"api":{"totalRequests":1},)"
      R"("tokens":{"prompt":10,"candidates":2}}}}})");
  EXPECT_TRUE(r.parsed);
  EXPECT_EQ(r.turns, 4);
  EXPECT_EQ(r.prompt_tokens, 110);
  EXPECT_EQ(r.completion_tokens, 27);
  EXPECT_EQ(r.final_text, "ok");
  auto err = parse_cli_output(OutputFormat::kGemini,
                              R"({"error":{"type":"ApiError","message":"quota"}})");
  EXPECT_NE(err.error.find("quota"), std::string::npos);
}

// --- workspace --------------------------------------------------------------------------------

class CliWorkspace : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("atrex_cli_ws_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(CliWorkspace, CandidateLinkToAHostFileIsRefusedNotRead) {
  auto w = Workspace::create(root_);
  ASSERT_TRUE(w) << w.error().message;
  std::ofstream(root_ / "secret.json") << "{\"roofline\": 1}";
  fs::create_symlink(root_ / "secret.json", w->dir() / "kernel.cpp");
  auto t = w->take("kernel.cpp");
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message.find("symbolic link"), std::string::npos);
  fs::remove(w->dir() / "kernel.cpp");
  fs::create_directory(w->dir() / "kernel.cpp");
  EXPECT_FALSE(w->take("kernel.cpp")) << "a folder is not a candidate";
  auto none = w->take("other.cpp");
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
}

TEST_F(CliWorkspace, RewritingAFileTheAgentTurnedIntoALinkNeverWritesThroughIt) {
  auto w = Workspace::create(root_);
  ASSERT_TRUE(w);
  const fs::path outside = root_ / "host-file";
  std::ofstream(outside) << "untouched";
  fs::create_symlink(outside, w->dir() / "FEEDBACK.md");
  ASSERT_TRUE(w->put("FEEDBACK.md", "new feedback"));
  std::ifstream in(outside);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "untouched");
  EXPECT_FALSE(fs::is_symlink(w->dir() / "FEEDBACK.md"));
}

TEST_F(CliWorkspace, FolderIsPrivateAndRemovedEvenWhenTheAgentLockedASubfolder) {
  fs::path dir;
  {
    auto w = Workspace::create(root_);
    ASSERT_TRUE(w);
    dir = w->root();
    EXPECT_EQ(fs::status(dir).permissions() & fs::perms::all, fs::perms::owner_all);
    fs::create_directories(w->dir() / "locked" / "inner");
    std::ofstream(w->dir() / "locked" / "inner" / "f") << "x";
    fs::permissions(w->dir() / "locked", fs::perms::none);
  }
  EXPECT_FALSE(fs::exists(dir));
}

// --- the evaluation socket --------------------------------------------------------------------

std::string ask(const fs::path& socket, const std::string& request) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, socket.c_str());
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return "connect failed";
  }
  (void)!::write(fd, request.data(), request.size());
  ::shutdown(fd, SHUT_WR);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

TEST_F(CliWorkspace, EvalSocketAnswersEachRequestAndRefusesMalformedOnes) {
  EvalSocketServer server;
  std::vector<std::string> seen;
  const fs::path sock = root_ / "eval.sock";
  ASSERT_TRUE(server.start(sock, [&](const std::string& file, const std::string& source) {
    seen.push_back(file + ":" + source);
    return "feedback for " + file + "\n";
  }));
  EXPECT_EQ(fs::status(sock).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::owner_exec)
      << "only the worker's user may connect";
  EXPECT_EQ(ask(sock, R"({"file_name":"kernel.cpp","source":"int x;"})"),
            "feedback for kernel.cpp\n");
  EXPECT_NE(ask(sock, "not json").find("malformed"), std::string::npos);
  EXPECT_NE(ask(sock, std::string(2 << 20, 'x')).find("over"), std::string::npos);
  EXPECT_EQ(server.requests_served(), 1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], "kernel.cpp:int x;");
  server.stop();
  EXPECT_FALSE(fs::exists(sock)) << "the socket goes with the run";
}

}  // namespace
}  // namespace atrex::agent::cli

namespace atrex::agent::cli {
namespace {

// The generation's direction (chosen by the loop from what the audit trail has not tried) is in
// the workspace brief, so parallel and later cli generations explore different techniques.
// --- the session's limits (run_cli_session) against a hostile CLI ------------------------------

// testing/fake_cli/hostile_agent_cli.sh run as the CLI of a real session in its bwrap sandbox,
// with small limits, so that each attack meets its limit in seconds: a fork bomb stops at the
// session's cgroup task limit (where the host gives a cgroup; without one, said and skipped), a
// process left behind dies with the session, a nested user namespace is refused, the gateway's
// files cannot be touched, and filling the workspace on the worker's disk kills the session at
// its limit. The same script asked for nothing finishes normally (its honest twin).
class CliSession : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("atrex_cli_session_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "workspace");
    fs::create_directories(root_ / "run");
    std::ofstream(root_ / "run" / "eval.sock") << "";
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string run(const std::vector<std::string>& args, const CliSessionLimits& limits,
                  std::string& limit_hit, std::string* cgroup = nullptr) {
    const fs::path script = ATREX_TEST_HOSTILE_CLI;
    CliSandbox box{root_ / "workspace", root_ / "run", "/bin/true", script, script, {}, false};
    std::vector<std::string> command = {"hostile"};
    command.insert(command.end(), args.begin(), args.end());
    SubprocessOptions so;
    so.argv = cli_bwrap_argv(bwrap_program(), box, command);
    so.timeout = std::chrono::seconds(60);
    so.output_file = root_ / "out.log";
    so.env = std::map<std::string, std::string>{{"PATH", "/usr/bin:/bin"}, {"HOME", "/tmp"}};
    auto r = run_cli_session(so, root_ / "workspace", limits, limit_hit, cgroup);
    EXPECT_TRUE(r) << r.error().message;
    std::ifstream in(root_ / "out.log");
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }
  fs::path root_;
};

bool process_with_marker_alive(const std::string& marker) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    std::ifstream in(e.path() / "cmdline");
    std::string cmd((std::istreambuf_iterator<char>(in)), {});
    if (cmd.find(marker) != std::string::npos && cmd.find("hostile") == std::string::npos)
      return true;
  }
  return false;
}

TEST_F(CliSession, HostileAgentMeetsItsTaskAndWorkspaceLimits) {
  ASSERT_TRUE(probe_bwrap(bwrap_program())) << "the cli provider needs bwrap (no unsandboxed mode)";
  std::string hit, cgroup;
  const std::string marker = "atrex-left-" + std::to_string(::getpid());
  const std::string out = run({"--fork", "600", "--leave", marker, "--nested-userns", "--tamper", "--sysctl"},
                              {.tasks = 128, .workspace_bytes = 256ull << 20, .poll_ms = 100}, hit,
                              &cgroup);
  EXPECT_NE(out.find("hostile agent done"), std::string::npos) << out;
  EXPECT_TRUE(hit.empty()) << hit;
  for (const char* t : {"cp /bin/true /atrex/bin/atrex-eval", "rm -f /run/atrex/eval.sock",
                        "touch /run/atrex/x"}) {
    EXPECT_NE(out.find(std::string("tamper ") + t + ": denied"), std::string::npos) << out;
  }
  EXPECT_TRUE(fs::exists(root_ / "run" / "eval.sock"));
  EXPECT_NE(out.find("userns=denied"), std::string::npos) << out;
  EXPECT_NE(out.find("sysctl core_pattern: denied"), std::string::npos) << out;
  EXPECT_FALSE(process_with_marker_alive(marker)) << "a process outlived the session";
  const auto at = out.find("forks=");
  ASSERT_NE(at, std::string::npos) << out;
  const long forks = std::stol(out.substr(at + 6));
  if (cgroup.rfind("none", 0) == 0) {
    EXPECT_EQ(forks, 600) << "no cgroup here (" << cgroup << "): nothing bounds the forks";
  } else {
    EXPECT_LT(forks, 128) << cgroup << ": " << out;
    EXPECT_NE(out.find("last=EAGAIN"), std::string::npos) << out;
  }

  // The worker's disk: 1 GiB asked for, killed past 256 MiB (one poll of 100 ms late at most,
  // so well under the 1 GiB).
  const std::string fill =
      run({"--fill", "1024"}, {.workspace_bytes = 256ull << 20, .poll_ms = 100}, hit);
  EXPECT_NE(hit.find("past its 256 MiB limit"), std::string::npos) << hit << "\n" << fill;
  EXPECT_EQ(fill.find("hostile agent done"), std::string::npos) << fill;
  EXPECT_LT(folder_disk_bytes(root_ / "workspace"), 1000ull << 20);
  fs::remove_all(root_ / "workspace");
  fs::create_directories(root_ / "workspace");

  // The honest twin: the same script asked for nothing ends normally under the same limits.
  const std::string honest = run({}, {.tasks = 128, .workspace_bytes = 256ull << 20}, hit);
  EXPECT_NE(honest.find("hostile agent done"), std::string::npos) << honest;
  EXPECT_TRUE(hit.empty()) << hit;
}

TEST(CliTaskText, TheGenerationsDirectionIsInTheBrief) {
  Direction d{"kb:memory_bound#2", "Vectorised 16-byte loads", "Load rows as uint4."};
  ProposalContext ctx{"rms_norm", Backend::kCpu, 1, 0, 1, nullptr, nullptr, nullptr, nullptr, &d};
  const TaskFiles files = task_files(ctx, {}, Target::kNative, 4);
  ASSERT_FALSE(files.empty());
  const auto task = std::find_if(files.begin(), files.end(),
                                 [](const auto& f) { return f.first == "TASK.md"; });
  ASSERT_NE(task, files.end());
  EXPECT_NE(task->second.find("Vectorised 16-byte loads"), std::string::npos) << task->second;
  EXPECT_NE(task->second.find("Load rows as uint4."), std::string::npos);
  ctx.direction = nullptr;
  const auto none = task_files(ctx, {}, Target::kNative, 4);
  EXPECT_EQ(none.front().second.find("optimisation direction\n"), std::string::npos);
}

}  // namespace
}  // namespace atrex::agent::cli
