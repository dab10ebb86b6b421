// ATTACKS the seccomp filter through the other system-call ABIs of an x86-64 kernel (the attack
// round of the second session): a filter that names syscalls by their x86-64 numbers does not
// see the same call made through the x32 ABI (number | 0x40000000) or the 32-bit int 0x80
// entry, where fork is a different number. Tries fork through x32 (reports `x32_fork=<pid|ERR>`:
// a child that starts exits at once), then, when ATTACK_INT80 is 1, through int 0x80 (a filter
// that knows other ABIs kills the process: `crashed`, SIGSYS). Expected in the sandbox: no
// fork (ENOSYS or EPERM from x32, a kernel without x32 answers ENOSYS too) and, for int 0x80,
// death by SIGSYS; without it (no filter) int 0x80's fork makes a child.
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "atrex/candidate.h"

#ifndef ATTACK_INT80
#define ATTACK_INT80 0
#endif

static float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

static uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// The honest computation, row by row.
static int rms_norm(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const auto* xs = static_cast<const uint16_t*>(x->data);
  const auto* ws = static_cast<const uint16_t*>(w->data);
  auto* os = static_cast<uint16_t*>(out->data);
  for (int64_t r = 0; r < rows; ++r) {
    float ss = 0;
    for (int64_t h = 0; h < hidden; ++h) {
      const float v = bf16_to_float(xs[r * hidden + h]);
      ss += v * v;
    }
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(hidden) + eps);
    for (int64_t h = 0; h < hidden; ++h) {
      os[r * hidden + h] =
          float_to_bf16(bf16_to_float(xs[r * hidden + h]) * inv * bf16_to_float(ws[h]));
    }
  }
  return 0;
}

static std::string g_report;
ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message() { return g_report.c_str(); }

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const long x32 = syscall(0x40000000L | 57L);  // x32 fork
  if (x32 == 0) _exit(0);
  std::string r = x32 > 0 ? "pid" : (strerrorname_np(errno) ? strerrorname_np(errno) : "error");
  if (x32 > 0) waitpid(static_cast<pid_t>(x32), nullptr, 0);
  g_report = "x32_fork=" + r;
  if (ATTACK_INT80) {
    long pid = 2;  // i386 fork
    // The kernel zeroes r8-r11 on the way back from int 0x80 (a 64-bit caller's values there
    // are not kept): without the clobbers the compiler's values in them were lost and the parent
    // died of SIGSEGV after an honest fork (kernel 6.18, 2026-12-06).
    asm volatile("int $0x80" : "+a"(pid) : : "memory", "r8", "r9", "r10", "r11");
    if (pid == 0) _exit(0);
    g_report += " int80_fork=" + std::to_string(pid);
  }
  (void)rms_norm(launch);
  return 1;
}
