// Results folders for the reducer's tests, written by the real writers (write_manifest_file,
// MemoryResultStore, to_json of atrex.eval/1 and atrex.final/1), never hand-typed JSON.
#pragma once

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "atrex/common/result_store.h"
#include "atrex/common/sample_stats.h"
#include "atrex/common/wire/eval_record.h"
#include "atrex/common/wire/final_marker.h"
#include "atrex/common/wire/keys.h"
#include "atrex/common/wire/manifest.h"
#include "atrex/problems/hardware.h"
#include "atrex/problems/roofline.h"
#include "atrex/problems/suite.h"

namespace atrex::scoring::testing {

// One shape's outcome in a fixture: timed samples around `time_us` (relative noise `noise`)
// when ok.
struct FixtureShape {
  std::string shape_id;
  double time_us = 100;
  EvalStatus status = EvalStatus::kOk;
  double noise = 0.02;
  std::optional<double> dsl_share;
  int samples = 60;
  std::string file_name = "candidate.cpp";  // a ".py" one: a Python candidate
};

class FixtureSweep {
 public:
  FixtureSweep(const problems::Suite& suite, std::string sweep_id, std::string name,
               std::vector<std::string> agents, std::vector<std::string> ops)
      : suite_(suite) {
    m_.sweep_id = std::move(sweep_id);
    m_.name = std::move(name);
    m_.source = "fixture";
    m_.suite = suite.dir().string();
    m_.device = "fixture device";
    auto hw = problems::load_hardware_profile(suite.dir() / "configs" / "hardware" / "H20.yaml");
    hw_ = *hw;
    m_.hardware.name = hw_.name;
    m_.hardware.p_peak = hw_.p_peak_flops_per_s;
    m_.hardware.hbm_bytes_per_s = hw_.hbm_bytes_per_s;
    for (auto& a : agents) {
      AgentSpec s;
      s.name = a;
      m_.agents.push_back(s);
    }
    for (auto& op : ops) {
      OperatorPlan p;
      p.name = op;
      for (const auto& sh : suite.find(op)->shapes) p.shapes.push_back(sh.id);
      m_.operators.push_back(p);
    }
    m_.status = SweepStatus::kComplete;
  }
  Manifest& manifest() { return m_; }

  // The atrex.eval/1 record of one shape of `agent`'s final evaluation of `op`.
  EvalRecord record(const std::string& agent, const std::string& op, const FixtureShape& fs,
                    uint64_t seed) const {
    EvalTask task;
    task.task_id = task_id(agent, op);
    task.sweep_id = m_.sweep_id;
    task.operator_name = op;
    task.hardware = m_.hardware.name;
    task.purpose = EvalPurpose::kFull;
    task.candidate.agent = agent;
    task.candidate.sha256 = std::string(64, 'a');
    task.candidate.file_name = fs.file_name;
    EvalRecord r = new_eval_record(task, fs.shape_id, m_.device);
    r.status = fs.status;
    r.seeds_passed = fs.status == EvalStatus::kOk ? 5 : 0;
    const problems::Shape* shape = suite_.find(op)->find_shape(fs.shape_id);
    auto counts = problems::roofline_counts(suite_, op, *shape, RooflineSource::kReleased);
    r.t_roofline_us = problems::roofline_time(*counts, hw_)->roofline_s * 1e6;
    if (fs.status != EvalStatus::kOk) {
      r.error = "fixture failure";
      return r;
    }
    TimingSummary t;
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> noise(1.0, fs.noise);
    for (int i = 0; i < fs.samples; ++i) t.samples_us.push_back(fs.time_us * noise(rng));
    std::vector<double> sorted = t.samples_us;
    std::sort(sorted.begin(), sorted.end());
    t.n = fs.samples;
    t.time_us_median = stats::quantile_sorted(sorted, 0.5);
    t.time_us_p25 = stats::quantile_sorted(sorted, 0.25);
    t.time_us_p75 = stats::quantile_sorted(sorted, 0.75);
    t.time_us_iqr = t.time_us_p75 - t.time_us_p25;
    t.time_us_min = sorted.front();
    t.time_us_mean = stats::mean(sorted);
    t.relative_standard_error = stats::relative_standard_error(sorted);
    t.method = "steady_clock_llc_flush";
    r.timing = t;
    r.s_j = std::min(1.0, r.t_roofline_us / t.time_us_median);
    r.above_roofline = r.t_roofline_us > t.time_us_median;
    r.dsl_share = fs.dsl_share;
    return r;
  }

  // Stores `agent`'s final evaluation of `op` (records, then the marker, as the worker does).
  void evaluated(const std::string& agent, const std::string& op,
                 const std::vector<FixtureShape>& shapes, uint64_t seed = 1) {
    FinalMarker fin;
    fin.agent = agent;
    fin.op = op;
    fin.status = FinalStatus::kEvaluated;
    fin.task_id = task_id(agent, op);
    fin.generations = 1;
    fin.iterations_used = 1;
    fin.quick_score = 0.1;
    fin.usage.prompt_tokens = 1000;
    fin.usage.completion_tokens = 200;
    fin.usage.cost_usd = 0.01;
    fin.usage.requests = 2;
    for (const auto& s : shapes) {
      fin.shapes.push_back(s.shape_id);
      entries_.emplace_back(record_key(fin.task_id, s.shape_id),
                            to_json(record(agent, op, s, seed++)));
    }
    entries_.emplace_back(final_key(agent, op), to_json(fin));
  }
  void failed(const std::string& agent, const std::string& op, const std::string& why) {
    FinalMarker fin;
    fin.agent = agent;
    fin.op = op;
    fin.status = FinalStatus::kNoCorrectCandidate;
    fin.error = why;
    entries_.emplace_back(final_key(agent, op), to_json(fin));
  }
  // An agent iteration's quick evaluation: a record the report must not score.
  void quick(const std::string& agent, const std::string& op, const FixtureShape& s) {
    EvalRecord r = record(agent, op, s, 99);
    r.task_id = op + "-quick-" + agent;
    entries_.emplace_back(record_key(r.task_id, s.shape_id), to_json(r));
  }

  void write(const std::filesystem::path& dir) {
    std::filesystem::create_directories(dir);
    m_.output = dir.string();
    (void)write_manifest_file(dir, m_);
    auto store = MemoryResultStore::open_jsonl(dir / "results.jsonl");
    for (const auto& [k, v] : entries_) (void)(*store)->put(k, v);
  }
  void fill(MemoryResultStore& s) const {
    for (const auto& [k, v] : entries_) (void)s.put(k, v);
  }

  std::string task_id(const std::string& agent, const std::string& op) const {
    return op + "-full-" + agent + "-" + m_.sweep_id;
  }

 private:
  const problems::Suite& suite_;
  problems::HardwareProfile hw_;
  Manifest m_;
  std::vector<std::pair<std::string, Json>> entries_;
};

}  // namespace atrex::scoring::testing
