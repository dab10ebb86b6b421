// The streaming reducer (DESIGN.md §2 "results stream -> reducer"; `atrex reduce`, `atrex
// report`): from one or more sweeps' stored results to one atrex.report/1 model.
//
// Sources: a results folder (manifest.json + results.jsonl, read once: the atrex.final/1 markers
// are taken as they come, of every other line only its offset is kept, then only the atrex.eval/1
// records of the final evaluations the markers name are read back and parsed, so memory holds
// the report model, the final records and 16 bytes per line, never the whole file), a live sweep in
// Redis (its manifest and result keys), or any ResultStore with its manifest. Several sources
// merge: entries are keyed (task id + shape, or final/<agent>/<op>) and the first one read wins,
// so the same sweep given twice (a folder and its Redis, a copied folder) is counted once and
// its duplicates are counted in the sweep's summary. Sweeps that share an agent name have their
// agents named "<agent>@<sweep name>".
//
// Errors (kInvalidInput, exit code 2), each naming file:line and the field: a line that is not
// {"key": ..., "record": ...}, a marker or a final record that is not a valid atrex.final/1 /
// atrex.eval/1, a record whose task id or shape disagrees with its key. A malformed LAST line
// (a writer killed mid-line) is skipped with a warning instead. kNotFound: no manifest.json.
// Not thread-safe.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/redis/endpoint.h"
#include "atrex/common/result_store.h"
#include "atrex/common/wire/eval_record.h"
#include "atrex/common/wire/final_marker.h"
#include "atrex/common/wire/manifest.h"
#include "atrex/problems/suite.h"
#include "atrex/scoring/report.h"

namespace atrex::scoring {

// How a results folder's results.jsonl is read. Both give the same report (a test compares
// them): kOnePass reads the file once (8 MiB blocks, no per-line allocation) and reads back
// only the final evaluations' lines by offset; kTwoPasses is the straightforward reader
// (std::getline, twice), kept as its reference.
enum class ReadMode { kOnePass, kTwoPasses };

struct ReduceOptions {
  double dsl_threshold = 0.9;  // a correct candidate under this target-DSL share is a fallback
  std::function<void(const std::string&)> warn;  // each warning also goes into Report::warnings
  // Bytes of results.jsonl read since the last call (each folder's file counts once), called
  // every few MiB and at the end: a progress meter's input.
  std::function<void(int64_t bytes)> progress;
  ReadMode read_mode = ReadMode::kOnePass;
};

// What the reducer kept of one sweep: its manifest and every (agent, operator)'s final marker
// and final-evaluation records (regression comparison reads these).
struct ReducedSweep {
  Manifest manifest;
  SweepSummary summary;
  std::map<std::pair<std::string, std::string>, FinalMarker> finals;  // (agent, op)
  std::map<std::string, std::vector<EvalRecord>> records;             // task id -> records
  std::set<std::string, std::less<>> wanted_tasks;                    // final evaluations' ids
  // The final records of (agent, op) in the marker's shape order (missing shapes left out).
  std::vector<EvalRecord> final_records(const std::string& agent, const std::string& op) const;
};

class Reducer {
 public:
  Reducer(const problems::Suite& suite, ReduceOptions options = {});

  Result<void> add_folder(const std::filesystem::path& dir);
  // A live (or finished) cluster sweep: kUnavailable when Redis does not answer, kNotFound when
  // it holds no such sweep.
  Result<void> add_redis(const RedisEndpoint& redis, const std::string& sweep_id);
  Result<void> add_store(const Manifest& manifest, ResultStore& store, const std::string& source);

  const std::vector<std::unique_ptr<ReducedSweep>>& sweeps() const { return sweeps_; }
  const std::vector<std::string>& warnings() const { return warnings_; }

  // The report of everything added so far.
  Result<Report> finish(const std::string& created_at) const;

 private:
  ReducedSweep& sweep_for(const Manifest& manifest, const std::string& source);
  void warn(std::string message);
  Result<void> add_jsonl_pass(ReducedSweep& s, const std::filesystem::path& file, bool finals);
  Result<void> add_jsonl_one_pass(ReducedSweep& s, const std::filesystem::path& file);
  // One line of results.jsonl in the finals pass (markers) or the records pass (the final
  // evaluations' records): parsed, checked, de-duplicated and kept, or skipped.
  Result<void> take_line(ReducedSweep& s, std::string_view line,
                         const std::filesystem::path& file, int64_t line_no, bool last,
                         bool finals);
  void add_final(ReducedSweep& s, FinalMarker m);
  void add_record(ReducedSweep& s, EvalRecord r);

  const problems::Suite& suite_;
  ReduceOptions options_;
  std::vector<std::unique_ptr<ReducedSweep>> sweeps_;
  std::set<std::string> seen_keys_;  // "<sweep id>\n<key>" of every entry taken
  std::vector<std::string> warnings_;
};

// Adds baseline columns to `report` from `baseline` (another report: reference kernels, a
// previous night): per operator the baseline's best S_i over its agents, per shape the time of
// that best agent's candidate.
void apply_baseline(Report& report, const Report& baseline, const std::string& label,
                    const std::string& source);

}  // namespace atrex::scoring
