// `atrex ingest TRACE... --out DIR` and `atrex bench ingest` (docs/ingest.md).
#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "atrex/ingest/ingest.h"
#include "cli.h"

namespace atrex::cli {
namespace {

namespace fs = std::filesystem;

struct IngestArgs {
  std::vector<std::string> traces;
  std::string apps, rules, out;
  double coverage = 0.9;
  int max_shapes = 64;
  int top_unmapped = 20;
};

int run_ingest(const IngestArgs& a, const GlobalOptions& g) {
  ingest::IngestOptions o;
  for (const auto& t : a.traces) o.traces.emplace_back(t);
  if (!a.apps.empty()) o.apps_file = a.apps;
  o.rules_file = a.rules;
  o.shape_coverage = a.coverage;
  o.max_shapes = a.max_shapes;
  o.top_unmapped = a.top_unmapped;
  auto r = ingest::ingest(o);
  if (!r) return fail(r.error());
  auto written = ingest::write_suite(*r, a.out);
  if (g.json) {
    fmt::print("{}\n", ingest::coverage_json(*r, a.top_unmapped).dump(2));
  } else {
    fmt::print("{} trace(s), {} GPU kernels, {:.3f} ms GPU time; mapped {:.1f}%, unmapped {:.1f}%\n",
               r->traces.size(), r->kernels, r->gpu_us / 1e3,
               r->gpu_us > 0 ? 100 * r->mapped_us / r->gpu_us : 0.0,
               r->gpu_us > 0 ? 100 * r->unmapped_us / r->gpu_us : 0.0);
    for (const auto& t : r->traces) {
      if (t.truncated) fmt::print("  {}: TRUNCATED ({})\n", t.path, t.truncation);
    }
    fmt::print("{:<28} {:>8} {:<15} {:>6} {:>9}\n", "operator", "weight", "phase", "shapes", "covered");
    for (const auto& op : r->suite) {
      fmt::print("{:<28} {:>8.4f} {:<15} {:>6} {:>8.1f}%\n", op.name, op.weight, op.phase,
                 op.shapes.size(), 100 * op.covered_share);
    }
    for (const auto& w : r->warnings) fmt::print("warning: {}\n", w);
  }
  if (r->kernels == 0) {
    return fail(Error{ErrorCode::kInvalidInput,
                      fmt::format("the traces hold 0 GPU kernels (no kernel, gpu_memcpy or gpu_memset "
                                  "events; was the profiler run with ProfilerActivity.CUDA?): no suite "
                                  "written; coverage report in {}",
                                  (fs::path(a.out) / "coverage.md").string())});
  }
  if (!written) return fail(written.error());
  if (!g.json) {
    fmt::print("suite written to {} (coverage: {}); `atrex --suite {} problems list` lists it\n",
               a.out, (fs::path(a.out) / "coverage.md").string(), a.out);
  }
  return 0;
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is KiB on Linux
}

int run_bench(double size_mb, bool gzip, const std::string& keep) {
  fs::path dir = fs::temp_directory_path() / fmt::format("atrex-bench-ingest-{}", ::getpid());
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path trace = keep.empty() ? dir / (gzip ? "bench.json.gz" : "bench.json") : fs::path(keep);
  ingest::SyntheticTrace spec;
  spec.target_bytes = static_cast<uint64_t>(size_mb * 1e6);
  spec.ranks = 2;
  spec.gzip = gzip;
  const double rss_before = peak_rss_mib();
  auto t0 = std::chrono::steady_clock::now();
  auto bytes = ingest::write_synthetic_trace(trace, spec);
  if (!bytes) return fail(bytes.error());
  const double gen_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto file_bytes = fs::file_size(trace, ec);
  ingest::IngestOptions o;
  o.traces = {trace};
  t0 = std::chrono::steady_clock::now();
  const double cpu0 = cpu_seconds();
  auto r = ingest::ingest(o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r) return fail(r.error());
  auto w = ingest::write_suite(*r, dir / "suite");
  if (!w) return fail(w.error());
  const double cpu = cpu_seconds() - cpu0;
  const double rss = peak_rss_mib();
  fmt::print("bench ingest: synthetic 2-rank trace {:.1f} MB JSON ({:.1f} MB on disk{}), written in {:.1f} s\n",
             static_cast<double>(*bytes) / 1e6, static_cast<double>(file_bytes) / 1e6, gzip ? ", gzip" : "",
             gen_s);
  fmt::print("  events {}  kernels {}  mapped {:.1f}%  correlation ids reused across ranks: {}\n",
             r->traces[0].events, r->kernels, 100 * r->mapped_us / r->gpu_us, r->traces[0].ambiguous_joins);
  fmt::print("  ingest + suite: {:.2f} s wall, {:.2f} s CPU  = {:.0f} MB/s of JSON (wall; {:.0f} MB/s CPU)\n", s,
             cpu, static_cast<double>(*bytes) / 1e6 / s, static_cast<double>(*bytes) / 1e6 / cpu);
  fmt::print("  peak RSS {:.0f} MiB (before: {:.0f} MiB; {:.2f} bytes of memory per byte of JSON)\n", rss,
             rss_before, (rss - rss_before) * 1048576.0 / static_cast<double>(*bytes));
  if (keep.empty()) fs::remove_all(dir, ec);
  return 0;
}

}  // namespace

void add_ingest_commands(CLI::App& app, GlobalOptions& g, int& rc) {
  auto a = std::make_shared<IngestArgs>();
  auto* cmd = app.add_subcommand(
      "ingest",
      "A problem suite in the Atrex-Bench layout from PyTorch-profiler traces (Kineto JSON, plain "
      "or .gz): families, hot shapes, Eq. 3 weights, coverage report (docs/ingest.md)");
  cmd->add_option("traces", a->traces, "Trace files (.json or .json.gz)")->required();
  cmd->add_option("--apps", a->apps,
                  "apps.yaml: applications, card-hours, phase mix and their traces (default: one "
                  "application, the traces' own phase mix)");
  cmd->add_option("--rules", a->rules, "rules.yaml (default: the shipped rules)");
  cmd->add_option("--out", a->out, "Suite folder to write")->required();
  cmd->add_option("--shape-coverage", a->coverage,
                  "Hot shapes cover this share of a family's GPU time")
      ->check(CLI::Range(1e-6, 1.0))
      ->capture_default_str();
  cmd->add_option("--max-shapes", a->max_shapes, "At most this many shapes per operator")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--top-unmapped", a->top_unmapped, "Unmapped kernels listed in the report")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  cmd->add_flag("--json", g.json, "Print the coverage report as JSON (atrex.ingest-coverage/1)");
  cmd->callback([a, &g, &rc] { rc = run_ingest(*a, g); });

  CLI::App* bench = app.get_subcommand("bench");
  auto size = std::make_shared<double>(100);
  auto gzip = std::make_shared<bool>(false);
  auto keep = std::make_shared<std::string>();
  auto* b = bench->add_subcommand("ingest",
                                  "Ingest a synthetic 2-rank trace: seconds, MB/s and peak memory");
  b->add_option("--size-mb", *size, "Trace size, MB of JSON")
      ->check(CLI::Range(1, 100000))->capture_default_str();
  b->add_flag("--gzip", *gzip, "Write and read the trace gzipped");
  b->add_option("--keep", *keep, "Write the trace here and keep it");
  b->callback([size, gzip, keep, &rc] { rc = run_bench(*size, *gzip, *keep); });
}

}  // namespace atrex::cli
