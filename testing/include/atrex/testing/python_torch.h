// The Python that end-to-end tests of Python candidates use (docs/python-candidates.md):
// $ATREX_PYTHON, else Debian's /usr/bin/python3 (python3-torch), with this build's shim. Header
// only; the test links atrex::runner.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "atrex/runner/python_site.h"

namespace atrex::testing {

// The interpreter, or empty with the reason in `why` when it has no torch or the shim is missing.
inline std::string python_with_torch(const std::filesystem::path& bin_dir, std::string* why) {
  const char* e = std::getenv("ATREX_PYTHON");
  const std::string interpreter = e && *e ? e : "/usr/bin/python3";
  auto site = runner::probe_python_site(interpreter);
  if (!site) {
    *why = site.error().message;
    return "";
  }
  if (auto s = runner::python_site_supports(*site, Backend::kCpu); !s) {
    *why = s.error().message;
    return "";
  }
  if (!std::filesystem::exists(bin_dir / "libatrex-python-shim.so")) {
    *why = "libatrex-python-shim.so was not built (no Python 3.11+ headers at configure time)";
    return "";
  }
  return interpreter;
}

// Whether a missing torch is a failure (CI sets ATREX_REQUIRE_PYTHON_TORCH=1) or a skip.
inline bool python_torch_required() {
  const char* e = std::getenv("ATREX_REQUIRE_PYTHON_TORCH");
  return e && std::string(e) == "1";
}

}  // namespace atrex::testing

// In a test body: the interpreter into `var`, or FAIL / GTEST_SKIP with the reason.
#define ATREX_REQUIRE_PYTHON_WITH_TORCH(var)                                              \
  std::string var;                                                                        \
  {                                                                                       \
    std::string why_;                                                                     \
    var = ::atrex::testing::python_with_torch(ATREX_TEST_BIN_DIR, &why_);                 \
    if (var.empty()) {                                                                    \
      if (::atrex::testing::python_torch_required())                                      \
        FAIL() << "ATREX_REQUIRE_PYTHON_TORCH=1 but " << why_;                            \
      GTEST_SKIP() << why_;                                                               \
    }                                                                                     \
  }
