// The join of one trace file: range nesting per thread, runtime call -> framework op, kernel ->
// runtime call (see ingest.h, step 2).
#pragma once

#include <cstdint>
#include <vector>

#include "atrex/ingest/trace.h"

namespace atrex::ingest::detail {

struct FileIndex {
  std::vector<int32_t> parent;                      // per range: enclosing range, -1 at the top
  std::vector<std::vector<uint32_t>> thread_order;  // per thread: ranges by (ts, -dur)
  std::vector<uint32_t> order_pos;                  // per range: its index in thread_order
  std::vector<int32_t> runtime_range;  // per runtime call: its op (External id) or innermost range
  std::vector<int32_t> kernel_runtime;  // per kernel: its runtime call, -1 when none
  std::vector<uint8_t> runtime_is_graph;  // per runtime call: a graph launch
  int64_t ambiguous = 0, by_device_map = 0, by_lag = 0, unlaunched = 0;
};

FileIndex build_index(const TraceFile& file, const StringPool& names);

// Ranges at or under `range` on its thread (itself first), in start order.
template <class F>
void for_each_descendant(const TraceFile& file, const FileIndex& idx, int32_t range, F&& f) {
  const CpuRange& r = file.ranges[range];
  const auto& order = idx.thread_order[r.thread];
  const double end = r.ts_us + r.dur_us + 5e-3;  // join.cpp kEps
  for (size_t i = idx.order_pos[range]; i < order.size(); ++i) {
    const CpuRange& c = file.ranges[order[i]];
    if (c.ts_us > end) break;
    if (c.ts_us + c.dur_us > end) continue;  // overlaps the end: not nested
    if (!f(static_cast<int32_t>(order[i]))) break;
  }
}

}  // namespace atrex::ingest::detail
