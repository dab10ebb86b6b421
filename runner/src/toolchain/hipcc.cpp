// The hip backend's toolchain: hipcc for one offload arch. `hipcc --version` without a target
// asks rocm_agent_enumerator for the local GPUs (a Python traceback without one); with
// --offload-arch it prints only the HIP and clang versions, so the identity carries the arch.
#include <fmt/format.h>

#include "atrex/runner/toolchain.h"
#include "version_cache.h"

namespace atrex::runner {
namespace fs = std::filesystem;
namespace {

class HipccToolchain final : public Toolchain {
 public:
  Backend backend() const override { return Backend::kHip; }
  const std::string& compiler() const override { return compiler_; }
  std::vector<std::string> flags(std::string_view arch,
                                 const fs::path& include_dir) const override {
    return {"-std=c++17",
            "-O3",
            "-shared",
            "-fPIC",
            "-fvisibility=hidden",
            fmt::format("--offload-arch={}", arch),
            "-I" + include_dir.string()};
  }
  Result<std::string> identity(std::string_view arch) const override {
    const std::string a(arch);
    return cache_.get(compiler_ + "\n" + a, [&] {
      return toolchain::version_of({compiler_, "--version", "--offload-arch=" + a});
    });
  }
  std::string explain_failure(std::string log, std::string_view arch) const override {
    if (log.find(fmt::format("invalid target ID '{}'", arch)) != std::string::npos) {
      log += fmt::format(
          "\natrex: this hipcc does not know the offload arch {} (Debian 12's HIP 5.2 predates "
          "MI300X's gfx942); set ATREX_HIP_ARCH or pass --arch with one it knows, e.g. gfx90a "
          "(MI200), to compile here\n",
          arch);
    }
    return log;
  }

 private:
  std::string compiler_ = [] {
    const char* e = std::getenv("HIPCC");
    return std::string(e && *e ? e : "hipcc");
  }();
  toolchain::ProbeCache cache_;
};

}  // namespace

std::unique_ptr<Toolchain> make_hipcc_toolchain() { return std::make_unique<HipccToolchain>(); }

std::string default_hip_arch() {
  if (const char* e = std::getenv("ATREX_HIP_ARCH"); e && *e) return e;
  return "gfx942";
}

}  // namespace atrex::runner
