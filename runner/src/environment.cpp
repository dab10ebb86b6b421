#include "atrex/runner/environment.h"

#include <fstream>

#include <fmt/format.h>

#include "atrex/common/process/subprocess.h"
#include "atrex/runner/compile.h"
#include "atrex/runner/host_measure.h"

namespace atrex::runner {
namespace fs = std::filesystem;

std::string GpuInfo::cuda_arch() const {
  if (cc_major == 9 && cc_minor == 0) return "sm_90a";
  return fmt::format("sm_{}{}", cc_major, cc_minor);
}

fs::path default_child_dir() {
  if (const char* e = std::getenv("ATREX_CHILD_DIR"); e && *e) return e;
  return problems::executable_dir();
}

namespace {

// `<child> --probe`'s atrex.devices/1 JSON, or why there is none.
Result<Json> run_probe(const fs::path& child) {
  SubprocessOptions opt;
  opt.argv = {child.string(), "--probe"};
  opt.timeout = std::chrono::seconds(60);
  ATREX_ASSIGN_OR_RETURN(SubprocessResult r, run_subprocess(opt));
  if (!r.ok()) return make_error(ErrorCode::kUnavailable, r.describe() + ": " + r.output_tail);
  const auto brace = r.output_tail.find('{');
  if (brace == std::string::npos) {
    return make_error(ErrorCode::kUnavailable, "unreadable device probe output: no JSON object");
  }
  Json probe = Json::parse(r.output_tail.substr(brace), nullptr, /*allow_exceptions=*/false);
  if (probe.is_discarded()) {
    return make_error(ErrorCode::kUnavailable, "unreadable device probe output: not JSON: " +
                                                   r.output_tail.substr(brace, 200));
  }
  return probe;
}

std::string read_cpu_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return {};
}

}  // namespace

const Environment& probe_environment() {
  static const Environment env = [] {
    Environment e;
    e.cpu_name = read_cpu_name();
    const fs::path child = default_child_dir() / eval_child_name(Backend::kCuda);
    std::error_code ec;
    e.cuda_child_built = fs::exists(child, ec);
    if (!e.cuda_child_built) {
      e.gpu_probe_error = "atrex was built without the CUDA backend";
      return e;
    }
    auto j = run_probe(child);
    if (!j) {
      e.gpu_probe_error = j.error().message;
      return e;
    }
    try {
      for (const auto& d : (*j)["devices"]) {
        e.gpus.push_back(GpuInfo{d["index"], d["name"], d["cc_major"], d["cc_minor"], d["sm_count"],
                                 d["l2_bytes"], d["memory_bytes"]});
      }
    } catch (const std::exception& ex) {
      e.gpu_probe_error = std::string("unreadable device probe output: ") + ex.what();
    }
    if (e.gpus.empty() && e.gpu_probe_error.empty()) {
      e.gpu_probe_error = j->value("error", "no CUDA device found");
    }
    return e;
  }();
  return env;
}

const HipEnvironment& probe_hip_environment() {
  static const HipEnvironment env = [] {
    HipEnvironment e;
    const fs::path child = default_child_dir() / eval_child_name(Backend::kHip);
    std::error_code ec;
    e.child_built = fs::exists(child, ec);
    if (!e.child_built) {
      e.probe_error =
          "atrex was built without the HIP backend (no HIP runtime when it was configured; "
          "ATREX_WITH_HIP, Debian libamdhip64-dev)";
      return e;
    }
    auto j = run_probe(child);
    if (!j) {
      // E.g. the HIP runtime library is missing on this host (the loader's message says so).
      e.probe_error = fmt::format("no AMD GPU / HIP runtime found: {} --probe failed: {}",
                                  child.filename().string(), j.error().message);
      return e;
    }
    try {
      for (const auto& d : (*j)["devices"]) {
        GpuInfo g{d["index"], d["name"], 0, 0, d["cu_count"], d["l2_bytes"], d["memory_bytes"]};
        g.arch = d["arch"].get<std::string>();
        e.gpus.push_back(std::move(g));
      }
    } catch (const std::exception& ex) {
      e.probe_error = std::string("unreadable HIP device probe output: ") + ex.what();
    }
    if (e.gpus.empty() && e.probe_error.empty()) {
      e.probe_error = j->value("error", "no AMD GPU / HIP runtime found");
    }
    return e;
  }();
  return env;
}

