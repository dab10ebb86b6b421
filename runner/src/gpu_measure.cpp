#include "atrex/runner/gpu_measure.h"

#include <ctime>
#include <sstream>

#include <fmt/format.h>

#include "atrex/runner/evaluator.h"
#include "atrex/common/process/subprocess.h"

namespace atrex::runner {

Result<Json> run_cuda_bench(const std::string& mode, int device, std::chrono::seconds timeout) {
  const auto child = default_child_dir() / "atrex-cuda-bench";
  std::error_code ec;
  if (!std::filesystem::exists(child, ec)) {
    return make_error(ErrorCode::kUnavailable, "atrex was built without the CUDA backend (" +
                                                   child.string() + " is missing)");
  }
  SubprocessOptions opt;
  opt.argv = {child.string(), "--" + mode, "--device", std::to_string(device)};
  opt.timeout = timeout;
  opt.output_tail_bytes = size_t{1} << 20;
  ATREX_ASSIGN_OR_RETURN(auto r, run_subprocess(opt));
  // The JSON is the last output line that starts with '{'.
  std::istringstream lines(r.output_tail);
  std::string json_line;
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.front() == '{') json_line = line;
  }
  Json j;
  try {
    if (!json_line.empty()) j = Json::parse(json_line);
  } catch (const std::exception&) {}
  if (!r.ok() || !j.is_object() || j.contains("error")) {
    return make_error(
        ErrorCode::kUnavailable,
        fmt::format(
            "atrex-cuda-bench --{} on device {}: {}: {}", mode, device, r.describe(),
            j.is_object() && j.contains("error") ? j["error"].get<std::string>() : r.output_tail));
  }
  return j;
}

Result<problems::HardwareProfile> gpu_profile(const Json& m, const std::string& name) {
  problems::HardwareProfile p;
  p.name = name;
  p.vendor = "NVIDIA";
  const Json dev = m.value("device", Json::object());
  const std::string cc = dev.value("cc", "");
  std::string arch = "sm_";
  for (char c : cc) {
    if (c != '.') arch += c;
  }
  p.arch = cc.empty() ? "" : arch;
  p.hbm_bytes_per_s = m.value("copy_bytes_per_s", 0.0);
  p.l2_bytes = dev.value("l2_bytes", 0.0);
  if (dev.contains("name")) p.match.push_back(dev["name"].get<std::string>());
  std::vector<std::string> failed;
  for (const auto& g : m.value("gemm", Json::array())) {
    if (g.contains("flops_per_s") && g["flops_per_s"].get<double>() > 0) {
      p.p_peak_flops_per_s[g["path"].get<std::string>()] = g["flops_per_s"].get<double>();
    } else {
      failed.push_back(g.value("path", "?") + ": " + g.value("error", "no rate"));
    }
  }
  if (p.hbm_bytes_per_s <= 0 || p.p_peak_flops_per_s.empty()) {
    return invalid_input("the GPU measurement lacks the copy bandwidth or every GEMM rate");
  }
  const std::time_t now = std::time(nullptr);
  char date[16];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  p.retrieved_at = date;
  p.source_doc = fmt::format("measured by `atrex hardware measure` on {} ({}, {} SMs)",
                             dev.value("name", "a GPU"), dev.value("pci_bus_id", "?"),
                             dev.value("sm_count", 0));
  const Json clocks = m.value("clocks_before", Json::object());
  const Json ceiling = m.value("memory_ceiling", Json::object());
  p.notes = fmt::format(
      "Memory: the best of cudaMemcpy and read+write, read-only and write-only kernels over 1 and "
      "2 GiB (bytes read + written; best: {}), so honest kernels stay under it. GEMM: cuBLASLt "
      "8192^3 TN on random operands, best of several rounds. Clocks as found (SM {} MHz, memory {} "
      "MHz); not locked.{}",
      ceiling.value("best", "cudaMemcpy"), clocks.value("sm_mhz", 0), clocks.value("mem_mhz", 0),
      failed.empty() ? "" : " Paths not measured: " + fmt::format("{}", fmt::join(failed, "; ")));
  return p;
}

}  // namespace atrex::runner
