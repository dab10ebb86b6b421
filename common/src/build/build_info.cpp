#include "atrex/common/build_info.h"

#include <fmt/format.h>

#include "build_config.h"
#include "git_describe.h"

namespace atrex {

const BuildInfo& build_info() {
  static const BuildInfo info{ATREX_VERSION,      ATREX_GIT_DESCRIBE, ATREX_BUILD_TYPE,
                              ATREX_CXX_COMPILER, ATREX_CXX_FLAGS,    ATREX_CUDA_COMPILER};
  return info;
}

std::string build_info_line() {
  const BuildInfo& b = build_info();
  std::string compiler = b.cxx_compiler.substr(0, b.cxx_compiler.find(" ("));
  return fmt::format("atrex {} ({}, {}, {})", b.version, b.commit,
                     b.build_type.empty() ? "no build type" : b.build_type, compiler);
}

}  // namespace atrex
