#include "atrex/runner/python_site.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "atrex/common/json_io.h"
#include "atrex/common/process/sandbox.h"
#include "atrex/common/process/subprocess.h"
#include "sandbox/compile_sandbox.h"

namespace atrex::runner {
namespace fs = std::filesystem;

namespace {

// Prints atrex.python-site/1 (module left empty) as one JSON line. torch and triton are
// imported to learn their versions; a failure is recorded as null with the reason on stderr.
constexpr const char* kProbe = R"PY(
import json, os, sys, sysconfig
def lib():
    d = sysconfig.get_config_var('LIBDIR') or ''
    names = [sysconfig.get_config_var(n) or '' for n in ('INSTSONAME', 'LDLIBRARY')]
    names.append('libpython%d.%d.so.1.0' % sys.version_info[:2])
    dirs = [d, os.path.join(sys.base_prefix, 'lib')]
    multi = sysconfig.get_config_var('MULTIARCH')
    if multi: dirs.append(os.path.join('/usr/lib', multi))
    for dd in dirs:
        for n in names:
            p = os.path.join(dd, n)
            if n.endswith('.a') or not n or not os.path.isfile(p): continue
            return os.path.realpath(p)
    return ''
def ver(name):
    try:
        m = __import__(name)
        return str(m.__version__)
    except BaseException as e:
        print(f'{name}: {type(e).__name__}: {e}', file=sys.stderr)
        return None
open(sys.argv[1], 'w').write(json.dumps({'schema': 'atrex.python-site/1', 'interpreter': sys.executable,
  'version': '%d.%d.%d' % sys.version_info[:3], 'version_hex': sys.hexversion,
  'libpython': lib(), 'home': sys.base_prefix,
  'sys_path': [p for p in sys.path if p and os.path.isdir(p)],
  'torch': ver('torch'), 'triton': ver('triton'), 'module': ''}))
)PY";

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  const auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

}  // namespace

Result<std::string> python_interpreter() {
  if (const char* env = std::getenv("ATREX_PYTHON"); env && *env) {
    std::error_code ec;
    if (!fs::path(env).is_absolute() || !fs::exists(env, ec)) {
      return make_error(ErrorCode::kUnavailable,
                        fmt::format("ATREX_PYTHON={}: no such interpreter (an absolute path)", env));
    }
    return std::string(env);
  }
  if (const char* path = std::getenv("PATH")) {
    std::string list = path;
    size_t start = 0;
    while (start <= list.size()) {
      const size_t end = std::min(list.find(':', start), list.size());
      const fs::path p = fs::path(list.substr(start, end - start)) / "python3";
      std::error_code ec;
      if (p.is_absolute() && fs::exists(p, ec)) return p.string();
      start = end + 1;
    }
  }
  return make_error(ErrorCode::kUnavailable,
                    "Python candidates need a Python: set ATREX_PYTHON or put python3 in PATH");
}

Result<PythonSite> probe_python_site(const std::string& interpreter) {
  static std::mutex mu;
  static std::map<std::string, PythonSite> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(interpreter); it != cache.end()) return it->second;
  }
  const fs::path out = fs::temp_directory_path() /
                       fmt::format("atrex-python-site-{}-{}.json", ::getpid(), std::rand());
  SubprocessOptions opt;
  // Not -I: a venv's interpreter must see its site-packages; PYTHONSAFEPATH keeps the current
  // folder out of sys.path.
  opt.argv = {interpreter, "-c", kProbe, out.string()};
  opt.extra_env = {{"PYTHONSAFEPATH", "1"}, {"PYTHONNOUSERSITE", "1"},
                   {"PYTHONDONTWRITEBYTECODE", "1"}};
  opt.timeout = std::chrono::milliseconds(120'000);
  opt.output_tail_bytes = 8192;
  ATREX_ASSIGN_OR_RETURN(SubprocessResult r, run_subprocess(opt));
  auto text = read_text_file(out);
  std::error_code ec;
  fs::remove(out, ec);
  if (!r.ok() || !text) {
    return make_error(ErrorCode::kUnavailable,
                      fmt::format("the Python for Python candidates ({}) did not answer ({}): {}",
                                  interpreter, r.describe(), last_line(r.output_tail)));
  }
  PythonSite site;
  try {
    ATREX_ASSIGN_OR_RETURN(site, python_site_from_json(Json::parse(*text), interpreter));
  } catch (const Json::exception& e) {
    return internal_error(fmt::format("{}: unreadable site probe: {}", interpreter, e.what()));
  }
  site.interpreter = interpreter;
  if (site.version_hex < 0x030B0000) {
    return make_error(ErrorCode::kUnavailable,
                      fmt::format("{} is Python {}; Python candidates need 3.11 or newer "
                                  "(atrex's embedding layer uses the 3.11 stable ABI)",
                                  interpreter, site.version));
  }
  if (site.libpython.empty()) {
    return make_error(ErrorCode::kUnavailable,
                      fmt::format("{} (Python {}) has no shared libpython (LIBDIR/INSTSONAME); "
                                  "install it (Debian/Ubuntu: libpython{}) or point ATREX_PYTHON "
                                  "at a Python built with --enable-shared",
                                  interpreter, site.version,
                                  site.version.substr(0, site.version.rfind('.'))));
  }
  std::lock_guard<std::mutex> lock(mu);
  cache[interpreter] = site;
  return site;
}

