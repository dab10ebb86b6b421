// `atrex bench reduce`: the reducer over a synthetic results folder of N atrex.eval/1 records
// (30 operators x their shapes x agents x candidates, one final evaluation per (agent,
// operator)), written by the real writers; prints the time and peak memory of the reduction.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include <fmt/format.h>

#include "atrex/common/clock.h"
#include "atrex/common/wire/eval_record.h"
#include "atrex/common/wire/final_marker.h"
#include "atrex/common/wire/keys.h"
#include "atrex/common/wire/manifest.h"
#include "atrex/scoring/reduce.h"
#include "atrex/scoring/reducer.h"
#include "cli.h"

namespace atrex::cli {
namespace fs = std::filesystem;
namespace {

struct BenchReduceArgs {
  int64_t records = 1'000'000;
  int agents = 6;
  int samples = 10;
  std::string dir;
  bool keep = false;
  bool two_passes = false;
};

// The folder: manifest.json and results.jsonl lines exactly as MemoryResultStore writes them.
Result<int64_t> write_synthetic(const problems::Suite& suite, const BenchReduceArgs& a,
                                const fs::path& dir) {
  Manifest m;
  m.sweep_id = "bench0000000";
  m.name = "bench-reduce";
  m.source = "atrex bench reduce";
  m.suite = suite.dir().string();
  m.device = "synthetic";
  m.hardware.name = "H200-SXM";
  m.hardware.hbm_bytes_per_s = 4.8e12;
  for (const char* p : {"bf16_tc", "fp16_tc", "fp32_strict", "tf32_tc", "fp8_e4m3_tc", "int8_tc",
                        "fp32_simt", "bf16_simt", "fp16_simt"}) {
    m.hardware.p_peak[p] = 989e12;
  }
  for (int i = 0; i < a.agents; ++i) {
    AgentSpec s;
    s.name = fmt::format("agent-{}", i);
    m.agents.push_back(s);
  }
  int64_t shapes_total = 0;
  for (const auto& op : suite.operators()) {
    OperatorPlan p;
    p.name = op.name;
    for (const auto& s : op.shapes) p.shapes.push_back(s.id);
    shapes_total += static_cast<int64_t>(op.shapes.size());
    m.operators.push_back(p);
  }
  m.status = SweepStatus::kComplete;
  m.output = dir.string();
  ATREX_TRY(write_manifest_file(dir, m));
  const int64_t candidates =
      std::max<int64_t>(1, a.records / (shapes_total * static_cast<int64_t>(a.agents)));
  std::ofstream out(dir / "results.jsonl", std::ios::binary);
  int64_t written = 0;
  for (const auto& agent : m.agents) {
    for (const auto& op : suite.operators()) {
      for (int64_t c = 0; c < candidates; ++c) {
        EvalTask task;
        task.task_id = fmt::format("{}-{}-{}", op.name, c + 1 == candidates ? "full" : "quick", c);
        task.sweep_id = m.sweep_id;
        task.operator_name = op.name;
        task.hardware = m.hardware.name;
        task.candidate.agent = agent.name;
        task.candidate.sha256 = std::string(64, 'b');
        task.candidate.backend = Backend::kCuda;
        for (const auto& s : op.shapes) {
          EvalRecord r = new_eval_record(task, s.id, m.device);
          r.status = (c + s.id.size()) % 5 ? EvalStatus::kOk : EvalStatus::kWrongResult;
          r.t_roofline_us = 10;
          if (r.status == EvalStatus::kOk) {
            TimingSummary t;
            for (int k = 0; k < a.samples; ++k) t.samples_us.push_back(20 + (k + c) % 7);
            t.n = a.samples;
            t.time_us_median = 23;
            r.timing = t;
            r.s_j = 10.0 / 23;
          }
          out << Json{{"key", record_key(task.task_id, s.id)}, {"record", to_json(r)}}.dump()
              << '\n';
          ++written;
        }
        if (c + 1 == candidates) {
          FinalMarker f;
          f.agent = agent.name;
          f.op = op.name;
          f.status = FinalStatus::kEvaluated;
          f.task_id = task.task_id;
          for (const auto& s : op.shapes) f.shapes.push_back(s.id);
          out << Json{{"key", final_key(agent.name, op.name)}, {"record", to_json(f)}}.dump()
              << '\n';
        }
      }
    }
  }
  if (!out) return io_error(fmt::format("{}: write failed", (dir / "results.jsonl").string()));
  return written;
}

int run_bench_reduce(const GlobalOptions& g, const BenchReduceArgs& a) {
  auto suite = load_suite(g);
  if (!suite) return fail(suite.error());
  const fs::path dir = a.dir.empty() ? fs::temp_directory_path() / fmt::format(
                                                                       "atrex-bench-reduce-{}",
                                                                       ::getpid())
                                     : fs::path(a.dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  const auto t0 = std::chrono::steady_clock::now();
  auto written = write_synthetic(*suite, a, dir);
  if (!written) return fail(written.error());
  const auto t1 = std::chrono::steady_clock::now();
  const double bytes = static_cast<double>(fs::file_size(dir / "results.jsonl", ec));
  fmt::print("wrote {} records ({:.0f} MB) in {:.1f} s\n", *written, bytes / 1e6,
             std::chrono::duration<double>(t1 - t0).count());
  rusage before{};
  ::getrusage(RUSAGE_SELF, &before);
  scoring::ReduceOptions options;
  if (a.two_passes) options.read_mode = scoring::ReadMode::kTwoPasses;
  scoring::Reducer reducer(*suite, options);
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  const auto t2 = Clock::now();
  if (auto r = reducer.add_folder(dir); !r) return fail(r.error());
  const double read_s = since(t2);
  const auto t3 = Clock::now();
  auto report = reducer.finish(utc_timestamp_now());
  if (!report) return fail(report.error());
  const double score_s = since(t3);
  const auto t4 = Clock::now();
  auto files = scoring::write_report_files(dir / "report", *report);
  if (!files) return fail(files.error());
  const double render_s = since(t4);
  const double s = since(t2);
  rusage after{};
  ::getrusage(RUSAGE_SELF, &after);
  auto cpu_s = [](const rusage& u) {
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  };
  fmt::print(
      "reduced {} records ({} agents x {} operators; reader: {}) into "
      "report.json/.md/.html/junit.xml in {:.2f} s wall, {:.2f} s CPU ({:.0f} records/s, {:.0f} "
      "MB/s); read {:.2f} s, score {:.2f} s, render {:.2f} s; peak RSS {:.0f} MiB (before "
      "reducing {:.0f} MiB)\n",
      *written, a.agents, suite->operators().size(), a.two_passes ? "two passes" : "one pass", s,
      cpu_s(after) - cpu_s(before), static_cast<double>(*written) / s, bytes / 1e6 / s, read_s,
      score_s, render_s, static_cast<double>(after.ru_maxrss) / 1024.0,
      static_cast<double>(before.ru_maxrss) / 1024.0);
  if (!a.keep && a.dir.empty()) fs::remove_all(dir, ec);
  return 0;
}

}  // namespace

void add_bench_reduce_command(CLI::App& bench, GlobalOptions& g, int& rc) {
  static BenchReduceArgs a;
  auto* c = bench.add_subcommand(
      "reduce",
      "The reducer over a synthetic results folder (30 operators x shapes x agents x candidates): "
      "time and peak memory\n  example: atrex bench reduce --records 1000000");
  c->add_option("--records", a.records, "atrex.eval/1 records to write")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1000}, int64_t{100'000'000}));
  c->add_option("--agents", a.agents, "Agents")->capture_default_str()->check(CLI::Range(1, 64));
  c->add_option("--samples", a.samples, "Raw timing samples per record")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  c->add_option("--dir", a.dir, "Folder for the synthetic results (default: a temporary one)");
  c->add_flag("--keep", a.keep, "Keep the temporary folder");
  c->add_flag("--two-passes", a.two_passes,
              "Use the straightforward reader (std::getline, the file twice) the fast one is "
              "checked against");
  c->callback([&] { rc = run_bench_reduce(g, a); });
}

}  // namespace atrex::cli
