// atrex — cluster-scale sweeps of kernel-writing agents on the Atrex-Bench suite.
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <map>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "atrex/common/build_info.h"
#include "atrex/common/log.h"
#include "cli.h"

namespace atrex::cli {

void add_no_sandbox_flag(CLI::App& command, bool& no_sandbox, const std::string& description) {
  const char* env = std::getenv("ATREX_NO_SANDBOX");
  no_sandbox = env && std::string(env) == "1";
  command.add_flag("--no-sandbox", no_sandbox,
                   description.empty()
                       ? "Run candidates WITHOUT the evaluation sandbox (no namespaces, no seccomp: "
                         "they can reach this user's files and the network); for hosts where bwrap "
                         "cannot make user namespaces. Default from $ATREX_NO_SANDBOX=1. Records "
                         "say `sandbox: none`"
                       : description);
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

namespace {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The name of `names` nearest to `word` (at most a third of its letters changed, or a prefix
// of it), "" when none is near.
std::string nearest(std::string_view word, const std::vector<std::string>& names) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& n : names) {
    const size_t d = n.starts_with(word) && word.size() >= 2 ? 1 : edit_distance(word, n);
    if (d < best_d) {
      best_d = d;
      best = n;
    }
  }
  return best;
}

std::string command_path(const CLI::App* app) {
  std::vector<std::string> parts;
  for (const CLI::App* a = app; a; a = a->get_parent()) {
    parts.insert(parts.begin(), a->get_parent() ? a->get_name() : std::string("atrex"));
  }
  return fmt::format("{}", fmt::join(parts, " "));
}

std::vector<std::string> subcommand_names(CLI::App* app) {
  std::vector<std::string> names;
  for (const auto* c : app->get_subcommands([](CLI::App*) { return true; }))
    names.push_back(c->get_name());
  return names;
}

std::vector<std::string> option_names(const CLI::App* app) {
  std::vector<std::string> names;
  for (const CLI::App* a = app; a; a = a->get_parent()) {
    for (const auto* o : a->get_options()) {
      for (const auto& l : o->get_lnames()) names.push_back("--" + l);
      for (const auto& sn : o->get_snames()) names.push_back("-" + sn);
    }
    if (a == app && !a->get_parent()) break;
  }
  return names;
}

const CLI::Option* find_option(const CLI::App* app, std::string_view name) {
  // Options of the command itself, then of its parents (the global --suite, --log-level).
  for (const CLI::App* a = app; a; a = a->get_parent()) {
    for (const auto* o : a->get_options()) {
      if (o->check_name(std::string(name))) return o;
    }
  }
  return nullptr;
}

// The first word of the command line that names no subcommand or option of the command it is
// given to, with the nearest name: "unknown subcommand `swep` of `atrex` (did you mean
// `sweep`?)". Empty when every word is known (the error is then CLI11's own).
std::string explain_unknown_word(CLI::App& app, int argc, char** argv) {
  CLI::App* cur = &app;
  size_t positionals = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string tok = argv[i];
    if (tok == "--") break;
    if (tok.size() > 1 && tok[0] == '-') {
      const std::string name = tok.substr(0, tok.find('='));
      const CLI::Option* o = find_option(cur, name);
      if (!o) {
        const std::string near = nearest(name, option_names(cur));
        return fmt::format("unknown option {} of `{}`{}; see `{} --help`", name,
                           command_path(cur),
                           near.empty() ? "" : fmt::format(" (did you mean {}?)", near),
                           command_path(cur));
      }
      if (tok.find('=') == std::string::npos && o->get_type_size() != 0 && i + 1 < argc) ++i;
      continue;
    }
    CLI::App* sub = nullptr;
    for (auto* c : cur->get_subcommands([](CLI::App*) { return true; })) {
      if (c->check_name(tok)) sub = c;
    }
    if (sub) {
      cur = sub;
      positionals = 0;
      continue;
    }
    const auto subs = subcommand_names(cur);
    size_t takes = 0;
    bool unlimited = false;
    for (const auto* o : cur->get_options()) {
      if (!o->get_positional()) continue;
      if (o->get_items_expected_max() >= CLI::detail::expected_max_vector_size) unlimited = true;
      takes += static_cast<size_t>(std::max(0, o->get_items_expected_max()));
    }
    if (!subs.empty() && !unlimited && positionals >= takes) {
      const std::string near = nearest(tok, subs);
      return fmt::format("unknown subcommand `{}` of `{}`{}; its subcommands: {}", tok,
                         command_path(cur),
                         near.empty() ? "" : fmt::format(" (did you mean `{}`?)", near),
                         fmt::join(subs, ", "));
    }
    ++positionals;
  }
  if (cur->get_require_subcommand_min() > 0 && cur->get_subcommands().empty()) {
    return fmt::format("`{}` needs a subcommand: {}; see `{} --help`", command_path(cur),
                       fmt::join(subcommand_names(cur), ", "), command_path(cur));
  }
  return "";
}

// One example per command, shown at the end of its --help (docs name the rest).
const std::map<std::string, std::string>& examples() {
  static const std::map<std::string, std::string> e = {
      {"atrex", "atrex problems list; atrex eval kernels/reference/rms_norm.cpp --operator "
                "rms_norm; atrex sweep run sweeps/local-default.yaml"},
      {"atrex problems", "atrex problems list"},
      {"atrex problems list", "atrex problems list --json"},
      {"atrex problems show", "atrex problems show rms_norm"},
      {"atrex problems dump", "atrex problems dump rms_norm --shape 0 --out /tmp/rms0"},
      {"atrex problems signal", "atrex problems signal rms_norm"},
      {"atrex roofline", "atrex roofline --hardware H200-SXM --operator rms_norm"},
      {"atrex hardware", "atrex hardware list"},
      {"atrex hardware list", "atrex hardware list --json"},
      {"atrex hardware measure", "atrex hardware measure --backend cpu --out /tmp/host.yaml"},
      {"atrex eval", "atrex eval my_rms_norm.cpp --operator rms_norm --shapes smallest:2 --out "
                     "/tmp/records.jsonl"},
      {"atrex compile", "atrex compile kernels/reference/rms_norm.cu --arch sm_90a"},
      {"atrex bench", "atrex bench reduce --records 1000000"},
      {"atrex bench queue", "atrex bench queue --tasks 20000"},
      {"atrex bench connections", "atrex bench connections --runners 64"},
      {"atrex bench timing", "atrex bench timing --device 0"},
      {"atrex bench eval", "atrex bench eval --operator rms_norm"},
      {"atrex bench reduce", "atrex bench reduce --records 1000000 --agents 6"},
      {"atrex bench ingest", "atrex bench ingest --mb 100"},
      {"atrex ingest", "atrex ingest trace.json.gz --apps apps.yaml --out /tmp/suite"},
      {"atrex sweep", "atrex sweep plan sweeps/local-default.yaml"},
      {"atrex sweep run", "atrex sweep run sweeps/local-default.yaml --out results/local"},
      {"atrex sweep plan", "atrex sweep plan sweeps/local-default.yaml"},
      {"atrex sweep submit", "atrex sweep submit sweeps/six-agents.yaml --launcher slurm"},
      {"atrex sweep status", "atrex sweep status --redis redis://host:6379 --sweep ID"},
      {"atrex sweep wait", "atrex sweep wait --redis redis://host:6379 --sweep ID"},
      {"atrex sweep cancel", "atrex sweep cancel --redis redis://host:6379 --sweep ID"},
      {"atrex sweep resume", "atrex sweep resume --redis redis://host:6379 --sweep ID"},
      {"atrex report", "atrex report results/local --out /tmp/report"},
      {"atrex reduce", "atrex reduce results/agent-a results/agent-b --out /tmp/merged"},
      {"atrex regress", "atrex regress --baseline nights/1 nights/2 --current nights/3 --out "
                        "/tmp/regress"},
      {"atrex runner", "atrex runner --redis redis://host:6379 --sweep ID --device 0"},
      {"atrex agent-worker", "atrex agent-worker --redis redis://host:6379 --sweep ID"},
  };
  return e;
}

void add_examples(CLI::App* app) {
  auto it = examples().find(command_path(app));
  if (it != examples().end()) app->footer("Example:\n  " + it->second);
  for (auto* sub : app->get_subcommands([](CLI::App*) { return true; })) add_examples(sub);
}

void list_commands(CLI::App* app) {
  fmt::print("{}\n", command_path(app));
  for (auto* sub : app->get_subcommands([](CLI::App*) { return true; })) list_commands(sub);
}

}  // namespace

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
  app.set_version_flag("--version", atrex::build_info_line());
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
  atrex::cli::add_examples(&app);
  // Every command path, one a line (the tests check each one's --help).
  if (argc == 2 && std::string_view(argv[1]) == "--list-commands") {
    atrex::cli::list_commands(&app);
    return 0;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, like every other bad-input message; bad flags are bad input (exit code 2). An
    // unknown word is named with the nearest known one, whatever CLI11 made of it ("A
    // subcommand is required", "The following arguments were not expected").
    const std::string unknown = atrex::cli::explain_unknown_word(app, argc, argv);
    if (!unknown.empty() && (dynamic_cast<const CLI::ExtrasError*>(&e) ||
                             dynamic_cast<const CLI::RequiredError*>(&e))) {
      fmt::print(stderr, "atrex: {}\n", unknown);
    } else {
      fmt::print(stderr, "atrex: {} (see `atrex --help`)\n", e.what());
    }
    return 2;
  }
  return rc;
}
