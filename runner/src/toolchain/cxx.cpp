// The cpu backend's toolchain: the system C++ compiler with -march=native, so the cache key
// carries the CPU target that resolves to on this host (an object built on another CPU model
// may use instructions this one lacks).
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "atrex/common/hash.h"
#include "atrex/runner/toolchain.h"
#include "version_cache.h"

namespace atrex::runner {
namespace fs = std::filesystem;
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

namespace {

class CxxToolchain final : public Toolchain {
 public:
  explicit CxxToolchain(std::optional<std::string> native_target)
      : native_target_(std::move(native_target)) {}
  Backend backend() const override { return Backend::kCpu; }
  const std::string& compiler() const override { return compiler_; }
  std::vector<std::string> flags(std::string_view, const fs::path& include_dir) const override {
    return {"-std=c++17",
            "-O3",
            "-march=native",
            "-shared",
            "-fPIC",
            "-fvisibility=hidden",
            "-I" + include_dir.string()};
  }
  Result<std::string> identity(std::string_view) const override {
    ATREX_ASSIGN_OR_RETURN(std::string version, cache_.get(compiler_, [&] {
      return toolchain::version_of({compiler_, "--version"});
    }));
    ATREX_ASSIGN_OR_RETURN(std::string target, cache_.get("native\n" + compiler_, [&] {
      return Result<std::string>(native_target_ ? *native_target_ : native_cpu_target(compiler_));
    }));
    return version + "\n" + target;
  }

 private:
  std::string compiler_ = [] {
    const char* e = std::getenv("CXX");
    return std::string(e && *e ? e : "c++");
  }();
  std::optional<std::string> native_target_;
  toolchain::ProbeCache cache_;
};

}  // namespace

std::unique_ptr<Toolchain> make_cxx_toolchain(std::optional<std::string> native_target) {
  return std::make_unique<CxxToolchain>(std::move(native_target));
}

}  // namespace atrex::runner
