// ATTACKS the timer from outside the timed window (found by the attack round of 2026-12-01,
// second session): the timed calls return at once and a background thread of the candidate's
// computes their outputs while the harness flushes the cache, poisons the outputs and talks to
// the judge between calls. Calls that are checked right after they return (the correctness
// seeds, the re-checks after timing: one call site in the child, learnt from the first call's
// return address) are computed in the call, as an honest kernel would. The judge's brackets
// only hold the call, so they agree with the tiny claimed time; the last timed call's outputs
// are complete by the time they are copied. It passed (rms_norm shape 3, timed 2.2x faster than
// its twin, `ok`) while nothing looked at the outputs as the call returned. Now (cpu): the judge
// reads the outputs of every timed call in the shared memfd's arena when its done comes
// (judge_messages.h), and holds what it read against the outputs of the timed calls it checks
// (a re-check it chose after the call, the last timed call's outputs after timing): the outputs
// it sees then are finished (they differ from its read) or not (poison): `wrong_result` either
// way.
//   ATTACK_ASYNC 0: the honest twin (every call computes before it returns).
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "atrex/candidate.h"

#ifndef ATTACK_ASYNC
#define ATTACK_ASYNC 1
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

// The launch's tensors live as long as the shape (the harness reuses them for every call).
static std::thread g_worker;
static void* g_checked_site = nullptr;

static void finish_pending() {
  if (g_worker.joinable()) g_worker.join();
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  void* site = __builtin_return_address(0);
  finish_pending();
  if (!g_checked_site) g_checked_site = site;  // the first call is a checked one
  if (!ATTACK_ASYNC || site == g_checked_site) return rms_norm(launch);
  // A timed call: hand the work to a thread and return before it is done.
  g_worker = std::thread([copy = *launch] { (void)rms_norm(&copy); });
  return 0;
}
