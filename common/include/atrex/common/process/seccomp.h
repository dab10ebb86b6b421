// The seccomp filter an evaluation child installs on itself right before it loads a candidate
// (docs/evaluation.md "Sandbox"), with libseccomp (Debian libseccomp-dev). After it, every
// thread of the process (SECCOMP_FILTER_FLAG_TSYNC: the GPU runtime's threads too) gets an
// error from the calls below; everything else is allowed. The child's own setup (device,
// context, libraries) runs before it, unrestricted.
//
// Denied (EPERM unless said): ptrace, process_vm_readv/writev, kcmp, pidfd_open/pidfd_getfd
// (reading or steering another process); socket/socketpair of any family but AF_UNIX (EACCES: no
// new network sockets; the network namespace has only its own loopback anyway); io_uring_setup
// (io_uring runs socket and file operations past the syscall filter); new processes: fork,
// vfork, clone without CLONE_THREAD (threads stay allowed) and clone3 (ENOSYS, so that the C
// library falls back to clone, whose flags the filter can read); namespaces and mounts
// (unshare, setns, mount, umount2, pivot_root, chroot, open_tree, move_mount, fsopen, fsmount,
// fsconfig, fspick, mount_setattr); kernel and system (bpf, perf_event_open, userfaultfd,
// kexec_load, kexec_file_load, init_module, finit_module, delete_module, reboot, swapon,
// swapoff, acct, keyctl, add_key, request_key, open_by_handle_at, personality).
// no_new_privs is set first (seccomp needs it without CAP_SYS_ADMIN).
#pragma once

#include "atrex/common/error.h"

namespace atrex {

// kIo naming the libseccomp call that failed (the child then refuses to run the candidate).
// `allow_new_processes`: fork, vfork and clone without CLONE_THREAD stay allowed (Python
// candidates on a GPU: Triton's JIT runs ptxas and the C compiler for its launcher; the new
// processes stay in the sandbox's namespaces and cgroup and die with the child's group).
Status install_candidate_seccomp(bool allow_new_processes = false);

}  // namespace atrex
