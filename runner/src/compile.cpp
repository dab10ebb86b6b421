#include "atrex/runner/compile.h"

#include <unistd.h>

#include <cstdlib>
#include <random>

#include <fmt/format.h>

#include "atrex/common/hash.h"
#include "atrex/common/json_io.h"
#include "atrex/common/process/sandbox.h"
#include "atrex/common/process/subprocess.h"
#include "atrex/problems/suite.h"
#include "atrex/runner/python_site.h"
#include "sandbox/compile_sandbox.h"

namespace atrex::runner {
namespace fs = std::filesystem;

fs::path default_cache_dir() {
  if (const char* e = std::getenv("ATREX_CACHE_DIR"); e && *e) return e;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "atrex";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "atrex";
  return fs::temp_directory_path() / "atrex-cache";
}

fs::path default_include_dir() {
  if (const char* e = std::getenv("ATREX_INCLUDE_DIR"); e && *e) return e;
  return problems::executable_dir().parent_path() / "share" / "atrex" / "include";
}

CompileCache::CompileCache(fs::path dir, fs::path include_dir,
                           std::optional<std::string> native_target)
    // Absolute from here on: the compiler runs in the sandbox's own working folder, where a
    // relative cache or include folder (ATREX_CACHE_DIR=.cache) names nothing.
    : dir_(dir.empty() ? dir : fs::absolute(dir)),
      include_dir_(include_dir.empty() ? include_dir : fs::absolute(include_dir)) {
  toolchains_[Backend::kCpu] = make_cxx_toolchain(std::move(native_target));
  toolchains_[Backend::kCuda] = make_nvcc_toolchain();
  toolchains_[Backend::kHip] = make_hipcc_toolchain();
}

const Toolchain& CompileCache::toolchain(Backend backend) const {
  const auto it = toolchains_.find(backend);
  ATREX_ASSERT(it != toolchains_.end(), "every backend has a toolchain");
  return *it->second;
}

std::vector<std::string> CompileCache::flags_for(Backend backend, const std::string& arch) const {
  return toolchain(backend).flags(arch, include_dir_);
}

namespace {

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
  return s;
}

// Whether a compile that exited non-zero failed for this host's reasons, not the source's: the
// driver reports one of its own programs killed by a signal (g++: "Killed signal terminated
// program cc1plus"; nvcc: "'cicc' died due to signal 9"; clang: "unable to execute command:
// Killed", "command failed due to signal": the OOM killer's doing or a limit's; the driver itself
// exits 1, so term_signal does not say it: the compile-sandbox attack of 2026-12-06 cached an
// honest source's OOM kill as a .fail), or bwrap failed to set the sandbox up ("bwrap: ...").
bool host_failure(const std::string& output, bool sandboxed) {
  if (sandboxed && output.rfind("bwrap: ", 0) == 0) return true;
  for (const char* what : {"signal terminated program", "died due to signal",
                           "unable to execute command: Killed", "failed due to signal"}) {
    if (output.find(what) != std::string::npos) return true;
  }
  return false;
}

std::string random_suffix() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}.{:x}", ::getpid(), rng());
}

