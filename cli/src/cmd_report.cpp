// `atrex reduce`, `atrex report` and `atrex regress`: the reducer over results folders and live
// sweeps, and the nightly comparison (docs/reports.md).
#include <unistd.h>

#include <fmt/format.h>

#include "atrex/common/clock.h"
#include "atrex/common/progress.h"
#include "atrex/common/redis/endpoint.h"
#include "atrex/scoring/reduce.h"
#include "atrex/scoring/reducer.h"
#include "atrex/scoring/regress.h"
#include "atrex/scoring/render.h"
#include "atrex/scheduler/best_kernels.h"
#include "cli.h"

namespace atrex::cli {
namespace fs = std::filesystem;
namespace {

struct ReduceArgs {
  std::vector<std::string> sources;
  std::vector<std::string> baselines;
  std::string redis_url;
  std::vector<std::string> sweeps;
  std::string out;
  double dsl_threshold = 0.9;
};

// Progress of reading results folders: bytes of their results.jsonl (read once each) against
// the total, on stderr (a line in place on a terminal, one every 10 s otherwise).
class ReadProgress {
 public:
  ReadProgress(const std::string& what, const std::vector<std::string>& dirs) {
    int64_t total = 0;
    for (const auto& d : dirs) {
      std::error_code ec;
      const auto size = fs::file_size(fs::path(d) / "results.jsonl", ec);
      if (!ec) total += static_cast<int64_t>(size);
    }
    ProgressOptions o;
    o.what = what;
    o.unit = "MB";
    o.terminal = progress_to_terminal();
    o.every = progress_every(std::chrono::seconds(10));
    meter_ = std::make_unique<ProgressMeter>(std::move(o), total);
  }
  void add(int64_t bytes) { meter_->update(done_ += bytes); }
  void print(const std::string& line) { meter_->print(line); }
  void finish(std::string_view detail = {}) { meter_->finish(detail); }

