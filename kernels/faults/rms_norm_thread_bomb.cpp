// ATTACKS the host's processes with threads (issue 14 item 4; the open row "a thread bomb"):
// threads are allowed (seccomp denies only new processes), and each takes a pid of the host's
// (kernel.pid_max: 32768 on the development VM): a candidate that parks tens of thousands of
// threads with small stacks leaves the host unable to fork. Bounded here to ATTACK_THREADS
// parked threads (64 KiB stacks, so RLIMIT_AS does not stop them first), released before the
// call returns; reports `threads=N last=ERR` and fails the shape. Expected: the child's cgroup
// pids limit stops it near that limit (`last=EAGAIN`); without a cgroup every thread starts.
// Twin: rms_norm_sandbox_honest.cpp (threads work).
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "atrex/candidate.h"

#ifndef ATTACK_THREADS
#define ATTACK_THREADS 3000
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

// Held for writing while the threads start: each blocks on it until the release.
static pthread_rwlock_t g_gate = PTHREAD_RWLOCK_INITIALIZER;

static void* park(void*) {
  pthread_rwlock_rdlock(&g_gate);
  pthread_rwlock_unlock(&g_gate);
  return nullptr;
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64u << 10);
  pthread_rwlock_wrlock(&g_gate);
  std::vector<pthread_t> threads;
  std::string last = "none";
  for (int i = 0; i < ATTACK_THREADS; ++i) {
    pthread_t t;
    if (const int rc = pthread_create(&t, &attr, park, nullptr); rc != 0) {
      last = strerrorname_np(rc);
      break;
    }
    threads.push_back(t);
  }
  g_report = "threads=" + std::to_string(threads.size()) + " last=" + last;
  pthread_rwlock_unlock(&g_gate);
  for (pthread_t t : threads) pthread_join(t, nullptr);
  pthread_attr_destroy(&attr);
  (void)rms_norm(launch);
  return 1;
}
