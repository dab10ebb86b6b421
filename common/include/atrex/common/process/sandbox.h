// The sandbox of untrusted code (DESIGN.md §5; docs/evaluation.md "Sandbox"): bubblewrap (`bwrap`,
// Debian `bubblewrap`) puts a command in its own user, mount, PID, IPC, network, UTS and cgroup
// namespaces with a read-only view of only the paths it is given, a size-limited tmpfs as its
// scratch folder, a fresh /proc of its own PID namespace and a minimal /dev. The seccomp filter
// the evaluation child installs on itself before it loads a candidate is `seccomp.h`'s; the
// resource limits are subprocess.h's `ResourceLimits`.
//
// Why bubblewrap and not the syscalls: it is the well-kept, audited tool for exactly this
// (Flatpak's sandbox), it works unprivileged and as root, and it makes the PID namespace's
// init so that every process of the sandbox dies with it. Its start costs a few milliseconds.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/common/process/subprocess.h"
#include "atrex/common/wire/sandbox_mode.h"

namespace atrex {

// What one sandboxed command may see. Paths are bound at the same place inside.
struct SandboxView {
  std::vector<std::filesystem::path> read_only;  // files or folders (missing ones are skipped)
  std::vector<std::filesystem::path> devices;    // device nodes bound read-write (GPUs)
  std::vector<std::filesystem::path> read_write;  // folders bound writable (a compile's work folder)
  bool system_folders = true;                    // /usr and the /lib*, /bin, /sbin links
  bool sys = false;                              // /sys read-only (GPU runtimes read it)
  uint64_t scratch_bytes = 256ull << 20;         // the tmpfs at /tmp (the working folder)
  uint64_t shm_bytes = 64ull << 20;              // the tmpfs at /dev/shm (/dev is read-only)
  // bwrap --new-session (setsid: no controlling terminal to push input into with TIOCSTI).
  // The evaluation children go without: with the kernel's autogroups
  // (kernel.sched_autogroup_enabled, the default) every session is a scheduling group of its
  // own, and on a loaded host a wake-up across groups waited milliseconds (the judge's brackets
  // of a 3 us call: median 1.8-6.7 ms in two sessions against 31-44 us in one, development VM
  // under a load of ~18); they deny TIOCSTI and TIOCLINUX in their seccomp filter instead.
  bool new_session = true;
};

// The bwrap program: $ATREX_BWRAP, else `bwrap` next to `beside` (a bundle ships it in bin/),
// else `bwrap` from PATH.
std::filesystem::path bwrap_program(const std::filesystem::path& beside = {});

// `command` wrapped in bwrap with `view`. The environment is the caller's to set
// (SubprocessOptions::env): bwrap passes it on unchanged.
std::vector<std::string> bwrap_argv(const std::filesystem::path& bwrap, const SandboxView& view,
                                    const std::vector<std::string>& command);

// Whether bwrap can make the namespaces here: runs `true` in the sandbox once per process and
// keeps the answer. kUnavailable naming bwrap's own message (no user namespaces, a container's
// seccomp profile, no bwrap) otherwise.
Status probe_bwrap(const std::filesystem::path& bwrap);

// The absolute folders of the colon-separated list in environment variable `var` (none when it
// is unset), each at its resolved path: bwrap binds a folder at the path the sandboxed program
// will use (clean_child_environment resolves LD_LIBRARY_PATH alike), and it cannot make a mount
// point through a link inside a tree it binds read-only (/usr/local/cuda/lib64 on a CUDA image,
// /usr/local/cuda and lib64 links: "Can't mkdir /usr/local/cuda/lib64").
std::vector<std::filesystem::path> resolved_folders_of(const char* var);

// bwrap exits 128 + N when the sandboxed command died of signal N: give the result that signal,
// so that records say "killed by signal 11 (SIGSEGV)" as without a sandbox.
void translate_bwrap_exit(SubprocessResult& r);

// The environment an evaluation child gets, with or without the sandbox: PATH, HOME and TMPDIR
// set to `scratch`, LANG=C.UTF-8, and from this process only the variables the GPU runtimes and
// the dynamic loader read (LD_LIBRARY_PATH, CUDA_*, NVIDIA_*, HIP_*, ROCR_*, HSA_*,
// ATREX_NO_CUPTI). Nothing else: no Redis URL, no credentials, no API keys.
std::map<std::string, std::string> clean_child_environment(const std::filesystem::path& scratch);

}  // namespace atrex