 private:
  std::unique_ptr<ProgressMeter> meter_;
  int64_t done_ = 0;
};

scoring::ReduceOptions reduce_options(double dsl_threshold, ReadProgress* progress = nullptr) {
  scoring::ReduceOptions o;
  o.dsl_threshold = dsl_threshold;
  o.warn = [progress](const std::string& w) {
    const std::string line = fmt::format("atrex: warning: {}", w);
    if (progress) progress->print(line);
    else fmt::print(stderr, "{}\n", line);
  };
  if (progress) o.progress = [progress](int64_t bytes) { progress->add(bytes); };
  return o;
}

// The report of `dirs` (and live sweeps), with the baselines' columns.
Result<scoring::Report> reduce_sources(const problems::Suite& suite, const ReduceArgs& a,
                                       const std::string& what) {
  std::vector<std::string> all = a.sources;
  all.insert(all.end(), a.baselines.begin(), a.baselines.end());
  ReadProgress progress(what, all);
  scoring::Reducer reducer(suite, reduce_options(a.dsl_threshold, &progress));
  for (const auto& d : a.sources) ATREX_TRY(reducer.add_folder(d));
  if (!a.sweeps.empty()) {
    if (a.redis_url.empty()) return invalid_input("--sweep: needs --redis URL (or $ATREX_REDIS_URL)");
    ATREX_ASSIGN_OR_RETURN(RedisEndpoint redis, parse_redis_url(a.redis_url));
    for (const auto& id : a.sweeps) ATREX_TRY(reducer.add_redis(redis, id));
  }
  if (a.sources.empty() && a.sweeps.empty()) {
    return invalid_input("nothing to reduce: name results folders, or --redis URL --sweep ID");
  }
  ATREX_ASSIGN_OR_RETURN(scoring::Report report, reducer.finish(utc_timestamp_now()));
  for (const auto& b : a.baselines) {
    scoring::Reducer base(suite, reduce_options(a.dsl_threshold, &progress));
    ATREX_TRY(base.add_folder(b));
    ATREX_ASSIGN_OR_RETURN(scoring::Report br, base.finish(utc_timestamp_now()));
    scoring::apply_baseline(report, br, fs::path(b).filename().string(), b);
  }
  progress.finish(fmt::format("{} agent(s) reduced", report.agents.size()));
  return report;
}

void print_tables(const scoring::Report& report) {
  if (report.partial) {
    fmt::print("PARTIAL: some (agent, operator) pairs have no final evaluation yet; S_agg is a "
               "lower bound\n");
  }
  for (const auto& a : report.agents) {
    fmt::print("\nagent {}\n{}", a.agent, scoring::agent_table_text(a));
  }
}

int write_and_print(const GlobalOptions& g, const scoring::Report& report, const fs::path& out) {
  auto files = scoring::write_report_files(out, report);
  if (!files) return fail(files.error());
  if (g.json) {
    fmt::print("{}\n", scoring::to_json(report).dump(2));
    return 0;
  }
  print_tables(report);
  fmt::print("\nreports: {}, {}, {} and {}\n", files->markdown.string(), files->json.string(),
             files->html.string(), files->junit.string());
  return 0;
}

int reduce_cmd(const GlobalOptions& g, const ReduceArgs& a) {
  auto suite = load_suite(g);
  if (!suite) return fail(suite.error());
  auto report = reduce_sources(*suite, a, "reduce");
  if (!report) return fail(report.error());
  if (a.out.empty()) {
    fmt::print("{}", g.json ? scoring::to_json(*report).dump(2) + "\n"
                            : scoring::render_markdown(*report));
    return 0;
  }
  return write_and_print(g, *report, a.out);
}

int report_cmd(const GlobalOptions& g, ReduceArgs a) {
  auto suite = load_suite(g);
  if (!suite) return fail(suite.error());
  const std::string dir = a.sources.front();
  fs::path out = a.out.empty() ? fs::path(dir) : fs::path(a.out);
  // Checked before reading anything: a read-only results folder is read, its reports go where
  // --out says.
  if (a.out.empty() && ::access(dir.c_str(), W_OK) != 0) {
    return fail(Error{ErrorCode::kInvalidInput,
                      fmt::format("{}: the results folder is not writable: pass --out DIR for "
                                  "the rendered reports (reading needs no write access)",
                                  dir)});
  }
  auto report = reduce_sources(*suite, a, "report");
  if (!report) return fail(report.error());
  // The best kernels as files next to the reports (what `sweep run --kernels-from` reads).
  if (auto k = scheduler::export_best_kernels(dir, out, *report); !k) {
    fmt::print(stderr, "atrex: warning: best kernels: {}\n", k.error().message);
  }
  return write_and_print(g, *report, out);
}

struct RegressArgs {
  std::vector<std::string> baselines;
  std::string current;
  std::string out;
  scoring::RegressOptions options;
};

int regress_cmd(const GlobalOptions& g, const RegressArgs& a) {
  if (auto v = scoring::validate(a.options); !v) return fail(v.error());
  auto suite = load_suite(g);
  if (!suite) return fail(suite.error());
  // One reducer per folder: the nights of one nightly sweep file share its sweep id, and a
  // reducer merges what shares a sweep id.
  std::vector<std::unique_ptr<scoring::Reducer>> nights;
  std::vector<const scoring::ReducedSweep*> base;
  std::vector<std::string> all = a.baselines;
  all.push_back(a.current);
  ReadProgress progress("regress", all);
  auto read = [&](const std::string& dir) -> Result<const scoring::ReducedSweep*> {
    nights.push_back(std::make_unique<scoring::Reducer>(*suite, reduce_options(0.9, &progress)));
    ATREX_TRY(nights.back()->add_folder(dir));
    return nights.back()->sweeps().front().get();
  };
  for (const auto& b : a.baselines) {
    auto s = read(b);
    if (!s) return fail(s.error());
    base.push_back(*s);
  }
  auto current = read(a.current);
  if (!current) return fail(current.error());
  progress.finish(fmt::format("{} night(s) read; comparing", all.size()));
  const scoring::RegressResult r = scoring::regress(base, **current, a.options);
  if (!a.out.empty()) {
    const fs::path out(a.out);
    std::error_code ec;
    fs::create_directories(out, ec);
    for (auto [name, text] : {std::pair{"regress.json", scoring::to_json(r).dump(2)},
                              std::pair{"regress.md", scoring::render_markdown(r)},
                              std::pair{"regress-junit.xml", scoring::render_junit(r)}}) {
      if (auto w = write_text_file_atomic(out / name, text); !w) return fail(w.error());
    }
  }
  fmt::print("{}", g.json ? scoring::to_json(r).dump(2) + "\n" : scoring::render_markdown(r));
  return r.regressions > 0 ? 1 : 0;
}

}  // namespace

void add_report_command(CLI::App& app, GlobalOptions& g, int& rc) {
  static ReduceArgs rep, red;
  static RegressArgs reg;
  auto* r = app.add_subcommand(
      "report",
      "Re-score one results folder and write report.json, report.md, report.html and junit.xml "
      "(into the folder, or --out)\n  example: atrex report results/local-default --out /tmp/r");
  r->add_option("results", rep.sources, "Results folder of a sweep")
      ->required()
      ->expected(1)
      ->check(CLI::ExistingDirectory);
  r->add_option("--out", rep.out, "Folder for the rendered reports (default: the results folder)");
  r->add_option("--baseline", rep.baselines,
                "Results folder shown as baseline columns (reference kernels, a previous night)")
      ->check(CLI::ExistingDirectory);
  r->add_option("--dsl-threshold", rep.dsl_threshold,
                "Target-DSL share under which a correct candidate is a fallback")
      ->check(CLI::Range(0.0, 1.0));
  r->add_flag("--json", g.json, "Print the atrex.report/1 JSON");
  r->callback([&] { rc = report_cmd(g, rep); });

  auto* d = app.add_subcommand(
      "reduce",
      "Reduce results folders and live sweeps (merged; duplicates dropped) into one "
      "atrex.report/1\n  example: atrex reduce results/day1 results/day2 --out /tmp/merged");
  d->add_option("sources", red.sources, "Results folders")->check(CLI::ExistingDirectory);
  d->add_option("--redis", red.redis_url, "Redis of live sweeps (with --sweep)")
      ->envname("ATREX_REDIS_URL");
  d->add_option("--sweep", red.sweeps, "Sweep id in --redis (repeatable)");
  d->add_option("--baseline", red.baselines, "Results folder shown as baseline columns")
      ->check(CLI::ExistingDirectory);
  d->add_option("--out", red.out,
                "Folder for report.json/.md/.html and junit.xml (default: Markdown on stdout)");
  d->add_option("--dsl-threshold", red.dsl_threshold,
                "Target-DSL share under which a correct candidate is a fallback")
      ->check(CLI::Range(0.0, 1.0));
  d->add_flag("--json", g.json, "Print the atrex.report/1 JSON");
  d->callback([&] { rc = reduce_cmd(g, red); });

  auto* n = app.add_subcommand(
      "regress",
      "Compare a results folder with baseline nights per (agent, operator, shape); exit 1 on a "
      "regression\n  example: atrex regress --baseline nights/mon nights/tue --current "
      "nights/wed --out /tmp/regress");
  n->add_option("--baseline", reg.baselines, "Baseline nights' results folders (one or more)")
      ->required()
      ->check(CLI::ExistingDirectory);
  n->add_option("--current", reg.current, "The results folder under test")
      ->required()
      ->check(CLI::ExistingDirectory);
  n->add_option("--out", reg.out, "Folder for regress.json, regress.md and regress-junit.xml");
  n->add_option("--alpha", reg.options.alpha, "Significance of the rank test")
      ->check(CLI::Range(1e-9, 0.5))
      ->capture_default_str();
  n->add_option("--min-effect", reg.options.min_effect,
                "Relative slowdown of the median below which nothing is a regression")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  n->add_option("--flaky-spread", reg.options.flaky_spread,
                "Baseline nights' relative spread above which a shape is flaky")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  n->add_option("--bootstrap", reg.options.bootstrap_resamples, "Bootstrap resamples")
      ->check(CLI::Range(100, 1000000))
      ->capture_default_str();
  n->add_flag("--json", g.json, "Print the atrex.regress/1 JSON");
  n->callback([&] { rc = regress_cmd(g, reg); });
}

}  // namespace atrex::cli
