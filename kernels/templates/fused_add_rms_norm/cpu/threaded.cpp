// atrex-template: threaded
// atrex-description: residual_out written in pass 1; rows split into contiguous chunks over up to THREADS std::threads (only when the work is large enough); UNROLL-accumulator row kernel
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

// residual_out = bf16(x + residual) is rounded before it enters the sum of squares, as in the
// reference.
inline float add_round(const uint16_t* x, const uint16_t* res, uint16_t* ro, int64_t h) {
  const uint16_t s = f2bf(bf2f(x[h]) + bf2f(res[h]));
  ro[h] = s;
  return bf2f(s);
}

void row(const uint16_t* x, const uint16_t* res, const uint16_t* w, uint16_t* out, uint16_t* ro,
         int64_t hidden, float eps) {
  // Independent partial sums break the add dependency chain and let the compiler use vector lanes.
  float acc[UNROLL] = {};
  int64_t h = 0;
  for (; h + UNROLL <= hidden; h += UNROLL)
    for (int u = 0; u < UNROLL; ++u) {
      const float v = add_round(x, res, ro, h + u);
      acc[u] += v * v;
    }
  float ss = 0.f;
  for (int u = 0; u < UNROLL; ++u) ss += acc[u];
  for (; h < hidden; ++h) {
    const float v = add_round(x, res, ro, h);
    ss += v * v;
  }
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(hidden) + eps);
  for (h = 0; h < hidden; ++h) out[h] = f2bf((bf2f(ro[h]) * inv) * bf2f(w[h]));
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
  const DLTensor* r = atrex_input(launch, "residual");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* o = atrex_output(launch, "out");
  const DLTensor* ro = atrex_output(launch, "residual");
  if (!x || !r || !w || !o || !ro) return fail("fused_add_rms_norm: missing tensor");
  const DLTensor* mats[4] = {x, r, o, ro};
  for (const DLTensor* t : mats)
    if (t->ndim != 2 || !is_bf16(t) || t->shape[0] != x->shape[0] || t->shape[1] != x->shape[1])
      return fail("fused_add_rms_norm: expected bf16 [T,H] x, residual, out, residual_out");
  if (w->ndim != 1 || !is_bf16(w) || w->shape[0] != x->shape[1])
    return fail("fused_add_rms_norm: bad weight");
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const auto* xp = static_cast<const uint16_t*>(x->data);
  const auto* rp = static_cast<const uint16_t*>(r->data);
  const auto* wp = static_cast<const uint16_t*>(w->data);
  auto* op = static_cast<uint16_t*>(o->data);
  auto* rop = static_cast<uint16_t*>(ro->data);
  parallel_rows(rows, 2 * hidden, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      row(xp + i * hidden, rp + i * hidden, wp, op + i * hidden, rop + i * hidden, hidden, eps);
  });
  return 0;
}
