// Fault candidate (issue 14, attack 7; docs/evaluation.md "Checks around timing"): a replay
// cache keyed on the content of the inputs, not on their addresses. Each call hashes a sample of
// x (its first ATTACK_KEY_VALUES values), or with ATTACK_FULL_KEY 1 all of x and the weight; a
// key seen before returns the stored output without computing, a new key
// computes (rms_norm, as rms_norm_correct.cpp) and stores it (up to 64 entries). Against two
// alternating input sets this passed every check and was timed 3-4x faster. Now every timed
// call's inputs are spliced (a few values moved): with the sampled key it hits on stale content
// and returns a stale answer, which the judge's re-check of a timed call (or the check of the
// last one) must reject as wrong_result. With ATTACK_FULL_KEY 1 it is correct, and it returns an
// error once more than ATTACK_MAX_HITS calls of one shape hit (the warm-up and the checks after timing repeat
// content legitimately, a few times): with every timed call's content new, it must pass.
#include <cmath>
#include <cstring>
#include <vector>

#include "atrex/candidate.h"

#define ATTACK_KEY_VALUES 64
#define ATTACK_FULL_KEY 0
#define ATTACK_MAX_HITS 6

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

static int compute(const AtrexLaunch* launch) {
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

namespace {

struct Entry {
  uint64_t key;
  std::vector<uint8_t> out;
};
std::vector<Entry> g_cache;
int g_hits = 0;         // cache hits on the current shape
size_t g_shape_bytes = 0;  // the current shape's output bytes (a new shape resets the count)

uint64_t fnv(uint64_t h, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const char* atrex_candidate_error_message(void) {
  return "replay cache: more calls on content seen before than the warm-up and the checks explain";
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  const size_t n = static_cast<size_t>(x->shape[0] * x->shape[1]) * 2;
  const size_t sampled = ATTACK_FULL_KEY ? n : std::min<size_t>(n, 2 * ATTACK_KEY_VALUES);
  uint64_t key = fnv(0xcbf29ce484222325ull, static_cast<const uint8_t*>(x->data), sampled);
  if (ATTACK_FULL_KEY)
    key = fnv(key, static_cast<const uint8_t*>(w->data), static_cast<size_t>(2 * x->shape[1]));
  key = fnv(key, reinterpret_cast<const uint8_t*>(&n), sizeof n);
  if (n != g_shape_bytes) g_shape_bytes = n, g_hits = 0;
  for (const Entry& e : g_cache) {
    if (e.key == key && e.out.size() == n) {
      if (ATTACK_FULL_KEY && ++g_hits > ATTACK_MAX_HITS) return 3;
      std::memcpy(out->data, e.out.data(), n);
      return 0;
    }
  }
  const int rc = compute(launch);
  if (rc != 0) return rc;
  if (g_cache.size() >= 64) g_cache.erase(g_cache.begin());
  const auto* o = static_cast<const uint8_t*>(out->data);
  g_cache.push_back(Entry{key, std::vector<uint8_t>(o, o + n)});
  return 0;
}
