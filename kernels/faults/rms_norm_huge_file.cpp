// ATTACKS the disk (issue 14 item 4): writes 4 GiB into a file in its working folder. Expected:
// the child's file-size limit (RLIMIT_FSIZE) kills it with SIGXFSZ (`crashed`), the runner
// lives, nothing of it stays on the host. Twin: rms_norm_sandbox_honest.cpp (a small scratch
// file works).
#include <fcntl.h>
#include <unistd.h>

#include <vector>
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

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const int fd = ::open("huge.bin", O_CREAT | O_WRONLY | O_TRUNC, 0644);
  std::vector<char> chunk(1u << 20, 'x');
  size_t written = 0;
  while (fd >= 0 && written < (4ull << 30)) {
    const ssize_t n = ::write(fd, chunk.data(), chunk.size());
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  g_report = "open=" + outcome(fd) + " written_mib=" + std::to_string(written >> 20) +
             " last=" + outcome(-1);
  (void)rms_norm(launch);
  return 1;
}
