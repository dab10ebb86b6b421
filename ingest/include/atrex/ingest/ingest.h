// `atrex ingest`: PyTorch-profiler traces -> a problem suite in the Atrex-Bench layout.
//
// 1. read_trace streams each trace (trace.h).
// 2. The join: each GPU kernel to its launching runtime call by `correlation`, keyed per
//    process and device (merged multi-rank traces reuse correlation ids: a process's device is
//    learnt from the ids only one process uses, and by launch-to-kernel lag when every id
//    collides); the runtime call to its framework op by `External id`, else by time nesting on
//    its thread; the op to its enclosing ranges (ops, record_function ranges, nn.Module ranges)
//    by time nesting. A kernel replayed by a CUDA graph carries the graph launch's correlation
//    and is attributed to the graph launch (its op and step marker).
// 3. Families by the rules file (rules.h), shape parameters from the anchor op's Input Dims /
//    Input type / Concrete Inputs; GPU time (sum of kernel durations, µs) per (family, phase,
//    shape). Unmapped kernels are kept and reported, never dropped.
// 4. Phases: the innermost enclosing prefill/decode step marker, else the step's tokens per
//    sequence, else "unknown".
// 5. Weights (the paper's Eq. 3, as issue 18 states it): per application a with card-hours H_a
//    and phase mix pi_{a,p} (apps.yaml, else the traces' own phase split),
//        w_f ∝ Σ_a H_a Σ_p pi_{a,p} · T_{a,f,p} / T_{a,p}
//    with T the GPU time of family f (or of all kernels) in the application's traces in phase p;
//    normalised to sum to 1 over the suite's families.
// 6. The suite: for each family atrex defines natively, the hottest shapes covering
//    `shape_coverage` of the family's shape-resolved GPU time (each validated against the native
//    operator), with analytic roofline counts; plus a coverage report.
#pragma once

#include <array>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/ingest/rules.h"
#include "atrex/ingest/trace.h"

namespace atrex::ingest {

enum Phase : int { kPrefill = 0, kDecode = 1, kUnknownPhase = 2 };
inline constexpr int kNumPhases = 3;
const char* phase_name(int phase);
using PhaseTimes = std::array<double, kNumPhases>;  // µs

// apps.yaml (`version: atrex.ingest-apps/1`): applications, their card-hours and traces.
struct App {
  std::string name;
  double card_hours = 0;
  std::vector<std::string> traces;  // glob patterns on the trace's file name
  std::optional<std::array<double, 2>> phase_share;  // prefill, decode: sums to 1
};
struct Apps {
  std::filesystem::path file;
  std::vector<App> apps;
};
// Strict, kInvalidInput naming file, field and value.
Result<Apps> load_apps(const std::filesystem::path& file);

struct IngestOptions {
  std::vector<std::filesystem::path> traces;
  std::optional<std::filesystem::path> apps_file;  // none: one application, 1 card-hour
  std::filesystem::path rules_file;                // empty: default_rules_file()
  double shape_coverage = 0.9;  // hot shapes cover this share of a family's GPU time
  int max_shapes = 64;          // per operator
  int top_unmapped = 20;
};

struct ShapeTime {
  Json init_kwargs = Json::object();
  Json input_kwargs = Json::object();
  double gpu_us = 0;
  int64_t calls = 0;
  PhaseTimes phase_us{};
};

struct FamilyStats {
  std::string name;
  double gpu_us = 0;
  int64_t kernels = 0;
  PhaseTimes phase_us{};
  std::vector<PhaseTimes> app_phase_us;  // per application
  double no_shape_us = 0;                // mapped, but no shape could be read
  int64_t no_shape_kernels = 0;
  std::string no_shape_reason;  // the commonest reason
  std::map<std::string, ShapeTime> shapes;  // by canonical parameter JSON
  int num_traces = 0;
};

struct UnmappedKernel {
  std::string name;
  double gpu_us = 0;
  int64_t calls = 0;
  std::string example_op;  // the launching op of one call ("" when none)
};

struct TraceSummary {
  std::string path;
  std::string app;
  bool truncated = false;
  std::string truncation;
  uint64_t bytes_read = 0;
  uint64_t repairs = 0;
  uint64_t events = 0;
  uint64_t events_skipped = 0;
  std::string first_skip_reason;
  int64_t kernels = 0;
  double gpu_us = 0;
  int64_t graph_kernels = 0;       // replayed by a CUDA graph (attributed to the launch)
  int64_t unlaunched_kernels = 0;  // no runtime call with their correlation id
  int64_t ambiguous_joins = 0;     // correlation ids used by several processes
  int64_t joins_by_device_map = 0;
  int64_t joins_by_lag = 0;
  int64_t ops_with_shapes = 0;
  PhaseTimes phase_us{};
};

// One operator of the written suite.
struct SuiteOperator {
  std::string name;
  double weight = 0;
  std::string phase;  // "prefill", "decode", "prefill/decode"
  int num_profiles = 0;
  struct Chosen {
    std::string id;
    ShapeTime shape;
    Json roofline;  // atrex.roofline counts in the released roofline.json form
  };
  std::vector<Chosen> shapes;
  double covered_share = 0;  // chosen shapes' GPU time / the family's GPU time
  int dropped_shapes = 0;    // rejected by the native operator's validation
  std::string first_drop_reason;
};

struct IngestResult {
  std::vector<TraceSummary> traces;
  std::vector<std::string> apps;
  double gpu_us = 0;
  int64_t kernels = 0;
  double mapped_us = 0;
  PhaseTimes phase_us{};
  std::map<std::string, FamilyStats> families;
  std::vector<UnmappedKernel> unmapped;  // by GPU time, descending (all of them)
  double unmapped_us = 0;
  std::vector<SuiteOperator> suite;  // by weight, descending
  std::vector<std::string> report_only;  // mapped families kept out of the suite, and why
  std::vector<std::string> warnings;
  std::string rules_file;
};

// Reads, joins, classifies and weighs. Errors: kInvalidInput / kNotFound for a bad trace,
// rules or apps file (naming file, field, value); a trace set with 0 GPU kernels is not an
// error here (the caller reports it).
Result<IngestResult> ingest(const IngestOptions& options);

// Writes DIR/data/operator_importance.json, DIR/data/<op>/{shapes,metadata,roofline}.json,
// DIR/coverage.json (atrex.ingest-coverage/1) and DIR/coverage.md. kInvalidInput when the
// result has no suite operator (the coverage report is still written).
Result<void> write_suite(const IngestResult& result, const std::filesystem::path& dir);

Json coverage_json(const IngestResult& result, int top_unmapped = 20);
std::string coverage_markdown(const IngestResult& result, int top_unmapped = 20);

}  // namespace atrex::ingest

namespace atrex::ingest {

// A synthetic Kineto-like trace for `atrex bench ingest` and the tests: `steps` steps
// alternating prefill / decode record_function markers, each with `layers` layers of
// rms_norm, a GEMM, attention, silu_and_mul (vLLM op names, Input Dims) with their runtime calls
// and kernels; `ranks` processes on as many devices that reuse the same correlation ids (rank r
// starts 0.3 ms after rank r-1). The layer count grows until the file reaches `target_bytes`
// (uncompressed). gzip when `gzip`. Returns the uncompressed bytes written.
struct SyntheticTrace {
  uint64_t target_bytes = 1 << 20;
  int ranks = 1;
  int steps = 4;
  bool gzip = false;
};
Result<uint64_t> write_synthetic_trace(const std::filesystem::path& path, const SyntheticTrace& spec);

}  // namespace atrex::ingest
