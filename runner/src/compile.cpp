#include "atrex/runner/compile.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "atrex/common/hash.h"
#include "atrex/common/json_io.h"
#include "atrex/problems/suite.h"
#include "atrex/runner/subprocess.h"

namespace atrex::runner {
namespace fs = std::filesystem;

std::string source_extension(const std::string& backend) {
  if (backend == "cuda") return ".cu";
  if (backend == "hip") return ".hip";
  return ".cpp";
}

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
    : dir_(std::move(dir)),
      include_dir_(std::move(include_dir)),
      native_target_(std::move(native_target)) {}

std::string CompileCache::compiler_for(const std::string& backend) const {
  if (backend == "cuda") {
    if (const char* e = std::getenv("CUDACXX"); e && *e) return e;
    std::error_code ec;
    if (fs::exists("/usr/local/cuda/bin/nvcc", ec)) return "/usr/local/cuda/bin/nvcc";
    return "nvcc";
  }
  if (backend == "hip") {
    if (const char* e = std::getenv("HIPCC"); e && *e) return e;
    return "hipcc";
  }
  if (const char* e = std::getenv("CXX"); e && *e) return e;
  return "c++";
}

std::vector<std::string> CompileCache::flags_for(const std::string& backend,
                                                 const std::string& arch) const {
  const std::string inc = "-I" + include_dir_.string();
  if (backend == "cuda") {
    // sm_90a (not plain sm_90) so candidates may use wgmma/setmaxnreg on Hopper (HOPPER.md).
    std::string a = arch.rfind("sm_", 0) == 0 ? arch.substr(3) : arch;
    return {"-std=c++17",
            "-O3",
            "-shared",
            "-Xcompiler",
            "-fPIC,-fvisibility=hidden",
            "--cudart",
            "shared",
            fmt::format("-gencode=arch=compute_{},code=sm_{}", a, a),
            inc};
  }
  if (backend == "hip") {
    return {
        "-std=c++17", "-O3", "-shared", "-fPIC", "-fvisibility=hidden", "--offload-arch=" + arch,
        inc};
  }
  return {"-std=c++17", "-O3", "-march=native", "-shared", "-fPIC", "-fvisibility=hidden", inc};
}

Result<std::string> CompileCache::compiler_identity(const std::string& compiler,
                                                    const std::string& backend,
                                                    const std::string& arch) {
  // hipcc --version without a target asks rocm_agent_enumerator for the local GPUs (a Python
  // traceback without one); with --offload-arch it prints only the HIP and clang versions.
  const std::string key = backend == "hip" ? compiler + "\n" + arch : compiler;
  {
    std::lock_guard lock(mu_);
    auto it = identities_.find(key);
    if (it != identities_.end()) return it->second;
  }
  SubprocessOptions opt;
  opt.argv = {compiler, "--version"};
  if (backend == "hip") opt.argv.push_back("--offload-arch=" + arch);
  opt.timeout = std::chrono::seconds(30);
  ATREX_ASSIGN_OR_RETURN(SubprocessResult r, run_subprocess(opt));
  std::string id = r.ok() ? r.output_tail : "unavailable: " + r.describe() + " " + r.output_tail;
  std::lock_guard lock(mu_);
  identities_[key] = id;
  return id;
}

std::string CompileCache::native_target_for(const std::string& compiler) {
  if (native_target_) return *native_target_;
  const std::string key = "native\n" + compiler;
  {
    std::lock_guard lock(mu_);
    auto it = identities_.find(key);
    if (it != identities_.end()) return it->second;
  }
  std::string target = native_cpu_target(compiler);
  std::lock_guard lock(mu_);
  identities_[key] = target;
  return target;
}

namespace {

std::string short_hash(const std::string& s) { return sha256_hex(s).substr(0, 16); }

// `compiler ARGS...`'s output (stdout and stderr), "" when it did not run cleanly.
std::string compiler_output(const std::string& compiler, std::vector<std::string> args) {
  SubprocessOptions opt;
  opt.argv = {compiler};
  opt.argv.insert(opt.argv.end(), args.begin(), args.end());
  opt.timeout = std::chrono::seconds(30);
  opt.output_tail_bytes = size_t{1} << 20;
  auto r = run_subprocess(opt);
  return r && r->ok() ? r->output_tail : "";
}

// gcc: the `-march=` line of `-Q --help=target` and a hash of every option it lists (the
// enabled ISA extensions). clang: `-###`'s -target-cpu and a hash of its -target-feature list.
std::string resolved_march(const std::string& compiler) {
  const std::string gcc = compiler_output(compiler, {"-march=native", "-Q", "--help=target"});
  if (!gcc.empty()) {
    std::istringstream lines(gcc);
    std::string march;
    for (std::string line; std::getline(lines, line);) {
      const auto at = line.find("-march=");
      if (at == std::string::npos || line.find_first_not_of(" \t") != at) continue;
      std::istringstream words(line.substr(at + 7));
      words >> march;
      break;
    }
    return fmt::format("march={} target-options={}", march, short_hash(gcc));
  }
  const std::string clang =
      compiler_output(compiler, {"-march=native", "-###", "-E", "-x", "c++", "/dev/null"});
  std::string cpu, features;
  std::istringstream words(clang);
  for (std::string w, prev; words >> w; prev = w) {
    if (prev == "\"-target-cpu\"") cpu = w.substr(1, w.size() - 2);  // quoted
    if (prev == "\"-target-feature\"") features += w;
  }
  if (cpu.empty()) return "march=unknown";
  return fmt::format("march={} target-features={}", cpu, short_hash(features));
}

}  // namespace

std::string native_cpu_target(const std::string& compiler) {
  std::string model, flags;
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line) && (model.empty() || flags.empty());) {
    const auto colon = line.find(':');
    if (colon == std::string::npos || colon == 0) continue;
    const std::string field = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (model.empty() && (field == "model name" || field == "cpu model" || field == "Processor"))
      model = value;
    if (flags.empty() && (field == "flags" || field == "Features" || field == "isa")) flags = value;
  }
  return fmt::format("{}; cpu={}; cpu-flags={}", resolved_march(compiler),
                     model.empty() ? "unknown" : model,
                     flags.empty() ? "unknown" : short_hash(flags));
}

