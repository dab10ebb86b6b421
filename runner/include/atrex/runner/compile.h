// Compile gate with a content-addressed cache (docs/architecture.md §5).
//
// A candidate source becomes a shared object: nvcc (cuda), hipcc (hip) or the system C++
// compiler (cpu), with -shared -fPIC and the staged include folder that holds
// atrex/candidate.h and dlpack/dlpack.h. The cache key is SHA-256 over (source, flags, target
// arch, compiler identity = `--version` output; cpu: the CPU target `-march=native` resolves to
// on this host, see native_cpu_target), so a different compiler, arch or CPU model never reuses
// a stale object, even when runners on different machines share one cache folder. Compilers:
// $CUDACXX (else /usr/local/cuda/bin/nvcc, nvcc), $HIPCC (else hipcc), $CXX (else c++). Objects are
// written to a temporary name and renamed into place, so many runners may share one cache folder.
// Compile failures are cached too (the log is the result).
#pragma once

#include <filesystem>
#include <mutex>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/records.h"

namespace atrex::runner {

struct CompileOutcome {
  bool ok = false;
  std::filesystem::path library;  // the .so when ok
  std::string log;                // compiler output (errors when !ok), paths shown as the file name
  bool cache_hit = false;
  double wall_s = 0;
  std::string key;
};

class CompileCache {
 public:
  // `dir`: cache folder (created). `include_dir`: folder with atrex/candidate.h and dlpack/.
  // `native_target`: what the cpu backend's `-march=native` means here, for the cache key;
  // unset = native_cpu_target() of this host, probed once (tests pass another CPU's).
  CompileCache(std::filesystem::path dir, std::filesystem::path include_dir,
               std::optional<std::string> native_target = std::nullopt);

  // Compiles `candidate.source` for `candidate.backend`. `target_arch` is e.g. "sm_90a" (cuda),
  // "gfx90a" (hip) or "native" (cpu). Errors only for atrex failures (cannot write the cache);
  // a compiler error is an outcome with ok = false.
  Result<CompileOutcome> compile(const CandidateRef& candidate, const std::string& target_arch,
                                 double timeout_s);

  // The command line used for a backend (for docs and `--verbose`), without file names.
  std::vector<std::string> flags_for(const std::string& backend,
                                     const std::string& target_arch) const;

 private:
  // The compiler's `--version` output (hip: with the offload arch), cached per compiler (and arch).
  Result<std::string> compiler_identity(const std::string& compiler, const std::string& backend,
                                        const std::string& arch);
  std::string compiler_for(const std::string& backend) const;

  // native_target_, else native_cpu_target(compiler), probed once per compiler.
  std::string native_target_for(const std::string& compiler);

  std::filesystem::path dir_;
  std::filesystem::path include_dir_;
  std::optional<std::string> native_target_;
  std::mutex mu_;
  std::map<std::string, std::string> identities_;
};

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
// File extension expected for a backend: ".cu", ".hip", ".cpp".
std::string source_extension(const std::string& backend);
// The default compiler cache folder: $ATREX_CACHE_DIR, else $XDG_CACHE_HOME/atrex, else
// ~/.cache/atrex.
std::filesystem::path default_cache_dir();
// The staged include folder next to the binaries (<exe>/../share/atrex/include).
std::filesystem::path default_include_dir();

}  // namespace atrex::runner
