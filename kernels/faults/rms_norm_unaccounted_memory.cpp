// ATTACKS memory past the address-space limit (issue 14 item 4; the open row of the threat
// model): pages of a memfd and of SysV shared memory stay allocated after they are unmapped, so
// RLIMIT_AS (which counts mappings) never sees them. Fills 48 MiB memfds (under RLIMIT_FSIZE)
// and 256 MiB SysV segments, each mapped, touched and unmapped again, until ATTACK_TARGET_MIB
// are held or the next one fails; reports `held_mib=N memfd=A shm=B last=ERR` and fails the
// shape. Expected: the child's cgroup memory limit (docs/evaluation.md "Sandbox") ends it
// (`crashed`: killed by the kernel's OOM killer) or refuses the pages, well under
// ATTACK_TARGET_MIB; without a cgroup it holds ATTACK_TARGET_MIB whatever RLIMIT_AS says.
// Twin: rms_norm_sandbox_honest.cpp (a 256 MiB heap buffer) passes under the same limits.
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "atrex/candidate.h"

#ifndef ATTACK_TARGET_MIB
#define ATTACK_TARGET_MIB 3072
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

static bool fill(void* p, size_t bytes) {
  if (p == MAP_FAILED || p == nullptr) return false;
  std::memset(p, 7, bytes);
  return true;
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const size_t target = static_cast<size_t>(ATTACK_TARGET_MIB) << 20;
  size_t held = 0;
  int memfds = 0, segments = 0;
  std::string last = "none";
  // SysV segments first (256 MiB each), then memfds (48 MiB each, under RLIMIT_FSIZE).
  while (held < target) {
    const size_t bytes = 256u << 20;
    const int id = shmget(IPC_PRIVATE, bytes, IPC_CREAT | 0600);
    if (id < 0) { last = std::string("shmget ") + strerrorname_np(errno); break; }
    void* p = shmat(id, nullptr, 0);
    if (!fill(p == reinterpret_cast<void*>(-1) ? nullptr : p, bytes)) {
      last = std::string("shmat ") + strerrorname_np(errno);
      break;
    }
    shmdt(p);  // the segment stays (no IPC_RMID) and so do its pages
    held += bytes;
    ++segments;
    if (segments >= 4) break;  // the rest in memfds
  }
  while (held < target) {
    const size_t bytes = 48u << 20;
    const int fd = memfd_create("hold", 0);
    if (fd < 0) { last = std::string("memfd_create ") + strerrorname_np(errno); break; }
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      last = std::string("ftruncate ") + strerrorname_np(errno);
      break;
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!fill(p, bytes)) { last = std::string("mmap ") + strerrorname_np(errno); break; }
    munmap(p, bytes);  // the fd stays open, the pages with it
    held += bytes;
    ++memfds;
  }
  g_report = "held_mib=" + std::to_string(held >> 20) + " memfd=" + std::to_string(memfds) +
             " shm=" + std::to_string(segments) + " last=" + last;
  (void)rms_norm(launch);
  return 1;
}
