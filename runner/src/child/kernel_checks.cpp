// What the CUPTI traces of the timed calls say (kernel_checks.h).
#include "kernel_checks.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "elf_symbols.h"

namespace atrex::runner::child {

std::optional<Failure> check_kernel_sets(const std::map<uint64_t, CallTrace>& traces,
                                         const std::map<uint64_t, int>& set_of) {
  std::map<int, std::pair<uint64_t, std::vector<std::string>>>
      first;  // input set -> (call, kernels)
  for (const auto& [id, set] : set_of) {
    std::vector<std::string> names;
    if (auto it = traces.find(id); it != traces.end()) {
      for (const auto& k : it->second.kernels) names.push_back(k.name);
    }
    std::sort(names.begin(), names.end());
    auto [pos, inserted] = first.try_emplace(set, id, names);
    if (inserted || pos->second.second == names) continue;
    auto list = [](const std::vector<std::string>& v) {
      std::string out;
      for (size_t i = 0; i < v.size() && i < 6; ++i) out += (i ? ", " : "") + v[i];
      return fmt::format("{} kernel(s){}{}{}", v.size(), v.empty() ? "" : ": ", out,
                         v.size() > 6 ? ", ..." : "");
    };
    return Failure{
        EvalStatus::kWrongResult,
        fmt::format("the kernels launched differ between timed calls on "
                    "the same inputs (call {}: {}; call {}: {}): "
                    "work skipped or replayed from a cache",
                    pos->second.first + 1, list(pos->second.second), id + 1, list(names))};
  }
  return std::nullopt;
}

namespace {

void attribute_to(ChildShapeResponse& resp, const Result<std::set<std::string>>& symbols,
                  const std::map<uint64_t, CallTrace>& traces) {
  std::set<std::string> own_keys;
  if (symbols) {
    for (const auto& s : *symbols) own_keys.insert(kernel_key(s));
  }
  std::map<std::string, std::pair<double, bool>> per_kernel;  // name -> (us, own)
  double own = 0, total = 0;
  for (const auto& [id, t] : traces) {
    for (const auto& k : t.kernels) per_kernel[k.name].first += k.us;
  }
  for (auto& [name, v] : per_kernel) {
    v.second = own_keys.count(kernel_key(name)) > 0;
    total += v.first;
    if (v.second) own += v.first;
  }
  if (!symbols) resp.dsl_attribution_error = symbols.error().message;
  if (total <= 0 || !symbols) return;
  resp.dsl_share = own / total;
  ATREX_ASSERT(resp.timing.has_value(), "kernels are attributed after timing");
  resp.timing->kernels.clear();
  for (const auto& [name, v] : per_kernel) {
    resp.timing->kernels.push_back(KernelShare{name, v.first / total, v.second});
  }
}

}  // namespace

void attribute_kernels(ChildShapeResponse& resp, const std::string& library,
                       const std::map<uint64_t, CallTrace>& traces) {
  attribute_to(resp, defined_function_symbols(library), traces);
}

Result<std::set<std::string>> triton_kernel_names(const std::string& cache_dir) {
  namespace fs = std::filesystem;
  std::set<std::string> names;
  std::error_code ec;
  if (cache_dir.empty()) return names;
  if (!fs::is_directory(cache_dir, ec)) return names;  // no Triton kernel compiled: share 0
  for (auto it = fs::recursive_directory_iterator(cache_dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->path().extension() != ".cubin") continue;
    auto symbols = defined_function_symbols(it->path());
    if (symbols && !symbols->empty()) {
      names.insert(symbols->begin(), symbols->end());
    } else {
      names.insert(it->path().stem().string());
    }
  }
  return names;
}

void attribute_python_kernels(ChildShapeResponse& resp, const std::string& triton_cache_dir,
                              const std::map<uint64_t, CallTrace>& traces) {
  attribute_to(resp, triton_kernel_names(triton_cache_dir), traces);
}

std::string kernel_template(const std::string& key) {
  static const std::string anon = "(anonymous namespace)";
  std::string name = key;
  for (size_t at = name.find(anon); at != std::string::npos; at = name.find(anon, at))
    name.replace(at, anon.size(), "{anon}");
  const size_t end = name.find_first_of("<(");
  return name.substr(0, end);
}

std::vector<std::string> ghost_kernels(const std::vector<std::string>& defined_keys,
                                       const std::set<std::string>& launched_keys,
                                       size_t* sibling_instances) {
  std::set<std::string> launched_templates;
  for (const auto& k : launched_keys) launched_templates.insert(kernel_template(k));
  std::vector<std::string> ghosts;
  size_t siblings = 0;
  for (const auto& key : defined_keys) {
    if (launched_keys.count(key)) continue;
    if (launched_templates.count(kernel_template(key))) {
      ++siblings;  // another instantiation of a template that ran (e.g. an alignment fallback)
    } else {
      ghosts.push_back(key);
    }
  }
  if (sibling_instances) *sibling_instances = siblings;
  return ghosts;
}

void report_unlaunched_kernels(ChildShapeResponse& resp, const std::string& library,
                               const std::map<uint64_t, CallTrace>& traces) {
  auto defined = defined_kernels(library);
  if (!defined) return;  // attribute_kernels records why the library's symbols could not be read
  std::set<std::string> launched;
  for (const auto& [id, t] : traces) {
    for (const auto& k : t.kernels) launched.insert(kernel_key(k.name));
  }
  std::vector<std::string> keys;
  for (const auto& name : *defined) keys.push_back(kernel_key(name));
  size_t siblings = 0;
  resp.unlaunched_kernels = ghost_kernels(keys, launched, &siblings);
  resp.unlaunched_instantiations = static_cast<int64_t>(siblings);
}

std::optional<Failure> check_stray_work(const std::vector<StrayRecord>& strays,
                                        const std::set<std::string>& harness_keys,
                                        const std::set<std::string>& candidate_keys) {
  for (const auto& s : strays) {
    const std::string what =
        s.kernel.empty() ? std::string("a memcpy or memset") : "kernel " + s.kernel;
    std::string why;
    if (s.foreign_id >= 0) {
      why = fmt::format("tagged with external correlation id {}, which is no timed call's",
                        s.foreign_id);
    } else if (s.other_thread) {
      why = "launched by a thread other than the one that makes the timed calls";
    } else if (s.in_call >= 0) {
      why = fmt::format(
          "launched inside timed call {} without that call's correlation id (taken "
          "off the thread)",
          s.in_call + 1);
    } else if (!s.kernel.empty()) {
      const std::string key = kernel_key(s.kernel);
      // No names to go by (a stripped executable): the thread and window rules only.
      if (harness_keys.empty() || (harness_keys.count(key) && !candidate_keys.count(key))) continue;
      why = "launched between the timed calls and not one of the harness's kernels";
    } else {
      continue;  // the harness's copies between the calls (output resets, inputs, the flush)
    }
    return Failure{EvalStatus::kRejected,
                   fmt::format("device work outside the timed calls: {} ({:.1f} us on the device) "
                               "was {}; neither a call's span nor its event window holds such "
                               "work (docs/evaluation.md \"Timing\")",
                               what, static_cast<double>(s.end_ns - s.start_ns) / 1e3, why)};
  }
  return std::nullopt;
}

const std::set<std::string>& defined_kernel_keys(const std::string& path) {
  static std::map<std::string, std::set<std::string>> cache;  // the child's one thread only
  auto [it, inserted] = cache.try_emplace(path);
  if (inserted) {
    if (auto defined = defined_kernels(path)) {
      for (const auto& name : *defined) it->second.insert(kernel_key(name));
    }
  }
  return it->second;
}

}  // namespace atrex::runner::child
