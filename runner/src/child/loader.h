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
  // Python candidates: tells the embedding layer which outputs start as an input's values
  // (TensorSpec::initial_from): forward gets that output's buffer in the input's place.
  void (*set_inplace)(const int* output_index, const int* input_index, int n) = nullptr;
  bool python = false;
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

// Both kinds: a Python artifact folder (its site.json: python_site.h) goes to the embedded
// Python (the site's libpython with RTLD_GLOBAL, then libatrex-python-shim.so from this
// executable's folder, which imports the module: docs/python-candidates.md); anything else to
// the shared-object loader. A Python candidate is loaded once per process; later shapes get the
// same entry points (or the same load error).
std::unique_ptr<CandidateLoader> make_candidate_loader();

// Where the embedded Python's Triton caches its compiled kernels in this process (per task:
// $TMPDIR/atrex-triton-<pid>), or empty when no Python candidate was loaded.
const std::string& python_triton_cache_dir();

}  // namespace atrex::runner::child
