// What an evaluation child may see and use (docs/evaluation.md "Sandbox"; runner-private): the
// bwrap view of a backend's child and the resource limits of every child, sandboxed or not.
#pragma once

#include <cstdint>
#include <filesystem>

#include "atrex/common/process/cgroup.h"
#include "atrex/common/process/sandbox.h"
#include "atrex/common/process/subprocess.h"
#include "atrex/common/wire/backend.h"

namespace atrex::runner {

// How the children of one evaluator run.
struct EvalSandbox {
  SandboxMode mode = SandboxMode::kBwrap;
  std::filesystem::path bwrap;  // bwrap_program(child_dir)
  // RLIMIT_AS of the cpu child (0: three quarters of this machine's memory). GPU children get
  // none: the CUDA and HIP runtimes map address ranges far larger than memory.
  uint64_t cpu_memory_bytes = 0;
};

// The read-only view: the child binary (that file alone, not its folder), the compiled candidate
// (empty for the judge, which loads none), the folders of LD_LIBRARY_PATH (a bundle's libraries) and of $ATREX_SANDBOX_BIND (':'-separated,
// for a host's odd library folder), /usr and the /lib* links; on GPU backends the device nodes
// (/dev/nvidia*, /dev/nvidia-caps; /dev/kfd, /dev/dri) and /sys read-only; on cpu only
// /sys/devices/system/cpu.
SandboxView eval_sandbox_view(Backend backend, const std::filesystem::path& child_binary,
                              const std::filesystem::path& library);

// The rlimits of a child: RLIMIT_AS (cpu only), RLIMIT_FSIZE 64 MiB (its output log and any
// file it writes), RLIMIT_NOFILE 4096. RLIMIT_CORE is 0 for every child (subprocess.h). No
// RLIMIT_NPROC: it counts every process of the user on the host and does not bind root; new
// processes are denied by the seccomp filter instead.
ResourceLimits::Limits eval_child_limits(Backend backend, const EvalSandbox& sandbox);

// The cgroup limits of an evaluation child (common/process/cgroup.h), where the host lets atrex
// make one: memory as RLIMIT_AS on cpu (the same figure, now counting memfd, tmpfs and SysV shm
// pages too), three quarters of the machine's memory on GPU backends (host memory: pinned
// buffers, the runtime's); tasks (processes and threads) max(1024, 8 x the cores).
ChildCgroup::Limits eval_child_cgroup_limits(Backend backend, const EvalSandbox& sandbox);

}  // namespace atrex::runner
