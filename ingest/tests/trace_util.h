// Hand-made Kineto traces for the ingest tests.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "atrex/common/json_io.h"
#include "atrex/ingest/ingest.h"

namespace atrex::ingest::testing {

class TraceBuilder {
 public:
  TraceBuilder& op(const std::string& name, int pid, double ts, double dur, int64_t ext,
                   Json dims = nullptr, Json types = nullptr, Json concrete = nullptr);
  TraceBuilder& annotation(const std::string& name, int pid, double ts, double dur);
  TraceBuilder& module(const std::string& name, int pid, double ts, double dur);
  TraceBuilder& runtime(const std::string& name, int pid, double ts, int64_t corr, int64_t ext = -1);
  TraceBuilder& kernel(const std::string& name, int device, double ts, double dur, int64_t corr,
                       int64_t ext = -1);
  TraceBuilder& raw(Json event);
  std::string text() const;
  Json events = Json::array();
};

// A fresh folder under the test temp dir, removed by the OS's tmp cleanup.
std::filesystem::path temp_dir(const std::string& name);
void write_file(const std::filesystem::path& p, const std::string& text);
void write_gzip(const std::filesystem::path& p, const std::string& text);
// Writes `b` as dir/name and returns that path.
std::filesystem::path write(const std::filesystem::path& dir, const std::string& name,
                            const TraceBuilder& b);

// `atrex ingest` of `traces` with the shipped rules (ingest/rules/default.yaml), an optional
// apps file and the hot-shape coverage share.
Result<IngestResult> run(const std::vector<std::filesystem::path>& traces,
                         std::optional<std::filesystem::path> apps = {}, double coverage = 0.9);

}  // namespace atrex::ingest::testing
