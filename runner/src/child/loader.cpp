#include "loader.h"

#include <dlfcn.h>

#include <fmt/format.h>

namespace atrex::runner::child {
namespace {

class SharedObjectLoader final : public CandidateLoader {
 public:
  Result<LoadedCandidate> load(const std::string& artifact) override {
    void* handle = ::dlopen(artifact.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      return invalid_input(fmt::format("cannot load the compiled candidate: {}", ::dlerror()));
    }
    LoadedCandidate c;
    c.run = reinterpret_cast<AtrexCandidateRunFn>(::dlsym(handle, ATREX_CANDIDATE_ENTRY_POINT));
    if (!c.run) {
      return not_found(
          fmt::format("the candidate does not export `{}` with C linkage (see atrex/candidate.h)",
                      ATREX_CANDIDATE_ENTRY_POINT));
    }
    c.error_message =
        reinterpret_cast<AtrexCandidateErrorFn>(::dlsym(handle, ATREX_CANDIDATE_ERROR_SYMBOL));
    return c;
  }
};

}  // namespace

std::unique_ptr<CandidateLoader> make_shared_object_loader() {
  return std::make_unique<SharedObjectLoader>();
}

}  // namespace atrex::runner::child
