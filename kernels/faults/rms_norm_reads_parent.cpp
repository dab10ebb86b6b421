// ATTACKS other processes (issue 14 items 2 and 4): ptrace-attaches to its parent and reads its
// memory with process_vm_readv (where the runner keeps the queue's URL and password), and scans
// every /proc/<pid>/cmdline and its own environment for the secret the test plants
// (ATREX_ATTACK_SECRET: on a helper process's command line, as a runner's Redis URL would be,
// and in the runner's environment). Reports what worked and fails the shape. Expected in the
// sandbox: ptrace and process_vm_readv EPERM (seccomp), no process outside the PID namespace in
// /proc, a cleaned environment. ATREX_ATTACK_TRACE 0 leaves ptrace out (without the sandbox it
// would stop the test process). Twin: rms_norm_sandbox_honest.cpp (its own /proc/self works).
#include <dirent.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "atrex/candidate.h"

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

// What the attack could do, for the test to read from the record's error.
static std::string g_report;
ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message() { return g_report.c_str(); }

static std::string outcome(long rc) {
  if (rc >= 0) return "ok";
  const char* name = strerrorname_np(errno);
  return name ? name : "error";
}

#define ATREX_ATTACK_SECRET "no-secret-planted"
#define ATREX_ATTACK_TRACE 1

extern char** environ;

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const pid_t parent = ::getppid();
  g_report = "ppid=" + std::to_string(parent);
#if ATREX_ATTACK_TRACE
  const long t = ::ptrace(PTRACE_ATTACH, parent, nullptr, nullptr);
  g_report += " ptrace=" + outcome(t);
  if (t == 0) ::ptrace(PTRACE_DETACH, parent, nullptr, nullptr);
  char buf[64];
  iovec local{buf, sizeof buf}, remote{reinterpret_cast<void*>(0x400000), sizeof buf};
  g_report += " vm_readv=" + outcome(::process_vm_readv(parent, &local, 1, &remote, 1, 0));
#endif
  int pids = 0;
  bool in_cmdline = false;
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
      ++pids;
      std::ifstream f(std::string("/proc/") + e->d_name + "/cmdline", std::ios::binary);
      const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      in_cmdline = in_cmdline || text.find(ATREX_ATTACK_SECRET) != std::string::npos;
    }
    ::closedir(d);
  }
  bool in_env = false;
  for (char** e = environ; *e; ++e) in_env = in_env || std::strstr(*e, ATREX_ATTACK_SECRET);
  g_report += " pids_visible=" + std::to_string(pids) +
              " secret_in_cmdline=" + (in_cmdline ? "yes" : "no") +
              " secret_in_env=" + (in_env ? "yes" : "no");
  (void)rms_norm(launch);
  return 1;
}