// A Python module (python_site.h): the site is probed (kUnavailable when it cannot run Python
// candidates on the backend), the module's syntax checked by the site's compile(), and the
// artifact is a folder <key>.py.d/ with the module under its own file name and site.json. The
// key covers the backend, the site (interpreter, version, libpython, sys.path, torch, triton)
// and the source.
Result<CompileOutcome> compile_python(const fs::path& dir, const CandidateRef& cand,
                                      double timeout_s, const fs::path& bwrap,
                                      const fs::path& include_dir) {
  const auto t0 = std::chrono::steady_clock::now();
  ATREX_ASSIGN_OR_RETURN(std::string interpreter, python_interpreter());
  ATREX_ASSIGN_OR_RETURN(PythonSite site, probe_python_site(interpreter));
  ATREX_TRY(python_site_supports(site, cand.backend));
  site.module = cand.file_name.empty() ? "generated_kernel.py" : cand.file_name;
  if (site.module.find('/') != std::string::npos || site.module[0] == '.') {
    return invalid_input(fmt::format("candidate file name \"{}\": a plain file name", site.module));
  }
  CompileOutcome out;
  // Sandboxed or not is in the key, as for compiled candidates (CompileCache::compile).
  out.key = sha256_hex(fmt::format("python\n{}\n{}\ncompile sandbox: {}\n{}",
                                   backend_name(cand.backend), to_json(site).dump(),
                                   bwrap.empty() ? "none" : "bwrap", cand.source));
  const fs::path sub = dir / out.key.substr(0, 2);
  const fs::path art = sub / (out.key + ".py.d");
  const fs::path fail = sub / (out.key + ".fail");
  std::error_code ec;
  fs::create_directories(sub, ec);
  if (ec)
    return io_error(
        fmt::format("{}: cannot create compile cache folder: {}", sub.string(), ec.message()));
  if (fs::exists(art / "site.json", ec)) {
    out.ok = true;
    out.cache_hit = true;
    out.library = art;
  } else if (fs::exists(fail, ec)) {
    out.cache_hit = true;
    ATREX_ASSIGN_OR_RETURN(out.log, read_text_file(fail));
  } else {
    const std::string suffix = random_suffix();
    ATREX_ASSIGN_OR_RETURN(PythonCompile c,
                           check_python_module(site, cand.source, site.module,
                                               sub / (out.key + "." + suffix + ".check"),
                                               timeout_s, bwrap, include_dir));
    if (!c.ok) {
      out.log = c.log;
      ATREX_TRY(write_text_file_atomic(fail, out.log));
    } else {
      const fs::path tmp = sub / (out.key + "." + suffix + ".py.d");
      fs::create_directories(tmp, ec);
      if (ec) return io_error(fmt::format("{}: {}", tmp.string(), ec.message()));
      ATREX_TRY(write_text_file_atomic(tmp / site.module, cand.source));
      ATREX_TRY(write_text_file_atomic(tmp / "site.json", to_json(site).dump(2)));
      fs::rename(tmp, art, ec);
      if (ec && !fs::exists(art / "site.json")) {
        return io_error(fmt::format("{}: cannot publish the module: {}", art.string(), ec.message()));
      }
      if (ec) fs::remove_all(tmp, ec);  // another runner published it first
      out.ok = true;
      out.library = art;
    }
  }
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace

Result<CompileOutcome> CompileCache::compile(const CandidateRef& cand, const std::string& arch,
                                             double timeout_s) {
  if (is_python_candidate(cand)) return compile_python(dir_, cand, timeout_s, bwrap_, include_dir_);
  const auto t0 = std::chrono::steady_clock::now();
  const Toolchain& tc = toolchain(cand.backend);
  const std::string& compiler = tc.compiler();
  ATREX_ASSIGN_OR_RETURN(std::string identity, tc.identity(arch));
  const auto flags = tc.flags(arch, include_dir_);
  std::string material = fmt::format("{}\n{}\n{}\n", backend_name(cand.backend), arch, identity);
  // The include folder's path is left out (the header's content is hashed below) so that a cache
  // filled on one machine serves another with the same compiler and flags.
  for (const auto& f : flags) {
    if (f.rfind("-I", 0) != 0) material += f + "\n";
  }
  // The include folder's content is part of the ABI: hash the headers, not the path.
  for (const char* name : {"candidate.h", "candidate_util.h"}) {
    auto header = read_text_file(include_dir_ / "atrex" / name);
    if (!header) {
      return tl::unexpected(
          with_context(header.error(), "candidate ABI header missing from include folder"));
    }
    material += sha256_hex(*header) + "\n";
  }
  // Whether the compiler ran sandboxed: an object or a .fail made by an unsandboxed compile
  // (`atrex compile --no-sandbox`, `atrex eval --no-sandbox`) never serves a sandboxed one (it may
  // hold any file its compiler could read).
  material += bwrap_.empty() ? "compile sandbox: none\n" : "compile sandbox: bwrap\n";
  material += cand.source;
  CompileOutcome out;
  out.key = sha256_hex(material);
  const fs::path sub = dir_ / out.key.substr(0, 2);
  const fs::path lib = sub / (out.key + ".so");
  const fs::path fail = sub / (out.key + ".fail");
  std::error_code ec;
  fs::create_directories(sub, ec);
  if (ec)
    return io_error(
        fmt::format("{}: cannot create compile cache folder: {}", sub.string(), ec.message()));
  if (fs::exists(lib, ec)) {
    out.ok = true;
    out.cache_hit = true;
    out.library = lib;
  } else if (fs::exists(fail, ec)) {
    out.cache_hit = true;
    ATREX_ASSIGN_OR_RETURN(out.log, read_text_file(fail));
  } else {
    // A sandbox that cannot start is this host's failure, not the compiler's verdict on the
    // source: an error, never a cached .fail (the cache is shared across hosts).
    if (!bwrap_.empty()) ATREX_TRY(probe_bwrap(bwrap_));
    const std::string suffix = random_suffix();
    const std::string ext = source_extension(cand.backend);
    const std::string display = cand.file_name.empty() ? "candidate" + ext : cand.file_name;
    // A private folder per compile: in the sandbox it is all the compiler may write (and of the
    // cache, all it sees: never another candidate's object).
    const fs::path work = sub / (out.key + "." + suffix + ".d");
    fs::create_directories(work, ec);
    if (ec) return io_error(fmt::format("{}: {}", work.string(), ec.message()));
    const fs::path src = work / ("candidate" + ext);
    const fs::path tmp_lib = work / "candidate.so";
    ATREX_TRY(write_text_file_atomic(src, cand.source));
    SubprocessOptions opt;
    opt.argv = {compiler};
    opt.argv.insert(opt.argv.end(), flags.begin(), flags.end());
    opt.argv.insert(opt.argv.end(), {"-o", tmp_lib.string(), src.string()});
    if (!bwrap_.empty()) {
      SandboxedCompile jail = sandboxed_compile(bwrap_, opt.argv, work, include_dir_);
      opt.argv = std::move(jail.argv);
      opt.env = std::move(jail.env);
    }
    opt.policies.push_back(&compile_limits());
    opt.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    opt.output_tail_bytes = 16384;
    ATREX_ASSIGN_OR_RETURN(SubprocessResult r, run_subprocess(opt));
    if (!bwrap_.empty()) translate_bwrap_exit(r);
    out.log = tc.explain_failure(replace_all(r.output_tail, src.string(), display), arch);
    // A failure is cached only when it is the compiler's verdict on the source: not when the
    // compiler was killed, nor when the cache folder was removed under it (the source is gone).
    const bool folder_intact = fs::exists(src, ec);
    if (r.ok() && fs::exists(tmp_lib, ec)) {
      fs::rename(tmp_lib, lib, ec);
      if (ec) {
        const std::string why = ec.message();
        fs::remove_all(work, ec);
        return io_error(fmt::format("{}: cannot publish compiled object: {}", lib.string(), why));
      }
      fs::remove_all(work, ec);
      out.ok = true;
      out.library = lib;
    } else {
      fs::remove_all(work, ec);
      if (!r.started) {
        out.log = fmt::format("compiler {} could not be started: {}", compiler, r.output_tail);
      } else if (r.timed_out) {
        out.log =
            fmt::format("compilation {} (limit {:.0f} s)\n{}", r.describe(), timeout_s, out.log);
      } else if (r.term_signal == 0 && folder_intact &&
                 !host_failure(r.output_tail, !bwrap_.empty())) {
        ATREX_TRY(write_text_file_atomic(
            fail, out.log.empty() ? r.describe() : out.log));  // deterministic failure
      }
      if (out.log.empty()) out.log = r.describe();
    }
  }
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace atrex::runner
