// Paths for tests that may run from a build tree carried to another machine (the GPU host):
// the compiled-in source path when it exists, else the same path relative to the build tree
// (<root>/build/<preset>/bin/<test> -> <root>).
#pragma once

#include <filesystem>
#include <string>

#include "atrex/problems/suite.h"

namespace atrex::testing {

inline std::filesystem::path source_path(const std::string& compiled_abs,
                                         const std::string& rel_from_root) {
  std::error_code ec;
  if (std::filesystem::exists(compiled_abs, ec)) return compiled_abs;
  return problems::executable_dir().parent_path().parent_path().parent_path() / rel_from_root;
}

}  // namespace atrex::testing
