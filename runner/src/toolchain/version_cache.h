// A compiler's `--version` output (or another probe), computed once per key and shared by the
// threads of a runner (compile ahead runs beside the evaluation).
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "atrex/common/error.h"
#include "atrex/common/process/subprocess.h"

namespace atrex::runner::toolchain {

class ProbeCache {
 public:
  Result<std::string> get(const std::string& key,
                          const std::function<Result<std::string>()>& probe) const {
    {
      std::lock_guard lock(mu_);
      if (auto it = values_.find(key); it != values_.end()) return it->second;
    }
    ATREX_ASSIGN_OR_RETURN(std::string v, probe());
    std::lock_guard lock(mu_);
    return values_.emplace(key, std::move(v)).first->second;
  }

 private:
  mutable std::mutex mu_;
  mutable std::map<std::string, std::string> values_;
};

// `argv`'s output, or "unavailable: <why>" (a missing compiler still gives a key; the compile
// then fails with the reason).
inline Result<std::string> version_of(std::vector<std::string> argv) {
  SubprocessOptions opt;
  opt.argv = std::move(argv);
  opt.timeout = std::chrono::seconds(30);
  ATREX_ASSIGN_OR_RETURN(SubprocessResult r, run_subprocess(opt));
  return r.ok() ? r.output_tail : "unavailable: " + r.describe() + " " + r.output_tail;
}

}  // namespace atrex::runner::toolchain
