// atrex-template: threaded
// atrex-description: rows split into contiguous chunks over up to THREADS std::threads (only when the work is large enough); UNROLL-accumulator row kernel
// atrex-param: THREADS = 2 | 1, 2, 3, 4
// atrex-param: UNROLL = 8 | 4, 8, 16
// atrex-param: MIN_KELEMS = 64 | 16, 64, 256, 1024
#ifndef THREADS
#define THREADS 2
#endif
#ifndef UNROLL
#define UNROLL 8
#endif
#ifndef MIN_KELEMS
#define MIN_KELEMS 64
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>

#include "atrex/candidate.h"

static_assert(THREADS >= 1 && THREADS <= 4, "THREADS");

namespace {

const char* g_error = "";
int fail(const char* msg) {
  g_error = msg;
  return 1;
}

inline float bf2f(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// Round to nearest even on the float bits; NaN stays a (quiet) NaN. Branch-free so loops vectorise.
inline uint16_t f2bf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}
bool is_bf16(const DLTensor* t) {
  return t->dtype.code == kDLBfloat && t->dtype.bits == 16 && t->dtype.lanes == 1;
}

void row(const uint16_t* x, uint16_t* out, int64_t hidden, float eps) {
  // Independent partial sums break the add dependency chain and let the compiler use vector lanes.
  float acc[UNROLL] = {};
  int64_t h = 0;
  for (; h + UNROLL <= hidden; h += UNROLL)
    for (int u = 0; u < UNROLL; ++u) {
      const float v = bf2f(x[h + u]);
      acc[u] += v * v;
    }
  float ss = 0.f;
  for (int u = 0; u < UNROLL; ++u) ss += acc[u];
  for (; h < hidden; ++h) ss += bf2f(x[h]) * bf2f(x[h]);
  const float inv = 1.0f / std::sqrt(ss + eps);
  for (h = 0; h < hidden; ++h) out[h] = f2bf(bf2f(x[h]) * inv);
}

// Runs body(begin, end) over [0, rows) in contiguous chunks, at most THREADS of them and none
// smaller than MIN_KELEMS*1024 elements of work (thread start-up costs tens of microseconds). The
// calling thread takes the first chunk; a chunk whose thread cannot be started runs inline. Threads
// live only for this call.
template <class Body>
void parallel_rows(int64_t rows, int64_t work_per_row, const Body& body) {
  const int64_t min_work = static_cast<int64_t>(MIN_KELEMS) * 1024;
  int64_t n = rows * work_per_row / min_work;
  if (n > THREADS) n = THREADS;
  if (n > rows) n = rows;
  if (n < 1) n = 1;
  const int64_t chunk = (rows + n - 1) / n;
  std::thread pool[THREADS > 1 ? THREADS - 1 : 1];
  int started = 0;
  for (int64_t t = 1; t < n; ++t) {
    const int64_t b = t * chunk, e = std::min(rows, b + chunk);
    if (b >= e) break;
    try {
      pool[started] = std::thread(body, b, e);
      ++started;
    } catch (...) {
      body(b, e);
    }
  }
  body(0, std::min(rows, chunk));
  for (int i = 0; i < started; ++i) pool[i].join();
}

}  // namespace

ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message(void) { return g_error; }

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* o = atrex_output(launch, "out");
  if (!x || !o) return fail("l2_norm: missing tensor x or out");
  if (x->ndim != 2 || o->ndim != 2 || !is_bf16(x) || !is_bf16(o))
    return fail("l2_norm: expected bf16 x[T,H], out[T,H]");
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  if (o->shape[0] != rows || o->shape[1] != hidden) return fail("l2_norm: shape mismatch");
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const auto* xp = static_cast<const uint16_t*>(x->data);
  auto* op = static_cast<uint16_t*>(o->data);
  parallel_rows(rows, hidden, [=](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) row(xp + r * hidden, op + r * hidden, hidden, eps);
  });
  return 0;
}
