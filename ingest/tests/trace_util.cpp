#include "trace_util.h"

#include <zlib.h>

#include <fstream>
#include <stdexcept>

#include <gtest/gtest.h>

namespace atrex::ingest::testing {

TraceBuilder& TraceBuilder::op(const std::string& name, int pid, double ts, double dur, int64_t ext,
                               Json dims, Json types, Json concrete) {
  Json args = {{"External id", ext}};
  if (!dims.is_null()) args["Input Dims"] = dims;
  if (!types.is_null()) args["Input type"] = types;
  if (!concrete.is_null()) args["Concrete Inputs"] = concrete;
  events.push_back({{"ph", "X"}, {"cat", "cpu_op"}, {"name", name}, {"pid", pid}, {"tid", pid},
                    {"ts", ts}, {"dur", dur}, {"args", args}});
  return *this;
}

TraceBuilder& TraceBuilder::annotation(const std::string& name, int pid, double ts, double dur) {
  events.push_back({{"ph", "X"}, {"cat", "user_annotation"}, {"name", name}, {"pid", pid},
                    {"tid", pid}, {"ts", ts}, {"dur", dur}});
  return *this;
}

TraceBuilder& TraceBuilder::module(const std::string& name, int pid, double ts, double dur) {
  events.push_back({{"ph", "X"}, {"cat", "python_function"}, {"name", "nn.Module: " + name},
                    {"pid", pid}, {"tid", pid}, {"ts", ts}, {"dur", dur}});
  return *this;
}

TraceBuilder& TraceBuilder::runtime(const std::string& name, int pid, double ts, int64_t corr,
                                    int64_t ext) {
  Json args = {{"correlation", corr}, {"cbid", 211}};
  if (ext >= 0) args["External id"] = ext;
  events.push_back({{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", name}, {"pid", pid},
                    {"tid", pid}, {"ts", ts}, {"dur", 1.0}, {"args", args}});
  return *this;
}

TraceBuilder& TraceBuilder::kernel(const std::string& name, int device, double ts, double dur,
                                   int64_t corr, int64_t ext) {
  Json args = {{"correlation", corr}, {"device", device}, {"stream", 7}};
  if (ext >= 0) args["External id"] = ext;
  events.push_back({{"ph", "X"}, {"cat", "kernel"}, {"name", name}, {"pid", device}, {"tid", 7},
                    {"ts", ts}, {"dur", dur}, {"args", args}});
  return *this;
}

TraceBuilder& TraceBuilder::raw(Json event) {
  events.push_back(std::move(event));
  return *this;
}

std::string TraceBuilder::text() const {
  return Json{{"schemaVersion", 1}, {"traceEvents", events}}.dump(1);
}

std::filesystem::path temp_dir(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  auto dir = std::filesystem::temp_directory_path() /
             ("atrex-ingest-" + std::to_string(::getpid()) + "-" + info->name() + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

void write_gzip(const std::filesystem::path& p, const std::string& text) {
  gzFile f = gzopen(p.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot write " + p.string());
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
}

std::filesystem::path write(const std::filesystem::path& dir, const std::string& name,
                            const TraceBuilder& b) {
  write_file(dir / name, b.text());
  return dir / name;
}

Result<IngestResult> run(const std::vector<std::filesystem::path>& traces,
                         std::optional<std::filesystem::path> apps, double coverage) {
  IngestOptions o;
  o.traces = traces;
  o.apps_file = apps;
  o.rules_file = ATREX_TEST_INGEST_RULES;
  o.shape_coverage = coverage;
  return ingest(o);
}

}  // namespace atrex::ingest::testing
