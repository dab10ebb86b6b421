// A toolchain turns a candidate source into what an evaluation child loads (a shared object
// today; a Python module's byte code later), and says what of itself enters the compile cache
// key. One per backend: the system C++ compiler (cpu), nvcc (cuda), hipcc (hip). Compilers come
// from $CXX (else c++), $CUDACXX (else /usr/local/cuda/bin/nvcc, else nvcc) and $HIPCC (else
// hipcc). Thread-safety: every method may be called from several threads at once.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/wire/backend.h"

namespace atrex::runner {

class Toolchain {
 public:
  virtual ~Toolchain() = default;
  virtual Backend backend() const = 0;
  // The compiler program.
  virtual const std::string& compiler() const = 0;
  // The flags that build a candidate for `arch` ("native", "sm_90a", "gfx942"), with
  // `include_dir` (atrex/candidate.h, dlpack/) on the include path.
  virtual std::vector<std::string> flags(std::string_view arch,
                                         const std::filesystem::path& include_dir) const = 0;
  // What identifies the build besides source and flags, for the cache key: the compiler's
  // `--version` (hip: with the offload arch), and on cpu the CPU target `-march=native`
  // resolves to here (native_cpu_target). Probed once per (toolchain, arch).
  virtual Result<std::string> identity(std::string_view arch) const = 0;
  // The compiler's log of a failed build, with a hint where atrex knows one (hipcc that does not
  // know the arch).
  virtual std::string explain_failure(std::string log, std::string_view arch) const {
    (void)arch;
    return log;
  }
};

// `native_target`: what the cpu backend's `-march=native` means, for the cache key; unset =
// native_cpu_target() of this host (tests pass another CPU's).
std::unique_ptr<Toolchain> make_cxx_toolchain(std::optional<std::string> native_target);
std::unique_ptr<Toolchain> make_nvcc_toolchain();
std::unique_ptr<Toolchain> make_hipcc_toolchain();

// The CPU target `compiler -march=native` builds for on this host, as one line for the compile
// cache key: the resolved -march (gcc: `-march=native -Q --help=target`, with a hash of every
// target option it enables; clang: `-###`'s -target-cpu and -target-features), and the CPU
// model and a hash of the feature flags from /proc/cpuinfo. Two hosts whose objects may not be
// interchangeable get different lines. Runs the compiler (a few ms); never fails: what cannot
// be found is left out.
std::string native_cpu_target(const std::string& compiler);

// The hip backend's offload arch when no AMD GPU is there to ask: $ATREX_HIP_ARCH, else gfx942
// (MI300X, the hip hardware profile). Debian 12's hipcc 5.2 does not know gfx942 (the compile
// log says so and names the setting); gfx90a (MI200) and gfx940 compile there.
std::string default_hip_arch();

}  // namespace atrex::runner
