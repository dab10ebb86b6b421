// PyTorch-profiler traces (Kineto's Chrome trace JSON, plain or gzip), read as a stream.
//
// The reader never holds the file as one JSON document: nlohmann_json's SAX interface walks the
// bytes (zlib's gzread decompresses, and reads a plain file as is) and keeps a compact record
// per event that the join needs, with names and input shapes interned. Memory is therefore
// proportional to the number of events kept (about 60 bytes each), not to the file's text.
//
// Events kept (Kineto's categories, PyTorch profiler docs "Chrome trace format"):
//   cpu_op, user_annotation, python_function "nn.Module: ..."   -> CpuRange (ph "X", µs)
//   cuda_runtime, cuda_driver (and hip_*)  with args.correlation -> RuntimeCall
//   kernel, gpu_memcpy, gpu_memset                                -> GpuKernel
// cpu_op args used: "External id", "Input Dims", "Input type", "Concrete Inputs" (record_shapes).
// GPU args used: "correlation", "External id", "device", "stream".
//
// A trace cut short (a truncated file, a missing final `}`, a gzip stream that ends early)
// keeps every event completed before the cut and is marked `truncated` with the reason. Bytes
// that JSON forbids inside strings (invalid escapes such as "\q", control characters, ill-formed
// UTF-8, lone surrogates) are repaired on the way in and counted, since profilers copy kernel
// and op names verbatim. A file that is not a trace at all (no event before the first error,
// no `traceEvents`) is kInvalidInput naming the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "atrex/common/error.h"

namespace atrex::ingest {

// Strings interned once (kernel names repeat tens of thousands of times in a trace).
class StringPool {
 public:
  uint32_t intern(std::string_view s);
  const std::string& get(uint32_t id) const { return strings_[id]; }
  size_t size() const { return strings_.size(); }

 private:
  std::vector<std::string> strings_;
  std::unordered_map<std::string, uint32_t> index_;
};

// record_shapes data of one op call: per input, its dims (empty for a scalar or None; the
// first tensor's dims for a tensor list), its type ("c10::BFloat16", "float", "Scalar", ...)
// and its concrete value as the profiler printed it ("" when none).
struct OpInputs {
  std::vector<std::vector<int64_t>> dims;
  std::vector<std::string> types;
  std::vector<std::string> concrete;
};

enum class RangeKind : uint8_t { kOp, kAnnotation, kModule };

// A CPU-side range: an op call, a record_function range or an nn.Module range.
struct CpuRange {
  uint32_t name = 0;    // StringPool id
  uint32_t thread = 0;  // TraceFile::threads index
  RangeKind kind = RangeKind::kOp;
  int32_t inputs = -1;  // TraceFile::inputs index, -1 without record_shapes data
  double ts_us = 0;
  double dur_us = 0;
  int64_t external_id = -1;
};

// A CUDA runtime/driver call with a correlation id (cudaLaunchKernel, cudaGraphLaunch, ...).
struct RuntimeCall {
  uint32_t name = 0;
  uint32_t thread = 0;
  double ts_us = 0;
  double dur_us = 0;
  int64_t correlation = -1;
  int64_t external_id = -1;
};

enum class GpuKind : uint8_t { kKernel, kMemcpy, kMemset };

// A GPU activity record. `device` is args.device, else the event's pid when numeric.
struct GpuKernel {
  uint32_t name = 0;
  GpuKind kind = GpuKind::kKernel;
  int32_t device = -1;
  int32_t stream = -1;
  double ts_us = 0;
  double dur_us = 0;
  int64_t correlation = -1;
  int64_t external_id = -1;
};

struct ThreadKey {
  uint32_t pid = 0;  // StringPool ids of the pid / tid as written
  uint32_t tid = 0;
};

struct TraceFile {
  std::filesystem::path path;
  uint64_t bytes_read = 0;  // decompressed bytes parsed
  bool truncated = false;
  std::string truncation;  // why and where ("unexpected end of input at byte 123")
  uint64_t repairs = 0;    // invalid string bytes/escapes repaired
  uint64_t events_seen = 0;
  uint64_t events_skipped = 0;  // malformed events (e.g. no ts): counted, not kept
  std::string first_skip_reason;
  int rank = -1;  // distributedInfo.rank when present
  std::vector<ThreadKey> threads;
  std::vector<CpuRange> ranges;
  std::vector<RuntimeCall> runtime;
  std::vector<GpuKernel> kernels;
  std::vector<OpInputs> inputs;  // interned by content
};

// All traces of one ingest share one name pool.
struct TraceSet {
  StringPool names;
  std::vector<TraceFile> files;
};

// Streams `path` into a new TraceFile of `set`. kInvalidInput (naming the file) when it is not
// a trace; kNotFound when it does not exist; a trace cut short is not an error (`truncated`).
Result<void> read_trace(const std::filesystem::path& path, TraceSet& set);

}  // namespace atrex::ingest
