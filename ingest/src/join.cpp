#include "join.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <unordered_map>

namespace atrex::ingest::detail {
namespace {

// Profilers write µs with ns fractions (about 1e-3 µs of double resolution at 5e12 µs since
// boot): a child may end a few ns past its parent in the printed numbers.
constexpr double kEps = 5e-3;

bool contains(const CpuRange& outer, double ts, double end) {
  return ts >= outer.ts_us - kEps && end <= outer.ts_us + outer.dur_us + kEps;
}

// Range nesting and runtime -> innermost enclosing range, one sweep per thread.
void nest(const TraceFile& file, FileIndex& idx) {
  const size_t nthreads = file.threads.size();
  idx.thread_order.assign(nthreads, {});
  std::vector<std::vector<uint32_t>> runtime_by_thread(nthreads);
  for (uint32_t i = 0; i < file.ranges.size(); ++i) idx.thread_order[file.ranges[i].thread].push_back(i);
  for (uint32_t i = 0; i < file.runtime.size(); ++i) runtime_by_thread[file.runtime[i].thread].push_back(i);
  idx.parent.assign(file.ranges.size(), -1);
  idx.order_pos.assign(file.ranges.size(), 0);
  idx.runtime_range.assign(file.runtime.size(), -1);
  for (size_t t = 0; t < nthreads; ++t) {
    auto& order = idx.thread_order[t];
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      const CpuRange& x = file.ranges[a];
      const CpuRange& y = file.ranges[b];
      if (x.ts_us != y.ts_us) return x.ts_us < y.ts_us;
      if (x.dur_us != y.dur_us) return x.dur_us > y.dur_us;
      if (x.kind != y.kind) return x.kind > y.kind;  // module, then annotation, then op
      return a < b;
    });
    for (size_t i = 0; i < order.size(); ++i) idx.order_pos[order[i]] = static_cast<uint32_t>(i);
    auto& calls = runtime_by_thread[t];
    std::sort(calls.begin(), calls.end(), [&](uint32_t a, uint32_t b) {
      return file.runtime[a].ts_us < file.runtime[b].ts_us;
    });
    std::vector<uint32_t> stack;
    size_t ci = 0;
    auto place_call = [&](uint32_t c) {
      const double ts = file.runtime[c].ts_us;
      while (!stack.empty() && !contains(file.ranges[stack.back()], ts, ts)) stack.pop_back();
      idx.runtime_range[c] = stack.empty() ? -1 : static_cast<int32_t>(stack.back());
    };
    for (uint32_t r : order) {
      const CpuRange& range = file.ranges[r];
      while (ci < calls.size() && file.runtime[calls[ci]].ts_us < range.ts_us) place_call(calls[ci++]);
      while (!stack.empty() &&
             !contains(file.ranges[stack.back()], range.ts_us, range.ts_us + range.dur_us)) {
        stack.pop_back();
      }
      idx.parent[r] = stack.empty() ? -1 : static_cast<int32_t>(stack.back());
      stack.push_back(r);
    }
    while (ci < calls.size()) place_call(calls[ci++]);
  }
}

// Runtime call -> the op with its External id in the same process, when there is one.
void link_external_ids(const TraceFile& file, FileIndex& idx) {
  std::unordered_map<uint64_t, int32_t> by_ext;  // (pid, external id) -> range
  auto key = [](uint32_t pid, int64_t ext) {
    return (static_cast<uint64_t>(pid) << 40) ^ static_cast<uint64_t>(ext);
  };
  for (uint32_t i = 0; i < file.ranges.size(); ++i) {
    const CpuRange& r = file.ranges[i];
    if (r.external_id < 0 || r.kind == RangeKind::kModule) continue;
    // The innermost range with an id wins: the deeper op is the one that launched.
    auto [it, fresh] = by_ext.emplace(key(file.threads[r.thread].pid, r.external_id), i);
    if (!fresh && file.ranges[it->second].dur_us > r.dur_us) it->second = static_cast<int32_t>(i);
  }
  for (uint32_t c = 0; c < file.runtime.size(); ++c) {
    const RuntimeCall& call = file.runtime[c];
    if (call.external_id < 0) continue;
    auto it = by_ext.find(key(file.threads[call.thread].pid, call.external_id));
    if (it != by_ext.end()) idx.runtime_range[c] = it->second;
  }
}

struct PairScore {
  int64_t violations = 0;  // kernel before its launch: impossible for a true pair
  double lag_us = 0;
  int64_t n = 0;
};

