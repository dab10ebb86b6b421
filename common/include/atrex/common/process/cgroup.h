// A cgroup of its own for one evaluation child (docs/evaluation.md "Sandbox": rlimits): a memory
// limit that counts every page the child's processes allocate, the pages of memfds, tmpfs files
// and SysV shared memory included (RLIMIT_AS counts only mappings: a candidate held 3 GiB of
// memfd and shm pages under a 2 GiB RLIMIT_AS), and a limit on its tasks, threads included (a
// thread bomb takes the host's pids: kernel.pid_max is 32768 on the development VM, and
// RLIMIT_NPROC does not bind root).
//
// Where: cgroup v2 when the folder to make it in (`$ATREX_CGROUP_PARENT`, else this process's
// own cgroup) is a cgroup2 folder this process may write whose `cgroup.subtree_control` has (or
// takes) `memory` and `pids`: the child's folder gets `memory.max`, `memory.swap.max` 0 and
// `pids.max`, and is killed whole (`cgroup.kill`) when it ends. Else cgroup v1, where the
// `memory` and `pids` hierarchies are mounted and this process's folder in them is writable (the
// development VM: a hybrid mount whose v2 part has no controllers): `memory.limit_in_bytes`
// (and `memory.memsw.limit_in_bytes` where swap is accounted) and `pids.max`. Else none, and
// `describe()` says why (the rlimits alone then bound what they can: docs).
//
// The child enters the cgroup between fork and exec (ChildPolicy), so bwrap and everything of
// its sandbox are in it from the start. Thread-safety: one object per child; create() and the
// destructor do file I/O and may be called from several threads for different children.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/process/subprocess.h"

namespace atrex {

class ChildCgroup final : public ChildPolicy {
 public:
  struct Limits {
    uint64_t memory_bytes = 0;  // 0: no memory limit
    uint64_t tasks = 0;         // pids.max: processes and threads; 0: no limit
  };

  // A fresh cgroup named `name` (a file name: "atrex-<pid>-<n>" is unique enough) with `limits`,
  // or, where the host gives none, an object that applies nothing and says why (never an error:
  // a host without delegated cgroups still evaluates, under the rlimits).
  static std::unique_ptr<ChildCgroup> create(const std::string& name, Limits limits);

  ~ChildCgroup() override;  // kills what is left in it and removes its folders
  ChildCgroup(const ChildCgroup&) = delete;
  ChildCgroup& operator=(const ChildCgroup&) = delete;

  const char* name() const override { return "cgroup"; }
  int apply_in_child() const noexcept override;

  // "cgroup v2 (memory.max 2048 MiB, pids.max 1024)", "cgroup v1 (...)" or "none (why)".
  const std::string& describe() const { return description_; }
  bool active() const { return !procs_fds_.empty(); }
  // Whether the kernel killed a process of it for the memory limit (memory.events oom_kill on
  // v2, memory.oom_control oom_kill on v1).
  bool oom_killed() const;
  // The peak of its tasks (pids.peak where the kernel has it, else the current count).
  int64_t tasks_peak() const;

 private:
  ChildCgroup() = default;
  int version_ = 0;                            // 1 or 2; 0: none
  std::vector<std::filesystem::path> folders_;  // made by create(), removed by the destructor
  std::vector<int> procs_fds_;                  // cgroup.procs of each, open for writing
  std::filesystem::path memory_folder_, pids_folder_;
  std::string description_;
};

}  // namespace atrex
