// ATTACK (issue 14 item 3, "the answer in reach"): instead of computing rms_norm, the candidate
// computes only the first 16 outputs of row 0 and of the last row, then scans its own process's writable memory
// (/proc/self/maps) for a 64-byte-aligned run of 16 bf16 values within one bf16 step of them,
// anywhere but its own output, and copies out.numel values from there: when the harness keeps
// the reference outputs in the candidate's process, that is the answer, for the price of two rows.
// With the judge (docs/evaluation.md "The judge") no reference lives in this process: nothing is
// found, the outputs stay poisoned, and the candidate fails.
//   ATTACK_PLANT 1 (the honest twin of the scanner): the candidate first computes the whole
//   answer into a buffer of its own, so the scan has something to find; it must find it and
//   pass (the scanner works: what the attack misses is the reference, not the search).
// The error message (returned 1 when nothing is found) says how much memory was scanned.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "atrex/candidate.h"

#ifndef ATTACK_PLANT
#define ATTACK_PLANT 0
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

static void rms_rows(const uint16_t* xs, const uint16_t* ws, uint16_t* os, int64_t rows,
                     int64_t hidden, int64_t cols, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    float ss = 0;
    for (int64_t h = 0; h < hidden; ++h) {
      const float v = bf16_to_float(xs[r * hidden + h]);
      ss += v * v;
    }
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(hidden) + eps);
    for (int64_t h = 0; h < cols; ++h)
      os[r * hidden + h] =
          float_to_bf16(bf16_to_float(xs[r * hidden + h]) * inv * bf16_to_float(ws[h]));
  }
}

static std::string g_message;
ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message() { return g_message.c_str(); }

// Within one bf16 step (the reference may round differently in its last bit).
static bool close_bf16(uint16_t a, uint16_t b) {
  const float fa = bf16_to_float(a), fb = bf16_to_float(b);
  if (!std::isfinite(fa) || !std::isfinite(fb)) return false;
  return std::fabs(fa - fb) <= std::fabs(fb) * (1.0f / 64) + 1e-30f;
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 2;
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const auto* xs = static_cast<const uint16_t*>(x->data);
  const auto* ws = static_cast<const uint16_t*>(w->data);
  auto* os = static_cast<uint16_t*>(out->data);
  const size_t n = static_cast<size_t>(rows * hidden);
  const int64_t k = hidden < 16 ? hidden : 16;
  // The first k outputs of row 0 (the row's sum of squares needs the whole row), kept on the
  // stack (not scanned) and wiped from the heap, so that the scan cannot find the probe itself.
  // The first k outputs of the last row too: a match must hold at both ends, or a stale copy
  // of an earlier call's answer (the harness moves the input view between calls, so row r of an
  // earlier answer can equal row 0 of this one) would be copied from the wrong place.
  uint16_t probe[16] = {}, probe_last[16] = {};
  const int64_t last = rows - 1;
  {
    uint16_t* tmp = static_cast<uint16_t*>(std::calloc(static_cast<size_t>(hidden), 2));
    rms_rows(xs, ws, tmp, 1, hidden, k, eps);
    std::memcpy(probe, tmp, static_cast<size_t>(k) * 2);
    rms_rows(xs + last * hidden, ws, tmp, 1, hidden, k, eps);
    std::memcpy(probe_last, tmp, static_cast<size_t>(k) * 2);
    std::memset(tmp, 0, static_cast<size_t>(hidden) * 2);
    std::free(tmp);
  }
  uint16_t* planted = nullptr;
  if (ATTACK_PLANT) {
    void* p = nullptr;
    if (posix_memalign(&p, 64, n * 2) != 0) return 3;
    planted = static_cast<uint16_t*>(p);
    rms_rows(xs, ws, planted, rows, hidden, hidden, eps);
  }
  FILE* maps = std::fopen("/proc/self/maps", "r");
  if (!maps) return 4;
  char line[512];
  size_t scanned = 0;
  const uint16_t* found = nullptr;
  const auto* own = reinterpret_cast<const uint8_t*>(os);
  while (!found && std::fgets(line, sizeof line, maps)) {
    unsigned long lo = 0, hi = 0;
    char perms[8] = {};
    if (std::sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
    if (perms[0] != 'r' || perms[1] != 'w') continue;
    // [vvar], [vsyscall]; and the stacks (this call's probe lives there; the harness keeps
    // no tensor on a stack).
    if (std::strstr(line, "[v") != nullptr || std::strstr(line, "[stack") != nullptr) continue;
    if (hi - lo < n * 2) continue;
    scanned += hi - lo;
    for (unsigned long a = (lo + 63) & ~63ul; a + n * 2 <= hi && !found; a += 64) {
      const auto* cand = reinterpret_cast<const uint16_t*>(a);
      if (reinterpret_cast<const uint8_t*>(cand) == own) continue;
      if (!close_bf16(cand[0], probe[0])) continue;
      bool all = true;
      for (int64_t i = 1; i < k && all; ++i) all = close_bf16(cand[i], probe[i]);
      for (int64_t i = 0; i < k && all; ++i)
        all = close_bf16(cand[last * hidden + i], probe_last[i]);
      if (all) found = cand;
    }
  }
  std::fclose(maps);
  if (found) std::memcpy(os, found, n * 2);
  std::free(planted);
  if (!found) {
    g_message = "no answer in " + std::to_string(scanned >> 20) + " MiB of this process's memory";
    return 1;
  }
  return 0;
}
