// The cuda backend's toolchain: nvcc, one real architecture per build (sm_90a on Hopper so that
// candidates may use wgmma/setmaxnreg: device notes HOPPER.md), the CUDA runtime shared with the
// evaluation child (--cudart shared: one runtime, one context).
#include <fmt/format.h>

#include "atrex/runner/toolchain.h"
#include "version_cache.h"

namespace atrex::runner {
namespace fs = std::filesystem;
namespace {

std::string find_nvcc() {
  if (const char* e = std::getenv("CUDACXX"); e && *e) return e;
  std::error_code ec;
  if (fs::exists("/usr/local/cuda/bin/nvcc", ec)) return "/usr/local/cuda/bin/nvcc";
  return "nvcc";
}

class NvccToolchain final : public Toolchain {
 public:
  Backend backend() const override { return Backend::kCuda; }
  const std::string& compiler() const override { return compiler_; }
  std::vector<std::string> flags(std::string_view arch,
                                 const fs::path& include_dir) const override {
    const std::string a(arch.rfind("sm_", 0) == 0 ? arch.substr(3) : arch);
    return {"-std=c++17",
            "-O3",
            "-shared",
            "-Xcompiler",
            "-fPIC,-fvisibility=hidden",
            "--cudart",
            "shared",
            fmt::format("-gencode=arch=compute_{},code=sm_{}", a, a),
            "-I" + include_dir.string()};
  }
  Result<std::string> identity(std::string_view) const override {
    return cache_.get(compiler_, [&] { return toolchain::version_of({compiler_, "--version"}); });
  }

 private:
  std::string compiler_ = find_nvcc();
  toolchain::ProbeCache cache_;
};

}  // namespace

std::unique_ptr<Toolchain> make_nvcc_toolchain() { return std::make_unique<NvccToolchain>(); }

}  // namespace atrex::runner
