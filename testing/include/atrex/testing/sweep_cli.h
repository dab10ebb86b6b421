// The `atrex` binary of this build driven as a subprocess, and the end-of-sweep check the
// cluster tests share (tests/cluster_test.cpp on loopback, tests/netns_test.cpp across network
// namespaces, tests/slurm_test.cpp on the cluster in a box).
#pragma once

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "atrex/common/json_io.h"
#include "atrex/common/process/subprocess.h"

namespace atrex::testing {

// Polls `pred` every 100 ms until it holds; false at the deadline.
inline bool poll_until(const std::function<bool()>& pred, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// Runs `atrex ARGS...` in `dir` with a compile cache of its own (dir/cache). `prefix` runs it
// through another command (`ip netns exec NS` puts it on another test host); `env` is added to
// its environment (SLURM_CONF: sbatch passes the environment on to the jobs).
class AtrexCli {
 public:
  explicit AtrexCli(std::filesystem::path dir, std::vector<std::string> prefix = {},
                    std::map<std::string, std::string> env = {})
      : dir_(std::move(dir)), prefix_(std::move(prefix)), env_(std::move(env)) {}

  // (exit code, output); -1 when it ran past `timeout_s`.
  std::pair<int, std::string> operator()(std::vector<std::string> args, int timeout_s = 300) const {
    SubprocessOptions o;
    o.argv = prefix_;
    o.argv.push_back(std::string(ATREX_TEST_BIN_DIR) + "/atrex");
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.timeout = std::chrono::seconds(timeout_s);
    o.working_dir = dir_;
    o.output_tail_bytes = 1 << 20;
    o.extra_env = env_;
    o.extra_env["ATREX_CACHE_DIR"] = cache_dir().string();
    auto r = run_subprocess(o);
    if (!r) return {-2, r.error().message};
    return {r->timed_out ? -1 : r->exit_code, r->output_tail};
  }
  std::filesystem::path cache_dir() const { return dir_ / "cache"; }

  // `atrex sweep status OUT --json` (atrex.sweep-status/1).
  Json status(const std::filesystem::path& out) const {
    auto [rc, text] = (*this)({"sweep", "status", out.string(), "--json"});
    EXPECT_EQ(rc, 0) << text;
    const size_t at = text.find('{');
    return at == std::string::npos ? Json::object() : Json::parse(text.substr(at));
  }
  // Polls the sweep's status until `pred` holds; false at the deadline.
  bool poll(const std::filesystem::path& out, const std::function<bool(const Json&)>& pred,
            int seconds) const {
    return poll_until([&] { return pred(status(out)); }, seconds);
  }

 private:
  std::filesystem::path dir_;
  std::vector<std::string> prefix_;
  std::map<std::string, std::string> env_;
};

// What expect_complete_and_counted_once checks beyond its defaults.
struct CompletionCheck {
  int wait_timeout_s = 300;  // `sweep wait --timeout`
  std::vector<std::string>
      never_in_records;  // e.g. "SIGTERM": a signal to a worker is no candidate's crash
  int min_records = 0;   // results.jsonl holds more lines than this
};

// `atrex sweep wait OUT`, then the crash fixture's outcome: rms_norm correct with each of its
// two final records counted once, and no result key written twice.
inline void expect_complete_and_counted_once(const AtrexCli& atrex,
                                             const std::filesystem::path& out,
                                             const CompletionCheck& check = {}) {
  auto [rc, text] =
      atrex({"sweep", "wait", out.string(), "--timeout", std::to_string(check.wait_timeout_s)},
            check.wait_timeout_s + 50);
  ASSERT_EQ(rc, 0) << text;
  auto report = read_json_file(out / "report.json");
  ASSERT_TRUE(report);
  bool seen = false;
  for (const auto& o : (*report)["agents"][0]["operators"]) {
    if (o["operator"] != "rms_norm") continue;
    seen = true;
    EXPECT_EQ(o["status"], "correct") << o.dump();
    EXPECT_EQ(o["shapes_evaluated"], 2) << "each final record counted once";
  }
  EXPECT_TRUE(seen) << report->dump();
  std::ifstream in(out / "results.jsonl");
  std::set<std::string> keys;
  int records = 0;
  for (std::string line; std::getline(in, line); ++records) {
    EXPECT_TRUE(keys.insert(Json::parse(line)["key"].get<std::string>()).second)
        << "duplicate " << line;
    for (const auto& word : check.never_in_records)
      EXPECT_EQ(line.find(word), std::string::npos) << line;
  }
  EXPECT_GT(records, check.min_records);
}

}  // namespace atrex::testing
