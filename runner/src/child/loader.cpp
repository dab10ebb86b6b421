#include "loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "atrex/common/json_io.h"
#include "atrex/common/wire/python_site.h"

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

std::string g_triton_cache_dir;

namespace fs = std::filesystem;

class PythonLoader final : public CandidateLoader {
 public:
  Result<LoadedCandidate> load(const std::string& artifact) override {
    if (!outcome_) outcome_ = load_once(artifact);
    if (!*outcome_) return tl::unexpected(outcome_->error());
    return **outcome_;
  }

 private:
  static Result<LoadedCandidate> load_once(const std::string& artifact) {
    const fs::path dir(artifact);
    auto json = read_json_file(dir / "site.json");
    if (!json) return invalid_input("cannot load the Python candidate: " + json.error().message);
    auto site = python_site_from_json(*json, (dir / "site.json").string());
    if (!site) return invalid_input("cannot load the Python candidate: " + site.error().message);
    // The site's libpython first, global: the embedding layer and torch's extension modules
    // (not linked to libpython) resolve the C API against it.
    if (!::dlopen(site->libpython.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
      return invalid_input(fmt::format("cannot load the site's libpython ({}): {}",
                                       site->libpython, ::dlerror()));
    }
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    const fs::path shim = exe.parent_path() / "libatrex-python-shim.so";
    void* h = ::dlopen(shim.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      return invalid_input(fmt::format("cannot load atrex's Python embedding layer ({}): {}",
                                       shim.string(), ::dlerror()));
    }
    using LoadFn = int (*)(const char*, const char*, const char*);
    using ErrorFn = const char* (*)();
    auto py_load = reinterpret_cast<LoadFn>(::dlsym(h, "atrex_python_load"));
    auto py_error = reinterpret_cast<ErrorFn>(::dlsym(h, "atrex_python_error"));
    LoadedCandidate c;
    c.run = reinterpret_cast<AtrexCandidateRunFn>(::dlsym(h, ATREX_CANDIDATE_ENTRY_POINT));
    c.error_message =
        reinterpret_cast<AtrexCandidateErrorFn>(::dlsym(h, ATREX_CANDIDATE_ERROR_SYMBOL));
    c.set_inplace = reinterpret_cast<void (*)(const int*, const int*, int)>(
        ::dlsym(h, "atrex_python_set_inplace"));
    c.python = true;
    if (!py_load || !py_error || !c.run || !c.error_message || !c.set_inplace) {
      return internal_error(shim.string() + ": an embedding layer without its entry points");
    }
    const char* tmp = std::getenv("TMPDIR");
    g_triton_cache_dir = fmt::format("{}/atrex-triton-{}", tmp && *tmp ? tmp : "/tmp", ::getpid());
    const Json cfg{{"sys_path", site->sys_path}, {"triton_cache_dir", g_triton_cache_dir}};
    const fs::path module = dir / site->module;
    if (py_load(module.c_str(), cfg.dump().c_str(), site->home.c_str()) != 0) {
      return invalid_input(py_error());
    }
    return c;
  }

  std::optional<Result<LoadedCandidate>> outcome_;
};

class AnyLoader final : public CandidateLoader {
 public:
  Result<LoadedCandidate> load(const std::string& artifact) override {
    std::error_code ec;
    if (fs::is_directory(artifact, ec)) return python_.load(artifact);
    return shared_.load(artifact);
  }

 private:
  SharedObjectLoader shared_;
  PythonLoader python_;
};

}  // namespace

std::unique_ptr<CandidateLoader> make_shared_object_loader() {
  return std::make_unique<SharedObjectLoader>();
}

std::unique_ptr<CandidateLoader> make_candidate_loader() { return std::make_unique<AnyLoader>(); }

const std::string& python_triton_cache_dir() { return g_triton_cache_dir; }

}  // namespace atrex::runner::child