Result<void> python_site_supports(const PythonSite& site, Backend backend) {
  if (!site.torch) {
    return make_error(ErrorCode::kUnavailable,
                      fmt::format("Python candidates need torch, and {} (Python {}) cannot import "
                                  "it (Debian: apt-get install python3-torch; or set ATREX_PYTHON)",
                                  site.interpreter, site.version));
  }
  if (backend == Backend::kCuda && !site.triton) {
    return make_error(ErrorCode::kUnavailable,
                      fmt::format("Python candidates on the cuda backend need triton, and {} "
                                  "(Python {}, torch {}) cannot import it",
                                  site.interpreter, site.version, *site.torch));
  }
  if (backend == Backend::kHip) {
    return make_error(ErrorCode::kUnavailable,
                      "Python candidates run on the cpu and cuda backends, not hip");
  }
  return ok();
}

std::optional<PythonSite> python_artifact_site(const fs::path& library) {
  std::error_code ec;
  if (library.empty() || !fs::is_directory(library, ec)) return std::nullopt;
  auto json = read_json_file(library / "site.json");
  if (!json) return std::nullopt;
  auto site = python_site_from_json(*json, (library / "site.json").string());
  if (!site) return std::nullopt;
  return *site;
}

Result<PythonCompile> check_python_module(const PythonSite& site, const std::string& source,
                                          const std::string& display, const fs::path& work,
                                          double timeout_s, const fs::path& bwrap,
                                          const fs::path& include_dir) {
  std::error_code ec;
  fs::create_directories(work, ec);
  if (ec) return io_error(fmt::format("{}: {}", work.string(), ec.message()));
  const fs::path scratch = work / "candidate.py";
  ATREX_TRY(write_text_file_atomic(scratch, source));
  SubprocessOptions opt;
  // compile() parses and compiles only: no candidate code runs here, outside the sandbox.
  opt.argv = {site.interpreter, "-I", "-S", "-c",
              "import sys, traceback\n"
              "src = open(sys.argv[1], 'rb').read()\n"
              "try:\n"
              "    compile(src, sys.argv[2], 'exec')\n"
              "except (SyntaxError, ValueError) as e:\n"
              "    sys.stdout.write(''.join(traceback.format_exception_only(type(e), e)))\n"
              "    sys.exit(1)\n",
              scratch.string(), display};
  if (!bwrap.empty()) {
    if (auto ready = probe_bwrap(bwrap); !ready) {
      fs::remove_all(work, ec);
      return tl::unexpected(ready.error());
    }
    SandboxedCompile jail = sandboxed_compile(bwrap, opt.argv, work, include_dir);
    opt.argv = std::move(jail.argv);
    opt.env = std::move(jail.env);
  }
  opt.policies.push_back(&compile_limits());
  opt.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  opt.output_tail_bytes = 8192;
  ATREX_ASSIGN_OR_RETURN(SubprocessResult r, run_subprocess(opt));
  if (!bwrap.empty()) translate_bwrap_exit(r);
  fs::remove_all(work, ec);
  PythonCompile out;
  out.ok = r.ok();
  out.log = out.ok ? "" : (r.output_tail.empty() ? r.describe() : r.output_tail);
  if (r.started && !r.timed_out && r.exit_code != 0 && r.exit_code != 1) {
    return internal_error(fmt::format("{}: the syntax check failed ({}): {}", site.interpreter,
                                      r.describe(), r.output_tail));
  }
  return out;
}

}  // namespace atrex::runner
