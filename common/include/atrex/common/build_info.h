// The atrex build this process is: what `atrex --version` prints and what a sweep's manifest
// records of the build that produced its results (wire/manifest.h BuildRecord). Link
// atrex::build_info (cmake/AtrexBuildInfo.cmake); the commit is taken at build time.
#pragma once

#include <string>

namespace atrex {

struct BuildInfo {
  std::string version;       // the project version, e.g. "0.1.0"
  std::string commit;        // `git describe --always --dirty --abbrev=12`, or "unknown"
  std::string build_type;    // CMAKE_BUILD_TYPE, e.g. "RelWithDebInfo"
  std::string cxx_compiler;  // "GNU 12.2.0 (/usr/bin/c++)"
  std::string cxx_flags;     // CMAKE_CXX_FLAGS + the build type's flags
  std::string cuda_compiler;  // "NVIDIA 13.0.88 (/usr/local/cuda/bin/nvcc)"; "" without CUDA
};

const BuildInfo& build_info();

// "atrex 0.1.0 (2618e7b4c1d2-dirty, RelWithDebInfo, GNU 12.2.0)": one line for --version and logs.
std::string build_info_line();

}  // namespace atrex
