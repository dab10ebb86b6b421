// Subcommand registration for the `atrex` binary. Each command returns the process exit
// code (README "Exit codes"): 0 success, 1 failure, 2 bad input (unknown names, malformed
// files, bad flags), 3 unavailable (no GPU for a GPU backend, an unreachable Redis or Slurm).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "atrex/common/error.h"
#include "atrex/common/metrics_server.h"
#include "atrex/problems/hardware.h"
#include "atrex/problems/operator.h"
#include "atrex/problems/suite.h"
#include "atrex/scoring/aggregate.h"

namespace atrex::cli {

// Global options shared by commands.
struct GlobalOptions {
  std::string suite_dir;  // empty = bundled
  bool json = false;
};

// Each add_* registers a subcommand whose callback stores the exit code in `rc`.
void add_problems_commands(CLI::App& app, GlobalOptions& g, int& rc);
// `problems signal` (the low-signal rule's reach), under `problems`.
void add_problems_signal_command(CLI::App& problems, GlobalOptions& g, int& rc);
void add_roofline_command(CLI::App& app, GlobalOptions& g, int& rc);
void add_hardware_commands(CLI::App& app, GlobalOptions& g, int& rc);
void add_eval_command(CLI::App& app, GlobalOptions& g, int& rc);
void add_compile_command(CLI::App& app, GlobalOptions& g, int& rc);

// The backend of a candidate file: `flag` (auto, cpu, cuda, hip; auto: from the extension,
// runner::backend_for_file). kInvalidInput naming --backend or the file.
Result<Backend> backend_for(const std::string& flag, const std::string& file);
// `bench queue` (and the other benchmarks that print their figures).
void add_bench_commands(CLI::App& app, GlobalOptions& g, int& rc);
// `bench timing` and `bench eval`, under `bench`.
void add_gpu_bench_commands(CLI::App& bench, GlobalOptions& g, int& rc);
// `bench connections` (idle workers parked on one Redis), under `bench`.
void add_bench_connections_command(CLI::App& bench, int& rc);
// `bench reduce` (the reducer over synthetic records), under `bench`.
void add_bench_reduce_command(CLI::App& bench, GlobalOptions& g, int& rc);
void add_sweep_commands(CLI::App& app, GlobalOptions& g, int& rc);
// `report`, `reduce` and `regress` (cmd_report.cpp).
void add_report_command(CLI::App& app, GlobalOptions& g, int& rc);
// `sweep submit|status|wait|cancel|resume` (under `sweep`) and the `runner` / `agent-worker`
// daemons.
void add_cluster_commands(CLI::App& sweep, GlobalOptions& g, int& rc);
// `ingest` and `bench ingest` (after add_bench_commands: it adds to `bench`).
void add_ingest_commands(CLI::App& app, GlobalOptions& g, int& rc);
// The `runner` and `agent-worker` daemons.
void add_worker_commands(CLI::App& app, GlobalOptions& g, int& rc);

// `--metrics-listen ADDR:PORT` on a long-lived command (empty: none). Bad values are kInvalidInput
// naming the flag and the value (exit code 2).
Result<std::optional<metrics::ListenAddress>> metrics_listen_flag(const std::string& value);

// `--no-sandbox` on the commands that evaluate candidates (eval, runner, sweep run): untrusted
// candidates then run without the evaluation sandbox (docs/evaluation.md "Sandbox"). Its
// default is true when $ATREX_NO_SANDBOX is 1, so that the runners a launcher starts on a host
// without user namespaces can be told too. Records say `sandbox: none`.
// `description`: the flag's help where it is not the evaluation sandbox's ("": that one).
void add_no_sandbox_flag(CLI::App& command, bool& no_sandbox, const std::string& description = "");

// True (and says so on stderr) when a sweep's agents attempted operators but none got a final
// evaluation: `sweep run` / `sweep wait` then exit 1 (cmd_sweep.cpp).
bool every_agent_task_failed(const std::vector<scoring::AgentScore>& agents);

// Prints "atrex: <message>" to stderr and returns the exit code for the error.
int fail(const Error& e);

// The suite chosen by --suite (or the bundled one).
Result<problems::Suite> load_suite(const GlobalOptions& g);

}  // namespace atrex::cli
