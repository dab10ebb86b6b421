// The hip backend's device probe (evaluator.h): `atrex-eval-hip --probe` in a child process, so
// the runner never loads the HIP runtime itself.
#include <fmt/format.h>

#include "atrex/runner/evaluator.h"
#include "atrex/runner/subprocess.h"

namespace atrex::runner {
namespace fs = std::filesystem;

const HipEnvironment& probe_hip_environment() {
  static const HipEnvironment env = [] {
    HipEnvironment e;
    const fs::path child = default_child_dir() / "atrex-eval-hip";
    std::error_code ec;
    e.child_built = fs::exists(child, ec);
    if (!e.child_built) {
      e.probe_error =
          "atrex was built without the HIP backend (no HIP runtime when it was configured; "
          "ATREX_WITH_HIP, Debian libamdhip64-dev)";
      return e;
    }
    SubprocessOptions opt;
    opt.argv = {child.string(), "--probe"};
    opt.timeout = std::chrono::seconds(60);
    auto r = run_subprocess(opt);
    if (!r || !r->ok()) {
      // E.g. the HIP runtime library is missing on this host (the loader's message says so).
      e.probe_error = fmt::format("no AMD GPU / HIP runtime found: {} --probe failed: {}",
                                  child.filename().string(),
                                  r ? r->describe() + ": " + r->output_tail : r.error().message);
      return e;
    }
    try {
      const Json j = Json::parse(r->output_tail.substr(r->output_tail.find('{')));
      for (const auto& d : j["devices"]) {
        GpuInfo g{d["index"], d["name"], 0, 0, d["cu_count"], d["l2_bytes"], d["memory_bytes"]};
        g.arch = d["arch"].get<std::string>();
        e.gpus.push_back(std::move(g));
      }
      if (e.gpus.empty()) e.probe_error = j.value("error", "no AMD GPU / HIP runtime found");
    } catch (const std::exception& ex) {
      e.probe_error = std::string("unreadable HIP device probe output: ") + ex.what();
    }
    return e;
  }();
  return env;
}

}  // namespace atrex::runner
