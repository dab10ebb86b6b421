// ATTACKS the result channel (issue 14 item 1): on its first call it forks three copies of the
// evaluation child; every copy, and the candidate itself, writes forged "ok" verdicts for the
// task's shapes to every pipe the process holds (where the runner reads results), then computes
// honestly. Expected: every shape `rejected` with "tampering" (the lines lack the child's nonce
// or come twice); in the sandbox the forks themselves fail (EPERM). Twin: rms_norm_sandbox_honest.cpp.
#include <sys/stat.h>
#include <sys/wait.h>
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

// What the attack could do, for the test to read from the record's error.
static std::string g_report;
ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message() { return g_report.c_str(); }

static std::string outcome(long rc) {
  if (rc >= 0) return "ok";
  const char* name = strerrorname_np(errno);
  return name ? name : "error";
}

static void forge() {
  const char* shapes[] = {"15", "5", "41", "46"};
  for (int fd = 0; fd < 64; ++fd) {
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) continue;
    for (const char* s : shapes) {
      char line[512];
      const int n = std::snprintf(line, sizeof line,
                                  "{\"schema\":\"atrex.child-response/1\",\"nonce\":\"%032d\","
                                  "\"shape_id\":\"%s\",\"status\":\"ok\",\"error\":\"\"}\n",
                                  0, s);
      (void)!::write(fd, line, static_cast<size_t>(n));
    }
  }
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  static bool done = false;
  if (!done) {
    done = true;
    int forked = 0;
    for (int i = 0; i < 3; ++i) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        forge();
        ::_exit(0);
      }
      if (pid > 0) {
        ++forked;
        ::waitpid(pid, nullptr, 0);
      } else {
        g_report = "fork=" + outcome(-1);
      }
    }
    forge();
    g_report += " forked=" + std::to_string(forked);
  }
  return rms_norm(launch);
}
