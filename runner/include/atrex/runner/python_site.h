// Python candidates (docs/python-candidates.md): the site's interpreter, and the compile gate's
// work for a `.py` candidate (a syntax check by that interpreter; the artifact is a folder with
// the module and site.json, atrex.python-site/1).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "atrex/common/error.h"
#include "atrex/common/wire/backend.h"
#include "atrex/common/wire/eval_task.h"
#include "atrex/common/wire/python_site.h"

namespace atrex::runner {

// is_python_candidate (a file name ending in ".py"): atrex/common/wire/eval_task.h.

// The interpreter Python candidates run in: $ATREX_PYTHON, else `python3` found in PATH, as an
// absolute path. kUnavailable when neither exists.
Result<std::string> python_interpreter();

// Asks `interpreter` (absolute path) for its version, shared libpython, sys.base_prefix,
// sys.path and the torch and triton versions (one subprocess, ~1-3 s with torch). Cached per
// interpreter path for the life of the process. kUnavailable (exit 3) naming the interpreter
// when it does not run, is older than 3.11 (the embedding layer's stable ABI), or has no
// shared libpython.
Result<PythonSite> probe_python_site(const std::string& interpreter);

// kUnavailable when `site` cannot run Python candidates on `backend`: no torch (cpu, cuda), no
// triton (cuda).
Result<void> python_site_supports(const PythonSite& site, Backend backend);

// The site of a Python artifact folder (its site.json), or nullopt when `library` is not one
// (a compiled shared object).
std::optional<PythonSite> python_artifact_site(const std::filesystem::path& library);

// Compile gate for a Python module: `source` is checked by the site's compile() (no candidate
// code runs); a SyntaxError becomes a failed outcome whose log is Python's message (file name
// `display`, line, caret). `work`: a private folder the check may write (the source goes there,
// and it is all of the cache the sandbox shows). `bwrap`: the interpreter runs in the compile
// sandbox (sandbox/compile_sandbox.h, `include_dir` bound read-only as for a compiler); empty:
// unsandboxed. Either way it gets compile_limits(): the parser of an untrusted source is a
// compiler like any other (deep nesting, huge literals).
struct PythonCompile {
  bool ok = false;
  std::string log;
};
Result<PythonCompile> check_python_module(const PythonSite& site, const std::string& source,
                                          const std::string& display,
                                          const std::filesystem::path& work, double timeout_s,
                                          const std::filesystem::path& bwrap = {},
                                          const std::filesystem::path& include_dir = {});

}  // namespace atrex::runner