// Kernel -> runtime call by correlation id, per process and device (see ingest.h).
void correlate(const TraceFile& file, FileIndex& idx) {
  std::unordered_map<int64_t, std::vector<uint32_t>> by_corr;
  for (uint32_t c = 0; c < file.runtime.size(); ++c) by_corr[file.runtime[c].correlation].push_back(c);
  idx.kernel_runtime.assign(file.kernels.size(), -1);
  auto pid_of = [&](uint32_t call) { return file.threads[file.runtime[call].thread].pid; };
  std::map<std::pair<uint32_t, int32_t>, int64_t> votes;  // (pid, device) -> unambiguous pairs
  std::vector<uint32_t> ambiguous;
  for (uint32_t k = 0; k < file.kernels.size(); ++k) {
    auto it = by_corr.find(file.kernels[k].correlation);
    if (file.kernels[k].correlation < 0 || it == by_corr.end()) {
      ++idx.unlaunched;
      continue;
    }
    if (it->second.size() == 1) {
      idx.kernel_runtime[k] = static_cast<int32_t>(it->second[0]);
      ++votes[{pid_of(it->second[0]), file.kernels[k].device}];
    } else {
      ambiguous.push_back(k);
    }
  }
  idx.ambiguous = static_cast<int64_t>(ambiguous.size());
  if (ambiguous.empty()) return;
  // The device each process drives: learnt from unambiguous pairs, else from the ambiguous ones
  // by causality (a kernel never starts before its launch) and the smallest launch lag.
  std::map<uint32_t, int32_t> device_of;
  std::map<uint32_t, int64_t> best_votes;
  for (const auto& [pd, n] : votes) {
    if (n > best_votes[pd.first]) {
      best_votes[pd.first] = n;
      device_of[pd.first] = pd.second;
    }
  }
  std::map<std::pair<uint32_t, int32_t>, PairScore> scores;
  for (uint32_t k : ambiguous) {
    const GpuKernel& kern = file.kernels[k];
    for (uint32_t c : by_corr[kern.correlation]) {
      auto& s = scores[{pid_of(c), kern.device}];
      const double lag = kern.ts_us - file.runtime[c].ts_us;
      s.violations += lag < -kEps;
      s.lag_us += std::abs(lag);
      ++s.n;
    }
  }
  std::vector<std::pair<std::pair<uint32_t, int32_t>, PairScore>> ranked(scores.begin(), scores.end());
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    const double ra = static_cast<double>(a.second.violations) / a.second.n;
    const double rb = static_cast<double>(b.second.violations) / b.second.n;
    if (ra != rb) return ra < rb;
    return a.second.lag_us / a.second.n < b.second.lag_us / b.second.n;
  });
  std::map<uint32_t, int32_t> lag_device_of = device_of;
  std::map<int32_t, bool> device_taken;
  for (const auto& [pid, dev] : device_of) device_taken[dev] = true;
  for (const auto& [pd, s] : ranked) {
    if (lag_device_of.count(pd.first) || device_taken[pd.second]) continue;
    lag_device_of[pd.first] = pd.second;
    device_taken[pd.second] = true;
  }
  for (uint32_t k : ambiguous) {
    const GpuKernel& kern = file.kernels[k];
    const auto& cands = by_corr[kern.correlation];
    int32_t chosen = -1;
    bool by_votes = false;
    for (uint32_t c : cands) {
      auto d = device_of.find(pid_of(c));
      if (d != device_of.end() && d->second == kern.device) {
        chosen = static_cast<int32_t>(c);
        by_votes = true;
        break;
      }
      auto l = lag_device_of.find(pid_of(c));
      if (chosen < 0 && l != lag_device_of.end() && l->second == kern.device) {
        chosen = static_cast<int32_t>(c);
      }
    }
    if (chosen < 0) {  // no device map: the closest launch before the kernel
      double best = std::numeric_limits<double>::infinity();
      for (uint32_t c : cands) {
        const double lag = kern.ts_us - file.runtime[c].ts_us;
        if (lag >= -kEps && lag < best) {
          best = lag;
          chosen = static_cast<int32_t>(c);
        }
      }
      if (chosen < 0) chosen = static_cast<int32_t>(cands[0]);
    }
    idx.kernel_runtime[k] = chosen;
    if (by_votes) ++idx.by_device_map;
    else ++idx.by_lag;
  }
}

}  // namespace

FileIndex build_index(const TraceFile& file, const StringPool& names) {
  FileIndex idx;
  nest(file, idx);
  link_external_ids(file, idx);
  correlate(file, idx);
  idx.runtime_is_graph.resize(file.runtime.size());
  for (size_t c = 0; c < file.runtime.size(); ++c) {
    idx.runtime_is_graph[c] = names.get(file.runtime[c].name).find("GraphLaunch") != std::string::npos;
  }
  return idx;
}

}  // namespace atrex::ingest::detail
