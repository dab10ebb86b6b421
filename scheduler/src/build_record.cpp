#include "atrex/scheduler/build_record.h"

#include <memory>

#include "atrex/common/build_info.h"
#include "atrex/common/clock.h"
#include "atrex/runner/compile.h"
#include "atrex/runner/environment.h"
#include "atrex/runner/toolchain.h"
#include "host_name.h"

namespace atrex::scheduler {
namespace {

std::unique_ptr<runner::Toolchain> toolchain_for(Backend backend) {
  switch (backend) {
    case Backend::kCpu: return runner::make_cxx_toolchain(std::nullopt);
    case Backend::kCuda: return runner::make_nvcc_toolchain();
    case Backend::kHip: return runner::make_hipcc_toolchain();
  }
  ATREX_UNREACHABLE("Backend");
}

}  // namespace

BuildRecord current_build_record(Backend backend) {
  const BuildInfo& info = build_info();
  BuildRecord b;
  b.atrex_version = info.version;
  b.commit = info.commit;
  b.build_type = info.build_type;
  b.cxx_compiler = info.cxx_compiler;
  b.cxx_flags = info.cxx_flags;
  b.cuda_compiler = info.cuda_compiler;
  b.host = host_name();
  if (b.host.empty()) b.host = "unknown";
  b.recorded_at = utc_timestamp_now();
  const auto tc = toolchain_for(backend);
  b.candidate_compiler = tc->compiler();
  b.candidate_arch = runner::default_arch(backend);
  b.candidate_flags = tc->flags(b.candidate_arch, runner::default_include_dir());
  // identity() is --version (cpu: followed by the -march=native target); its first line names
  // the compiler and its version.
  auto identity = tc->identity(b.candidate_arch);
  std::string v = identity ? *identity : "unavailable: " + identity.error().message;
  b.candidate_compiler_version = v.substr(0, v.find('\n'));
  return b;
}

bool record_build(std::vector<BuildRecord>& builds, BuildRecord b) {
  if (!builds.empty() && builds.back().same_build(b)) return false;
  builds.push_back(std::move(b));
  return true;
}

}  // namespace atrex::scheduler
