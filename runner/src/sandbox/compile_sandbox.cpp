#include "sandbox/compile_sandbox.h"

#include <cstdlib>
#include <sstream>

#include "atrex/common/process/sandbox.h"

namespace atrex::runner {
namespace fs = std::filesystem;

namespace {

// `program` as exec would find it: itself when it has a '/', else the first match on PATH.
fs::path find_program(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::error_code ec;
  for (std::string dir; std::getline(ss, dir, ':');) {
    if (!dir.empty() && fs::exists(fs::path(dir) / program, ec)) return fs::path(dir) / program;
  }
  return program;
}

// The folders of a toolchain root a compiler's headers, libraries and helper programs live in
// (nvcc's cicc under nvvm/, ptxas in bin/, the CUDA headers under targets/; ROCm's under lib/
// and llvm/, its version in .info/). Only these: a compiler at ~/bin/g++ must not bind the whole
// home folder (its .ssh, its ~/.cache/atrex) into the sandbox (the compile-sandbox attack of
// 2026-12-06).
constexpr const char* kToolchainFolders[] = {"bin",     "lib",   "lib64", "libexec",
                                             "include", "nvvm",  "targets", "share",
                                             "llvm",    "amdgcn", ".info"};

// The tree a compiler outside /usr lives in (<root>/bin/<compiler>), for the compiler as named
// and as resolved (a symlink to another tree): kToolchainFolders of each root, where they exist.
void bind_toolchain(const fs::path& compiler, std::vector<fs::path>& out) {
  std::error_code ec;
  for (const fs::path& p : {compiler, fs::canonical(compiler, ec)}) {
    if (p.empty() || !p.is_absolute()) continue;
    const fs::path root = p.parent_path().parent_path();
    // /usr is bound whole already (a CUDA toolkit at /usr/local/cuda: its links resolve there,
    // and bwrap cannot make a mount point under a link of the read-only /usr).
    const std::string r = root.lexically_normal().string();
    if (r.empty() || r == "/" || r == "/usr" || r.rfind("/usr/", 0) == 0) continue;
    for (const char* name : kToolchainFolders) {
      if (fs::is_directory(root / name, ec)) out.push_back(root / name);
    }
  }
}

}  // namespace

SandboxedCompile sandboxed_compile(const fs::path& bwrap, const std::vector<std::string>& command,
                                   const fs::path& work, const fs::path& include_dir) {
  SandboxView view;
  std::error_code ec;
  const fs::path compiler = find_program(command.at(0));
  bind_toolchain(compiler, view.read_only);
  view.read_only.push_back("/etc/alternatives");
  const fs::path inc = fs::canonical(include_dir, ec);
  view.read_only.push_back(ec ? include_dir : inc);
  // Resolved ("Can't mkdir /usr/local/cuda/lib64" failed every compile on the GPU host on
  // 2026-12-07 while they were bound as named).
  for (fs::path& dir : resolved_folders_of("LD_LIBRARY_PATH"))
    view.read_only.push_back(std::move(dir));
  view.read_write.push_back(work);
  view.scratch_bytes = 2ull << 30;
  SandboxedCompile out;
  out.argv = bwrap_argv(bwrap, view, command);
  out.env = clean_child_environment("/tmp");
  if (compiler.has_parent_path())
    out.env["PATH"] = compiler.parent_path().string() + ":" + out.env["PATH"];
  return out;
}

const ResourceLimits& compile_limits() {
  static const ResourceLimits limits(
      ResourceLimits::Limits{.address_space_bytes = 6ull << 30, .file_size_bytes = 64ull << 20});
  return limits;
}

}  // namespace atrex::runner
