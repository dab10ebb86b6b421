// atrex.python-site/1: the Python a Python candidate runs in (docs/python-candidates.md).
// Written by the compile gate (runner/src/python_site.cpp asks the chosen interpreter,
// $ATREX_PYTHON or `python3`, for its version, libpython, sys.path and torch / triton versions)
// into the candidate's artifact folder as site.json next to its module; read by the evaluation
// child (which loads `libpython` with RTLD_GLOBAL and then atrex's embedding object) and by the
// sandbox (which binds `libpython`, `home` and every `sys_path` entry read-only).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"

namespace atrex {

inline constexpr const char* kPythonSiteSchema = "atrex.python-site/1";

struct PythonSite {
  std::string interpreter;            // as asked: an absolute path
  std::string version;                // "3.12.3"
  int version_hex = 0;                // sys.hexversion
  std::string libpython;              // absolute path of the shared libpython
  std::string home;                   // sys.base_prefix (PYTHONHOME of the embedded interpreter)
  std::vector<std::string> sys_path;  // the interpreter's sys.path (a venv's site-packages too)
  std::optional<std::string> torch;   // torch.__version__; null when torch does not import
  std::optional<std::string> triton;  // triton.__version__; null when triton does not import
  std::string module;                 // the candidate's file name inside the artifact folder
};
Json to_json(const PythonSite& s);
// Strict: every member present and known. `source` names the file in errors (kInvalidInput).
Result<PythonSite> python_site_from_json(const Json& j, const std::string& source);

}  // namespace atrex
