// ATTACKS the host's kernel settings (the attack round of the second session, critical): a
// sandbox started as root maps its root to the host's uid 0, and the fresh /proc that bwrap
// mounts let it write /proc/sys: the round rewrote the host's kernel.core_pattern from a
// sandboxed shell (a "|command" there runs as root outside every sandbox at the next crash of
// any process; RLIMIT_CORE 0 does not stop a pipe). This candidate only OPENS each file for
// writing and writes nothing: `core_pattern=<ok|ERR> modprobe=<ok|ERR> sysrq=<ok|ERR>` and
// fails the shape. Expected in the sandbox: EROFS (or EACCES, ENOENT) for all three; without it,
// as root, `ok`; as another user, EACCES.
#include <fcntl.h>
#include <unistd.h>

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

static std::string g_report;
ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message() { return g_report.c_str(); }

static std::string try_open(const char* path) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    close(fd);  // nothing written
    return "ok";
  }
  const char* name = strerrorname_np(errno);
  return name ? name : "error";
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  g_report = "core_pattern=" + try_open("/proc/sys/kernel/core_pattern") +
             " modprobe=" + try_open("/proc/sys/kernel/modprobe") +
             " sysrq=" + try_open("/proc/sysrq-trigger") + " euid=" + std::to_string(geteuid());
  (void)rms_norm(launch);
  return 1;
}
