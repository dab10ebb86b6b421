// atrex-template: threaded
// atrex-description: tokens split into contiguous chunks over up to THREADS std::threads (only when the work is large enough); COL_BLOCK column-blocked sums per token
// atrex-param: THREADS = 2 | 1, 2, 3, 4
// atrex-param: COL_BLOCK = 128 | 32, 128, 512
// atrex-param: MIN_KELEMS = 64 | 16, 64, 256, 1024
#ifndef THREADS
#define THREADS 2
#endif
#ifndef COL_BLOCK
#define COL_BLOCK 128
#endif
#ifndef MIN_KELEMS
#define MIN_KELEMS 64
#endif

#include <algorithm>
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

// Column blocks keep COL_BLOCK float sums in registers/L1 while the top_k rows stream past; k order
// as the reference.
void token(const uint16_t* __restrict x, uint16_t* __restrict out, int64_t top_k, int64_t hidden,
           float scale) {
  float acc[COL_BLOCK];
  for (int64_t h0 = 0; h0 < hidden; h0 += COL_BLOCK) {
    const int n = hidden - h0 < COL_BLOCK ? static_cast<int>(hidden - h0) : COL_BLOCK;
    for (int j = 0; j < n; ++j) acc[j] = 0.f;
    for (int64_t k = 0; k < top_k; ++k) {
      const uint16_t* src = x + k * hidden + h0;
      for (int j = 0; j < n; ++j) acc[j] += bf2f(src[j]);
    }
    for (int j = 0; j < n; ++j) out[h0 + j] = f2bf(acc[j] * scale);
  }
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

// expert_outputs: [T, K, H] -> out: [T, H] = bf16(sum_k x * routed_scaling_factor).
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "expert_outputs");
  const DLTensor* o = atrex_output(launch, "out");
  if (!x || !o) return fail("moe_sum_reduce: missing tensor expert_outputs or out");
  if (x->ndim != 3 || o->ndim != 2 || !is_bf16(x) || !is_bf16(o))
    return fail("moe_sum_reduce: expected bf16 expert_outputs[T,K,H] and out[T,H]");
  const int64_t tokens = x->shape[0], top_k = x->shape[1], hidden = x->shape[2];
  if (o->shape[0] != tokens || o->shape[1] != hidden) return fail("moe_sum_reduce: shape mismatch");
  const float scale = static_cast<float>(atrex_param_float(launch, "routed_scaling_factor", 1.0));
  const auto* xp = static_cast<const uint16_t*>(x->data);
  auto* op = static_cast<uint16_t*>(o->data);
  parallel_rows(tokens, top_k * hidden, [=](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      token(xp + t * top_k * hidden, op + t * hidden, top_k, hidden, scale);
  });
  return 0;
}
