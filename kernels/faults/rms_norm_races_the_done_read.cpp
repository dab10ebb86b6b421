// ATTACKS the judge's read of the outputs at the done (attack round 6, 2026-12-07: the round-5
// race, against the defense that replaced the child's digest): a timed call returns once
// ATTACK_FRAC of the rows are done; ATTACK_WORKERS spinning threads of the candidate's finish the
// rest while the harness sends the done and the judge wakes, stamps the bracket's end and reads
// its 4096 lines. Calls from the call site of the first call (the checks' site, learnt then) are
// computed whole. Expected: `wrong_result` ("not the ones the timed call had when its done
// reached the judge": in the attacker's runs 2917-3273 of the 4096 lines differed).
//   ATTACK_FRAC 1.0: the honest twin (the same threads; every call waits for all its rows).
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sched.h>
#include <thread>
#include <vector>
#include "atrex/candidate.h"
#ifndef ATTACK_FRAC
#define ATTACK_FRAC 0.2
#endif
#ifndef ATTACK_WORKERS
#define ATTACK_WORKERS 2
#endif
static inline float bf(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t tobf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
struct Job {
  const uint16_t* xs;
  const uint16_t* ws;
  uint16_t* os;
  int64_t rows, hidden;
  float eps;
};
static Job g_job;
static std::atomic<int64_t> g_next{0}, g_done{0};
static std::atomic<uint64_t> g_gen{0};
static std::vector<std::thread> g_workers;
static constexpr int64_t kChunk = 16;
static void do_rows(const Job& j, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint16_t* x = j.xs + r * j.hidden;
    uint16_t* o = j.os + r * j.hidden;
    float ss = 0;
    for (int64_t h = 0; h < j.hidden; ++h) {
      float v = bf(x[h]);
      ss += v * v;
    }
    const float inv = 1.0f / std::sqrt(ss / (float)j.hidden + j.eps);
    for (int64_t h = 0; h < j.hidden; ++h) o[h] = tobf(bf(x[h]) * inv * bf(j.ws[h]));
  }
}
static bool take_chunk(const Job& j) {
  int64_t r = g_next.fetch_add(kChunk, std::memory_order_acq_rel);
  if (r >= j.rows) return false;
  int64_t e = r + kChunk < j.rows ? r + kChunk : j.rows;
  do_rows(j, r, e);
  g_done.fetch_add(e - r, std::memory_order_acq_rel);
  return true;
}
static void worker() {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = g_gen.load(std::memory_order_acquire);
    if (g == seen) {
      sched_yield();
      continue;
    }
    seen = g;
    Job j = g_job;
    while (take_chunk(j)) {}
  }
}
static bool g_pending = false;
static int64_t g_pending_rows = 0;
static void finish_pending() {
  if (!g_pending) return;
  while (g_done.load(std::memory_order_acquire) < g_pending_rows) sched_yield();
  g_pending = false;
}
static void* g_checked_site = nullptr;
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  void* site = __builtin_return_address(0);
  finish_pending();
  if (!g_checked_site) g_checked_site = site;
  if (g_workers.empty())
    for (int i = 0; i < ATTACK_WORKERS; ++i) {
      g_workers.emplace_back(worker);
      g_workers.back().detach();
    }
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  Job j{(const uint16_t*)x->data,
        (const uint16_t*)w->data,
        (uint16_t*)out->data,
        x->shape[0],
        x->shape[1],
        (float)atrex_param_float(launch, "eps", 1e-6)};
  g_job = j;
  g_next.store(0);
  g_done.store(0);
  g_gen.fetch_add(1, std::memory_order_acq_rel);
  const double frac = (site == g_checked_site) ? 1.0 : ATTACK_FRAC;
  const int64_t need = (int64_t)(frac * (double)j.rows);
  while (g_done.load(std::memory_order_acquire) < need) {
    if (!take_chunk(j)) sched_yield();
  }
  if (need < j.rows) {
    g_pending = true;
    g_pending_rows = j.rows;
  }
  return 0;
}
