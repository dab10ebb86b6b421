// The Atrex-Bench problem suite as released (alibaba/atrex-bench, Apache-2.0):
//   data/operator_importance.json        operators, importance_score, phase, num_profiles
//   data/<op>/shapes.json                hot shapes: id -> {init_kwargs, input_kwargs}
//   data/<op>/metadata.json   (hidden)   provenance, dtypes, production µs
//   data/<op>/roofline.json   (hidden)   per shape W (FLOPs by dtype), Q (read/write bytes)
//   configs/hardware/*.yaml              hardware profiles (see hardware.h)
// Hidden files never reach an agent: OperatorInfo (agent-visible) and HiddenData (evaluator)
// are separate types, and only the evaluator side (runner, scoring) reads the latter.
// Weights are importance_score normalised to sum to 1 (paper §3; S_agg = Σ w_i S_i).
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"

namespace atrex::problems {

// One hot shape of an operator, keyed by its Atrex shape id ("0", "1", ...).
struct Shape {
  std::string id;
  Json init_kwargs = Json::object();   // constructor arguments of the reference Model
  Json input_kwargs = Json::object();  // arguments of the input generator
  Json params = Json::object();        // both merged: what a candidate receives
  // A reduced shape (operator.h ReducedShape, id "reduced-<k>"): atrex's own, not a hot shape of
  // the release; its T_roofline comes from the analytic counts.
  bool reduced = false;
};

// Agent-visible facts about one operator.
struct OperatorInfo {
  std::string name;
  double importance_score = 0;  // as released
  double weight = 0;            // importance_score / Σ importance_score
  std::string phase;            // "prefill", "decode", "prefill/decode"
  int num_profiles = 0;
  std::vector<Shape> shapes;  // in numeric id order
  // The native operator's reduced shapes ("reduced-0", ...): never in `shapes`, never selected
  // by `all`, only by a shape rule that asks for them (shape_select.h) or by id.
  std::vector<Shape> reduced_shapes;
  // A hot shape or a reduced one by id; nullptr when neither.
  const Shape* find_shape(std::string_view id) const;
};

// Released roofline counts for one shape (roofline.json, traced by Atrex with FlopCounterMode).
struct RooflineCounts {
  std::map<std::string, double> w_flops_by_dtype;  // "bf16" -> FLOPs, ...
  double q_read_bytes = 0;
  double q_write_bytes = 0;
};

// Evaluator-only data of one operator (metadata.json + roofline.json).
struct HiddenData {
  Json metadata = Json::object();
  std::map<std::string, RooflineCounts> roofline;  // by shape id
};

class Suite {
 public:
  // Loads and validates a suite folder in the released layout. Errors name the file, the
  // field and the value (kInvalidInput), or the missing file (kNotFound).
  static Result<Suite> load(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const std::vector<OperatorInfo>& operators() const {
    return operators_;
  }  // by weight, descending
  const OperatorInfo* find(std::string_view name) const;
  // Like find, but a kNotFound error that lists the known operators.
  Result<const OperatorInfo*> require(std::string_view name) const;
  size_t num_shapes() const;

  // Evaluator side only.
  const HiddenData& hidden(std::string_view op) const;
  Result<RooflineCounts> roofline(std::string_view op, std::string_view shape_id) const;

 private:
  std::filesystem::path dir_;
  std::vector<OperatorInfo> operators_;
  std::map<std::string, HiddenData, std::less<>> hidden_;
};

// The suite in `dir`, or the bundled one when `dir` is empty or holds no suite on this host (a
// sweep's worker on another machine than the one that resolved it).
Result<Suite> load_suite_or_bundled(const std::filesystem::path& dir);

// Where the bundled suite is: $ATREX_SUITE_DIR, else <exe>/../share/atrex/problems/atrex-bench
// (build tree and install), else the source tree.
std::filesystem::path default_suite_dir();
// Folder of atrex's own hardware profiles (H200/H100 datasheet, measured-H200).
std::filesystem::path default_hardware_dir();
// The running executable's folder (/proc/self/exe).
std::filesystem::path executable_dir();

}  // namespace atrex::problems