Target resolve_target(Backend backend, int device_index) {
  const Environment& env = probe_environment();
  Target t{env.cpu_name, "native", ""};
  switch (backend) {
    case Backend::kCpu: return t;
    case Backend::kCuda:
      if (!env.cuda_child_built) {
        t.reject = "this runner was built without the CUDA backend";
      } else if (!env.has_gpu()) {
        t.reject = "no CUDA GPU on this runner: " + env.gpu_probe_error;
      } else if (device_index >= static_cast<int>(env.gpus.size())) {
        t.reject = fmt::format("no GPU {}", device_index);
      } else {
        t.device_name = env.gpus[device_index].name;
        t.arch = env.gpus[device_index].cuda_arch();
      }
      return t;
    case Backend::kHip: {
      const HipEnvironment& hip = probe_hip_environment();
      if (hip.gpus.empty()) {
        t.reject = hip.probe_error;
        t.device_name = "no AMD GPU";
      } else if (device_index >= static_cast<int>(hip.gpus.size())) {
        t.reject = fmt::format("no AMD GPU {}", device_index);
      } else {
        t.device_name = hip.gpus[device_index].name;
        t.arch = hip.gpus[device_index].arch;
      }
      return t;
    }
  }
  ATREX_UNREACHABLE("Backend");
}

Result<void> backend_available(Backend backend) {
  if (backend == Backend::kCuda) {
    const auto& env = probe_environment();
    if (env.has_gpu()) return ok();
    return make_error(ErrorCode::kUnavailable,
                      fmt::format("the cuda backend needs a GPU and this machine has none ({})",
                                  env.gpu_probe_error));
  }
  if (backend == Backend::kHip) {
    const auto& hip = probe_hip_environment();
    if (!hip.gpus.empty()) return ok();
    return make_error(ErrorCode::kUnavailable,
                      fmt::format("the hip backend needs an AMD GPU and this machine has none ({})",
                                  hip.probe_error));
  }
  return ok();
}

Result<Backend> backend_for_file(const BackendChoice& choice, const fs::path& file) {
  if (choice.backend) return *choice.backend;
  const std::string ext = file.extension().string();
  if (auto b = backend_for_extension(ext)) return *b;
  // A Python module (docs/python-candidates.md) runs where the machine says: cuda with a GPU.
  if (ext == ".py") return backend_for_machine(choice);
  return invalid_input(fmt::format(
      "{}: cannot tell the backend from the extension \"{}\"; pass --backend", file.string(), ext));
}

Backend backend_for_machine(const BackendChoice& choice) {
  if (choice.backend) return *choice.backend;
  return probe_environment().has_gpu() ? Backend::kCuda : Backend::kCpu;
}

std::string default_arch(Backend backend) {
  switch (backend) {
    case Backend::kCpu: return "native";
    case Backend::kCuda: {
      const auto& env = probe_environment();
      return env.has_gpu() ? env.gpus.front().cuda_arch() : "sm_90a";
    }
    case Backend::kHip: {
      const auto& hip = probe_hip_environment();
      return hip.gpus.empty() ? default_hip_arch() : hip.gpus.front().arch;
    }
  }
  ATREX_UNREACHABLE("Backend");
}

Result<problems::HardwareProfile> choose_hardware(std::string_view name, Backend backend,
                                                  const problems::Suite& suite,
                                                  std::string_view device, std::string_view hint) {
  if (name == "host-cpu" || (name == "auto" && backend == Backend::kCpu)) {
    return cached_host_profile();
  }
  ATREX_ASSIGN_OR_RETURN(auto profiles, problems::load_default_hardware_profiles(suite.dir()));
  if (name != "auto") return problems::find_hardware_profile(profiles, name);
  std::string found(device);
  if (found.empty()) {
    ATREX_TRY(backend_available(backend));
    found = backend == Backend::kHip ? probe_hip_environment().gpus.front().name
                                     : probe_environment().gpus.front().name;
  }
  if (auto m = problems::match_hardware_profile(profiles, found)) return *m;
  std::vector<std::string> names;
  for (const auto& p : profiles) names.push_back(p.name);
  return not_found(fmt::format("no hardware profile matches the device \"{}\"; {} (known: {})",
                               found, hint, fmt::join(names, ", ")));
}

}  // namespace atrex::runner
