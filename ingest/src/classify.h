// Rules applied to one joined trace file: family, anchor, shape parameters and phase per kernel.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "atrex/common/json_io.h"
#include "atrex/ingest/ingest.h"
#include "join.h"

namespace atrex::ingest::detail {

struct Shape {
  bool ok = false;
  Json init = Json::object();
  Json input = Json::object();
  Json hidden = Json::object();
  std::string key;     // canonical text of init + input
  std::string reason;  // why there is no shape
};

struct KernelClass {
  int rule = -1;  // -1: unmapped
  const Shape* shape = nullptr;
  int phase = kUnknownPhase;
  int32_t launch_op = -1;  // innermost op of the launch, for the unmapped report
};

class Classifier {
 public:
  Classifier(const Rules& rules, const StringPool& names);
  // Per-file caches are reset by begin_file.
  void begin_file(const TraceFile& file, const FileIndex& idx);
  KernelClass classify(uint32_t kernel);

 private:
  int8_t match(const Pattern& p, int slot, uint32_t name);
  // `anchor`: the op (or scope) parameters are read from; `root`: where `from` searches.
  const Shape& shape_for(int rule, int32_t anchor, int32_t root);
  int phase_for(int32_t range);
  int step_phase(int32_t step);
  std::vector<int32_t> chain_of(int32_t range) const;

  std::vector<bool> uses_from_;  // per rule: some source reads through `from`
  const Rules& rules_;
  const StringPool& names_;
  const TraceFile* file_ = nullptr;
  const FileIndex* idx_ = nullptr;
  // match cache: pattern slot (rule * 4 + field, or phase slots) x name id -> -1 unknown, 0, 1
  std::vector<std::vector<int8_t>> cache_;
  std::unordered_map<uint64_t, Shape> shapes_;  // (rule, anchor) -> shape
  std::unordered_map<int32_t, int> phases_;     // range -> phase
  std::unordered_map<int32_t, int> steps_;      // step range -> phase
};

// Evaluates one parameter source on an op's inputs. Exposed for tests.
Result<Json> eval_source(const ParamSource& src, const OpInputs& in, const std::string& op_name);

// "c10::BFloat16" -> "bf16", ...; unknown types verbatim.
std::string dtype_name(const std::string& profiler_type);

}  // namespace atrex::ingest::detail
