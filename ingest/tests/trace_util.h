// Hand-made Kineto traces for the ingest tests.
#pragma once

#include <filesystem>
#include <string>

#include "atrex/common/json_io.h"

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

}  // namespace atrex::ingest::testing
