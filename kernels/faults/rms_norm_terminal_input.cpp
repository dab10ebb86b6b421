// ATTACKS the runner's terminal (the attack round of the second session): the evaluation
// children keep the runner's session (no bwrap --new-session: docs/evaluation.md "Sandbox", so
// that the child and the judge share one scheduling autogroup), and with it any controlling
// terminal an `atrex eval` run from a shell has; TIOCSTI on it would type commands into that
// shell. Tries ioctl(TIOCSTI) and ioctl(TIOCLINUX) on /dev/tty when it opens, else on stdin
// (/dev/null: the kernel then answers ENOTTY, the seccomp filter EPERM before it looks), reports
// `tty=<open result> tiocsti=ERR tioclinux=ERR` and fails the shape. Expected in the sandbox:
// EPERM for both; without it (--no-sandbox, no filter) ENOTTY on /dev/null.
#include <fcntl.h>
#include <sys/ioctl.h>
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

static std::string result(long rc) {
  if (rc >= 0) return "ok";
  const char* name = strerrorname_np(errno);
  return name ? name : "error";
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  int fd = open("/dev/tty", O_RDWR | O_NOCTTY);
  const std::string tty = result(fd);
  if (fd < 0) fd = 0;
  char c = '\n';
  const std::string sti = result(ioctl(fd, TIOCSTI, &c));
  char sub = 6;  // TIOCL_GETSHIFTSTATE: harmless if it ever went through
  const std::string linux_ = result(ioctl(fd, TIOCLINUX, &sub));
  g_report = "tty=" + tty + " tiocsti=" + sti + " tioclinux=" + linux_;
  (void)rms_norm(launch);
  return 1;
}
