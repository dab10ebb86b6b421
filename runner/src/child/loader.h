// How the evaluation child gets a callable candidate out of what the compile gate produced
// (DESIGN.md §3 runner/: "candidate loaders"): a shared object today (dlopen of the .so nvcc,
// hipcc or c++ built); an embedded-Python module loader plugs in behind the same interface.
// The child loads one candidate per process; a loaded candidate is never unloaded.
#pragma once

#include <memory>
#include <string>

#include "atrex/candidate.h"
#include "atrex/common/error.h"

namespace atrex::runner::child {

// A loaded candidate: its ABI entry point and, when it exports one, its error-message function.
struct LoadedCandidate {
  AtrexCandidateRunFn run = nullptr;
  AtrexCandidateErrorFn error_message = nullptr;  // may be null
};

class CandidateLoader {
 public:
  virtual ~CandidateLoader() = default;
  // Errors: kInvalidInput when the artifact cannot be loaded ("cannot load the compiled
  // candidate: ..." -> a compile_error verdict), kNotFound when it lacks the entry point
  // (-> rejected).
  virtual Result<LoadedCandidate> load(const std::string& artifact) = 0;
};

// dlopen(RTLD_NOW | RTLD_LOCAL) and the C-linkage symbols of atrex/candidate.h.
std::unique_ptr<CandidateLoader> make_shared_object_loader();

}  // namespace atrex::runner::child
