#include "atrex/common/process/seccomp.h"

#include <sched.h>
#include <seccomp.h>
#include <sys/prctl.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string_view>

#include <fmt/format.h>

namespace atrex {

namespace {

Status failed(const char* what, int rc) {
  return io_error(fmt::format("seccomp: {}: {}", what, std::strerror(-rc)));
}

}  // namespace

Status install_candidate_seccomp(bool allow_new_processes) {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return io_error(fmt::format("prctl(PR_SET_NO_NEW_PRIVS): {}", std::strerror(errno)));
  }
  std::unique_ptr<void, void (*)(scmp_filter_ctx)> ctx(seccomp_init(SCMP_ACT_ALLOW),
                                                       seccomp_release);
  if (!ctx) return io_error("seccomp_init failed");
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_TSYNC, 1); rc != 0) {
    return failed("TSYNC", rc);
  }
  const uint32_t deny = SCMP_ACT_ERRNO(EPERM);
  static constexpr const char* kDenied[] = {"ptrace",
                                            "process_vm_readv",
                                            "process_vm_writev",
                                            "kcmp",
                                            "pidfd_open",
                                            "pidfd_getfd",
                                            "io_uring_setup",
                                            "fork",
                                            "vfork",
                                            "unshare",
                                            "setns",
                                            "mount",
                                            "umount2",
                                            "pivot_root",
                                            "chroot",
                                            "open_tree",
                                            "move_mount",
                                            "fsopen",
                                            "fsmount",
                                            "fsconfig",
                                            "fspick",
                                            "mount_setattr",
                                            "bpf",
                                            "perf_event_open",
                                            "userfaultfd",
                                            "kexec_load",
                                            "kexec_file_load",
                                            "init_module",
                                            "finit_module",
                                            "delete_module",
                                            "reboot",
                                            "swapon",
                                            "swapoff",
                                            "acct",
                                            "keyctl",
                                            "add_key",
                                            "request_key",
                                            "open_by_handle_at",
                                            "personality"};
  for (const char* name : kDenied) {
    if (allow_new_processes && (std::string_view(name) == "fork" || std::string_view(name) == "vfork"))
      continue;
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    if (int rc = seccomp_rule_add(ctx.get(), deny, nr, 0); rc != 0) return failed(name, rc);
  }
  // New processes: clone without CLONE_THREAD (fork, posix_spawn); clone3 hides its flags in
  // memory, so it answers ENOSYS and the C library falls back to clone.
  if (!allow_new_processes) {
    if (int rc = seccomp_rule_add(ctx.get(), deny, SCMP_SYS(clone), 1,
                                  SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
        rc != 0) {
      return failed("clone", rc);
    }
  }
  if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0); rc != 0) {
    return failed("clone3", rc);
  }
  // Sockets: AF_UNIX only (within the sandbox there is nothing else to reach).
  for (int call : {SCMP_SYS(socket), SCMP_SYS(socketpair)}) {
    if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EACCES), call, 1,
                                  SCMP_A0(SCMP_CMP_NE, AF_UNIX));
        rc != 0) {
      return failed("socket", rc);
    }
  }
  // No input pushed into a terminal (the sandbox keeps the runner's session, and with it any
  // controlling terminal: sandbox.h SandboxView::new_session).
  for (unsigned long request : {static_cast<unsigned long>(TIOCSTI), static_cast<unsigned long>(TIOCLINUX)}) {
    if (int rc = seccomp_rule_add(ctx.get(), deny, SCMP_SYS(ioctl), 1,
                                  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, request));
        rc != 0) {
      return failed("ioctl", rc);
    }
  }
  if (int rc = seccomp_load(ctx.get()); rc != 0) return failed("seccomp_load", rc);
  return ok();
}

}  // namespace atrex
