// Compile gate with a content-addressed cache (DESIGN.md §5).
//
// A candidate source becomes a shared object through its backend's toolchain (toolchain.h),
// with the staged include folder that holds atrex/candidate.h, atrex/candidate_util.h and
// dlpack/dlpack.h. The cache key is SHA-256 over (backend, target arch, the toolchain's
// identity, flags, the ABI headers' content, source), so a different compiler, arch or CPU
// model never reuses a stale object, even when runners on different machines share one cache
// folder. Objects are written to a temporary name and renamed into place, so many runners may
// share one cache folder. Compile failures that are the compiler's verdict are cached too (the
// log is the result). Thread-safety: compile() may run on several threads at once.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/wire/eval_task.h"
#include "atrex/runner/toolchain.h"

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
  // `dir`: cache folder (created). `include_dir`: folder with atrex/ and dlpack/.
  // `native_target`: the cpu toolchain's -march=native identity (toolchain.h); unset = probed.
  CompileCache(std::filesystem::path dir, std::filesystem::path include_dir,
               std::optional<std::string> native_target = std::nullopt);

  // Compiles `candidate.source` for `candidate.backend`. `target_arch` is e.g. "sm_90a" (cuda),
  // "gfx90a" (hip) or "native" (cpu). Errors only for atrex failures (cannot write the cache,
  // the ABI headers are missing); a compiler error is an outcome with ok = false.
  Result<CompileOutcome> compile(const CandidateRef& candidate, const std::string& target_arch,
                                 double timeout_s);

  // Runs every compiler from now on in bwrap `bwrap` (docs/evaluation.md "Sandbox": the source
  // is the candidate's, and the compiler reads and writes what it says); empty: unsandboxed, as
  // with --no-sandbox. Either way the compiler gets compile_limits() (sandbox/compile_sandbox.h).
  // Call before compiles start.
  void sandbox_with(std::filesystem::path bwrap) { bwrap_ = std::move(bwrap); }

  // The command line used for a backend, without file names (docs, `--verbose`).
  std::vector<std::string> flags_for(Backend backend, const std::string& target_arch) const;
  const Toolchain& toolchain(Backend backend) const;

 private:
  std::filesystem::path dir_;
  std::filesystem::path include_dir_;
  std::map<Backend, std::unique_ptr<Toolchain>> toolchains_;
  std::filesystem::path bwrap_;  // the compile sandbox's bwrap; empty: none
};

// The default compiler cache folder: $ATREX_CACHE_DIR, else $XDG_CACHE_HOME/atrex, else
// ~/.cache/atrex.
std::filesystem::path default_cache_dir();
// The staged include folder: $ATREX_INCLUDE_DIR, else <exe>/../share/atrex/include.
std::filesystem::path default_include_dir();

}  // namespace atrex::runner