std::string default_hip_arch() {
  if (const char* e = std::getenv("ATREX_HIP_ARCH"); e && *e) return e;
  return "gfx942";
}

namespace {

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
  return s;
}

std::string random_suffix() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}.{:x}", ::getpid(), rng());
}

}  // namespace

Result<CompileOutcome> CompileCache::compile(const CandidateRef& cand, const std::string& arch,
                                             double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string compiler = compiler_for(cand.backend);
  ATREX_ASSIGN_OR_RETURN(std::string identity, compiler_identity(compiler, cand.backend, arch));
  const auto flags = flags_for(cand.backend, arch);
  std::string material = cand.backend + "\n" + arch + "\n" + identity + "\n";
  // -march=native builds for this host's CPU: an object built on another model may use
  // instructions this one lacks.
  if (cand.backend == "cpu") material += native_target_for(compiler) + "\n";
  // The include folder's path is left out (the header's content is hashed below) so that a cache
  // filled on one machine serves another with the same compiler and flags.
  for (const auto& f : flags) {
    if (f.rfind("-I", 0) != 0) material += f + "\n";
  }
  // The include folder's content is part of the ABI: hash the header, not the path.
  auto header = read_text_file(include_dir_ / "atrex" / "candidate.h");
  if (!header)
    return tl::unexpected(
        with_context(header.error(), "candidate ABI header missing from include folder"));
  material += sha256_hex(*header) + "\n" + cand.source;
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
    const std::string suffix = random_suffix();
    const std::string display =
        cand.file_name.empty() ? "candidate" + source_extension(cand.backend) : cand.file_name;
    const fs::path src = sub / (out.key + "." + suffix + source_extension(cand.backend));
    const fs::path tmp_lib = sub / (out.key + "." + suffix + ".so");
    ATREX_TRY(write_text_file_atomic(src, cand.source));
    SubprocessOptions opt;
    opt.argv = {compiler};
    opt.argv.insert(opt.argv.end(), flags.begin(), flags.end());
    opt.argv.insert(opt.argv.end(), {"-o", tmp_lib.string(), src.string()});
    opt.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    opt.output_tail_bytes = 16384;
    ATREX_ASSIGN_OR_RETURN(SubprocessResult r, run_subprocess(opt));
    out.log = replace_all(r.output_tail, src.string(), display);
    if (cand.backend == "hip" &&
        out.log.find("invalid target ID '" + arch + "'") != std::string::npos) {
      out.log += fmt::format(
          "\natrex: this hipcc does not know the offload arch {} (Debian 12's HIP 5.2 predates "
          "MI300X's gfx942); "
          "set ATREX_HIP_ARCH or pass --arch with one it knows, e.g. gfx90a (MI200), to compile "
          "here\n",
          arch);
    }
    // A failure is cached only when it is the compiler's verdict on the source: not when the
    // compiler was killed, nor when the cache folder was removed under it (the source is gone).
    const bool folder_intact = fs::exists(src, ec);
    fs::remove(src, ec);
    if (r.ok() && fs::exists(tmp_lib, ec)) {
      fs::rename(tmp_lib, lib, ec);
      if (ec)
        return io_error(
            fmt::format("{}: cannot publish compiled object: {}", lib.string(), ec.message()));
      out.ok = true;
      out.library = lib;
    } else {
      fs::remove(tmp_lib, ec);
      if (!r.started) {
        out.log = fmt::format("compiler {} could not be started: {}", compiler, r.output_tail);
      } else if (r.timed_out) {
        out.log =
            fmt::format("compilation {} (limit {:.0f} s)\n{}", r.describe(), timeout_s, out.log);
      } else if (r.term_signal == 0 && folder_intact) {
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
