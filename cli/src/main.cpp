// atrex — cluster-scale sweeps of kernel-writing agents on the Atrex-Bench suite.
#include <csignal>
#include <cstdlib>
#include <fmt/format.h>

#include "atrex/common/log.h"
#include "cli.h"

namespace atrex::cli {

void add_no_sandbox_flag(CLI::App& command, bool& no_sandbox) {
  const char* env = std::getenv("ATREX_NO_SANDBOX");
  no_sandbox = env && std::string(env) == "1";
  command.add_flag("--no-sandbox", no_sandbox,
                   "Run candidates WITHOUT the evaluation sandbox (no namespaces, no seccomp: they "
                   "can reach this user's files and the network); for hosts where bwrap cannot "
                   "make user namespaces. Default from $ATREX_NO_SANDBOX=1. Records say "
                   "`sandbox: none`");
}

int fail(const Error& e) {
  fmt::print(stderr, "atrex: {}\n", e.message);
  return exit_code_for(e);
}

Result<std::optional<metrics::ListenAddress>> metrics_listen_flag(const std::string& value) {
  if (value.empty()) return std::optional<metrics::ListenAddress>();
  auto a = metrics::parse_listen_address(value, "--metrics-listen");
  if (!a) return tl::unexpected(a.error());
  return std::optional<metrics::ListenAddress>(*a);
}

Result<problems::Suite> load_suite(const GlobalOptions& g) {
  return problems::Suite::load(g.suite_dir.empty() ? problems::default_suite_dir()
                                                   : std::filesystem::path(g.suite_dir));
}

}  // namespace atrex::cli

int main(int argc, char** argv) {
  // A Redis or TLS peer that closes a connection must be an error of that write (EPIPE, then a
  // reconnect), not the end of a runner: hiredis writes with write(2) (hiredis README, "SIGPIPE").
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{
      "atrex: runs sweeps of kernel-writing agents on the Atrex-Bench suite and scores them "
      "against the "
      "hardware roofline (S_j, S_i, S_agg)."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "atrex 0.1.0");
  atrex::cli::GlobalOptions g;
  std::string log_level = "info";
  app.add_option("--suite", g.suite_dir,
                 "Problem suite folder (default: the bundled Atrex-Bench release)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  int rc = 0;
  atrex::cli::add_problems_commands(app, g, rc);
  atrex::cli::add_roofline_command(app, g, rc);
  atrex::cli::add_hardware_commands(app, g, rc);
  atrex::cli::add_eval_command(app, g, rc);
  atrex::cli::add_compile_command(app, g, rc);
  atrex::cli::add_bench_commands(app, g, rc);
  atrex::cli::add_ingest_commands(app, g, rc);
  atrex::cli::add_sweep_commands(app, g, rc);
  atrex::cli::add_report_command(app, g, rc);
  atrex::cli::add_worker_commands(app, g, rc);
  app.parse_complete_callback([&] { atrex::configure_logging(log_level); });
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, like every other bad-input message; bad flags are bad input (exit code 2).
    fmt::print(stderr, "atrex: {} (see `atrex --help`)\n", e.what());
    return 2;
  }
  return rc;
}
