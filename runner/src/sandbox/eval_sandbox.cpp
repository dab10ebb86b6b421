#include "sandbox/eval_sandbox.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "atrex/runner/python_site.h"

namespace atrex::runner {
namespace fs = std::filesystem;

SandboxView eval_sandbox_view(Backend backend, const fs::path& child_binary,
                              const fs::path& library) {
  SandboxView v;
  // The child and the judge in the runner's session, so in one scheduling autogroup: the
  // judge's brackets hold two wake-ups between them (sandbox.h); TIOCSTI is denied by the
  // child's seccomp filter (seccomp.h) instead.
  v.new_session = false;
  std::error_code ec;
  // The binary is run by the path it has here: bound at that path (and, when a link leads
  // elsewhere, at its target too, which the loader follows).
  v.read_only.push_back(child_binary);
  if (const fs::path c = fs::weakly_canonical(child_binary, ec); !ec && c != child_binary)
    v.read_only.push_back(c);
  if (!library.empty()) v.read_only.push_back(library);
  // A Python candidate (python_site.h): the embedding layer next to the child, the site's
  // libpython and its trees (base_prefix, every sys.path entry: a venv's site-packages, torch,
  // triton), read-only, at their resolved paths too.
  if (auto site = python_artifact_site(library)) {
    auto bind = [&](const fs::path& p) {
      if (p.empty() || !p.is_absolute() || !fs::exists(p, ec)) return;
      v.read_only.push_back(p);
      if (const fs::path c = fs::canonical(p, ec); !ec && c != p) v.read_only.push_back(c);
    };
    bind(child_binary.parent_path() / "libatrex-python-shim.so");
    bind(fs::weakly_canonical(child_binary, ec).parent_path() / "libatrex-python-shim.so");
    bind(site->libpython);
    bind(site->home);
    // Debian's BLAS/LAPACK (numpy's, torch's) are reached through update-alternatives links
    // (/usr/lib/<arch>/libblas.so.3 -> /etc/alternatives/...): without them torch does not import.
    bind("/etc/alternatives");
    for (const auto& p : site->sys_path) bind(p);
  }
  for (const char* var : {"LD_LIBRARY_PATH", "ATREX_SANDBOX_BIND"})
    for (fs::path& p : resolved_folders_of(var)) v.read_only.push_back(std::move(p));
  if (backend == Backend::kCpu) {
    v.read_only.emplace_back("/sys/devices/system/cpu");
    return v;
  }
  v.sys = true;
  if (backend == Backend::kCuda) {
    for (const auto& e : fs::directory_iterator("/dev", ec)) {
      if (e.path().filename().string().rfind("nvidia", 0) == 0) v.devices.push_back(e.path());
    }
  } else {
    v.devices = {"/dev/kfd", "/dev/dri"};
  }
  return v;
}

ResourceLimits::Limits eval_child_limits(Backend backend, const EvalSandbox& sandbox) {
  ResourceLimits::Limits l;
  l.file_size_bytes = 64ull << 20;
  l.open_files = 4096;
  if (backend == Backend::kCpu) {
    l.address_space_bytes = sandbox.cpu_memory_bytes;
    if (l.address_space_bytes == 0) {
      const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
      if (pages > 0 && page > 0) {
        l.address_space_bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 4 * 3;
      }
    }
  }
  return l;
}

ChildCgroup::Limits eval_child_cgroup_limits(Backend backend, const EvalSandbox& sandbox) {
  ChildCgroup::Limits l;
  l.memory_bytes = backend == Backend::kCpu ? eval_child_limits(backend, sandbox).address_space_bytes
                                            : 0;
  if (l.memory_bytes == 0) {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0)
      l.memory_bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 4 * 3;
  }
  l.tasks = std::max<uint64_t>(1024, 8ull * std::max(1u, std::thread::hardware_concurrency()));
  return l;
}

}  // namespace atrex::runner
