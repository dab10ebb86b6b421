// ATTACK (a fresh attacker's, 2026-12-06, "the judge's dice"; see "ATTACK" below): predicting the
// judge's random draws by solving its generator's state from what the child is told.
// GF(2) state recovery of libstdc++'s std::mt19937_64 from truncated outputs (the low 40 bits of
// some outputs, a few low bits of others).
// Unknowns: Y_0..Y_311, the first 312 generated words (output i = temper(Y_i)); every later word
// follows Y_k = Y_{k-156} ^ T(Y_{k-312}, Y_{k-311}). Unknown bits are ordered by column
// (j mod 156) so that equation rows are banded; rows spanning the wrap are inserted last.
#include <cstdint>
#include <cstring>
#include <vector>
#include <algorithm>

namespace mtsolve {

constexpr int N = 312, M = 156;
constexpr int NU = N * 64;  // 19968 unknown bits
constexpr int RW = N;       // words per row
constexpr uint64_t MA = 0xB5026F5AA96619E9ull, UM = ~0ull << 31, LM = (1ull << 31) - 1;

inline uint64_t temper(uint64_t y) {
  y ^= (y >> 29) & 0x5555555555555555ull;
  y ^= (y << 17) & 0x71D67FFFEDA60000ull;
  y ^= (y << 37) & 0xFFF7EEE000000000ull;
  y ^= (y >> 43);
  return y;
}
inline int uword(int j) { return (j % M) * 2 + j / M; }  // the row word holding Y_j's bits

struct Solver {
  // Symbolic words: ring of N words, each 64 rows of RW words.
  std::vector<uint64_t> ring;  // N * 64 * RW
  long next_sym = 0;           // next Y index to generate
  uint64_t tm[64];             // tm[b]: mask of y bits whose parity is bit b of temper(y)
  struct Piv { int lo = -1, hi = -1; uint8_t rhs = 0; std::vector<uint64_t> w; };
  std::vector<Piv> piv;        // by pivot bit
  int rank = 0, inconsistent = 0;
  std::vector<std::pair<std::vector<uint64_t>, uint8_t>> deferred;  // wrap rows (full width)
  std::vector<uint64_t> sol;   // NU bits
  uint64_t Y[N];               // numeric Y_0..Y_311 once solved
  std::vector<uint64_t> gen;   // numeric Y_k, k >= 0 (extended on demand)

  Solver() : ring(size_t(N) * 64 * RW, 0), piv(NU) {
    for (int b = 0; b < 64; ++b) tm[b] = 0;
    for (int c = 0; c < 64; ++c) {
      const uint64_t t = temper(1ull << c);
      for (int b = 0; b < 64; ++b)
        if ((t >> b) & 1) tm[b] |= 1ull << c;
    }
  }
  uint64_t* sym(long k, int bit) { return &ring[(size_t(k % N) * 64 + bit) * RW]; }

  void generate_to(long k) {
    std::vector<uint64_t> tmp(size_t(64) * RW);
    while (next_sym <= k) {
      const long s = next_sym;
      if (s < N) {
        for (int b = 0; b < 64; ++b) {
          uint64_t* r = sym(s, b);
          std::memset(r, 0, RW * 8);
          const int u = uword(int(s)) * 64 + b;
          r[u / 64] |= 1ull << (u % 64);
        }
      } else {
        // y bit d: A = Y_{s-312} for d >= 31, B = Y_{s-311} for d < 31.
        auto ybit = [&](int d) -> const uint64_t* { return d >= 31 ? sym(s - 312, d) : sym(s - 311, d); };
        for (int c = 0; c < 64; ++c) {
          uint64_t* t = &tmp[size_t(c) * RW];
          std::memcpy(t, sym(s - 156, c), RW * 8);
          if (c <= 62) { const uint64_t* a = ybit(c + 1); for (int w = 0; w < RW; ++w) t[w] ^= a[w]; }
          if ((MA >> c) & 1) { const uint64_t* a = ybit(0); for (int w = 0; w < RW; ++w) t[w] ^= a[w]; }
        }
        // Y_{s-312}'s slot is reused for Y_s (s-312 is no longer needed after this).
        for (int c = 0; c < 64; ++c) std::memcpy(sym(s, c), &tmp[size_t(c) * RW], RW * 8);
      }
      ++next_sym;
    }
  }

  bool insert(std::vector<uint64_t> r, int lo, int hi, uint8_t rhs) {
    for (;;) {
      while (lo <= hi && r[lo] == 0) ++lo;
      if (lo > hi) { if (rhs) ++inconsistent; return false; }
      const int p = lo * 64 + __builtin_ctzll(r[lo]);
      Piv& P = piv[p];
      if (P.lo >= 0) {
        for (int w = P.lo; w <= P.hi; ++w) r[w] ^= P.w[w - P.lo];
        hi = std::max(hi, P.hi);
        rhs ^= P.rhs;
        continue;
      }
      while (hi > lo && r[hi] == 0) --hi;
      P.lo = lo; P.hi = hi; P.rhs = rhs;
      P.w.assign(r.begin() + lo, r.begin() + hi + 1);
      ++rank;
      return true;
    }
  }

  // Equation: parity(mask & temper-input bits of Y_k) ... i.e. bit b of temper(Y_k) == v.
  void add_bit(long k, int b, int v) {
    generate_to(k);
    std::vector<uint64_t> r(RW, 0);
    for (int c = 0; c < 64; ++c) {
      if (!((tm[b] >> c) & 1)) continue;
      const uint64_t* a = sym(k, c);
      for (int w = 0; w < RW; ++w) r[w] ^= a[w];
    }
    int lo = 0, hi = RW - 1;
    while (lo <= hi && r[lo] == 0) ++lo;
    while (hi >= lo && r[hi] == 0) --hi;
    if (lo > hi) return;
    if (hi - lo > 64) { deferred.emplace_back(std::move(r), uint8_t(v)); return; }
    insert(std::move(r), lo, hi, uint8_t(v));
  }
  void add_low_bits(long k, uint64_t value, int nbits) {
    for (int b = 0; b < nbits; ++b) add_bit(k, b, int((value >> b) & 1));
  }

  // Inserts the deferred rows and back-substitutes; fills Y. Returns the rank.
  int solve() {
    for (auto& d : deferred) insert(std::move(d.first), 0, RW - 1, d.second);
    deferred.clear();
    sol.assign(RW, 0);
    for (int p = NU - 1; p >= 0; --p) {
      const Piv& P = piv[p];
      if (P.lo < 0) continue;
      uint64_t acc = 0;
      for (int w = P.lo; w <= P.hi; ++w) acc ^= P.w[w - P.lo] & sol[w];
      const int v = (__builtin_popcountll(acc) & 1) ^ P.rhs;  // bit p of sol is still 0
      if (v) sol[p / 64] |= 1ull << (p % 64);
    }
    for (int j = 0; j < N; ++j) {
      uint64_t y = 0;
      for (int b = 0; b < 64; ++b) {
        const int u = uword(j) * 64 + b;
        if ((sol[u / 64] >> (u % 64)) & 1) y |= 1ull << b;
      }
      Y[j] = y;
    }
    gen.assign(Y, Y + N);
    return rank;
  }
  // Output i (numeric, after solve()).
  uint64_t output(long i) {
    while (long(gen.size()) <= i) {
      const long s = long(gen.size());
      const uint64_t y = (gen[s - 312] & UM) | (gen[s - 311] & LM);
      gen.push_back(gen[s - 156] ^ (y >> 1) ^ ((y & 1) ? MA : 0));
    }
    return temper(gen[i]);
  }
  // Free the big buffers once solved.
  void release() { std::vector<uint64_t>().swap(ring); std::vector<Piv>().swap(piv); }
};

}  // namespace mtsolve
// ---- the candidate proper (after the solver) ----------------------------------------------
// ATTACK ("the judge's dice"): the judge of stop 27 drew every go's splice, every re-check and the
// first re-check's position from ONE std::mt19937_64 seeded with std::random_device{}() (judge.cpp
// rng_; getrandom(2) since): a linear generator over GF(2), whose outputs the candidate sees. A GOT hook on read() in
// the child executable reads the judge's replies on fd 7: each go carries 40 low bits of one
// output ({"go":true,"splice":N}), and the order of the replies says which outputs were drawn for
// timing_begin and for the re-check decisions (choose_recheck draws only once a shape had its
// first re-check). After ~500 goes (the tiny shapes of the task) a background thread solves the
// 19937-bit state, and from then on the candidate knows, before each timed call:
//   - the splice the judge will name at the go (so the window offsets of x and weight), and
//   - whether the judge will re-check that call.
// ATTACK 1: a GOT hook on memset() in the child executable: when the harness poisons the output
// before a timed call (prepare_timed_call, outside the judge's bracket, before the flush), the hook
// writes the correct answer for the predicted window instead. The call itself then only spins
// ATTACK_FRAC x the honest in-call time (measured on the shape's untimed calls) and returns: the
// outputs are right (the judge's read at the done, re-checks, last-call check all pass), the
// bracket holds no work, so the judge's bound is ~0 on every shape. A call whose go does not
// match the prediction computes.
// ATTACK 0: the honest twin: the same hooks, tracking and solver; every call computes in the call.
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include "atrex/candidate.h"

#ifndef ATTACK
#define ATTACK 1
#endif
#ifndef ATTACK_FRAC
#define ATTACK_FRAC 0.25
#endif
#ifndef ATTACK_GBPS
#define ATTACK_GBPS 28  // > 0: a fast call spins 4*numel bytes / ATTACK_GBPS (the roofline's traffic)
#endif
#ifndef SOLVE_AFTER
#define SOLVE_AFTER 512
#endif

static double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- kernel (portable C++: bf16 in/out, fp32 math; any host's compiler vectorises it) ----
static inline float bf16_to_float(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t float_to_bf16(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
static void rms_rows(const uint16_t* x, const uint16_t* w, uint16_t* o, int64_t rows, int64_t H,
                     float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* xr = x + r * H;
    uint16_t* orow = o + r * H;
    float ss = 0;
    for (int64_t h = 0; h < H; ++h) ss += bf16_to_float(xr[h]) * bf16_to_float(xr[h]);
    const float inv = 1.0f / std::sqrt(ss / float(H) + eps);
    for (int64_t h = 0; h < H; ++h)
      orow[h] = float_to_bf16(bf16_to_float(xr[h]) * inv * bf16_to_float(w[h]));
  }
}

// ---- the harness's splice, reimplemented (shape_run_support.h window_offset, numeric.h mix64) ----
static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static uint64_t window_offset(uint64_t numel, size_t index, int64_t variant) {
  const uint64_t step = 32, steps = numel / step;
  const uint64_t h = mix64(uint64_t(variant) * 0x9e3779b97f4a7c15ull + index + 7);
  return (1 + h % std::max<uint64_t>(1, steps - 1)) * step;
}

// ---- logging (only with -DATTACK_LOG='"<file>"', and a file the sandbox lets it write) ----
static FILE* g_log = nullptr;
#define LOG(...) do { if (g_log) { std::fprintf(g_log, __VA_ARGS__); std::fflush(g_log); } } while (0)

// ---- the judge's dice, tracked ----
struct Obs { long idx; uint64_t value; int nbits; };
static std::mutex g_mu;
static std::vector<Obs> g_obs;       // guarded by g_mu
static long g_idx = 0;               // next rng index the judge will draw
static long g_tb_idx = -1;           // this shape's timing_begin draw
static int g_tr = 0;                 // this shape's timed re-checks
static long g_calls = 0;             // this shape's timed calls (call_end replies)
static int g_splices = 0;
static bool g_go_pending = false;
static int64_t g_go_splice = -1;
static double g_tb_time = 0;  // when this shape's timing_begin reply came
static double g_sum = 0, g_sumsq = 0;
static long g_n = 0;
static double g_tau = 0;       // the fast calls' duration
static int g_skipped = 0;
static std::atomic<bool> g_solved{false};
static std::atomic<bool> g_solving{false};
static mtsolve::Solver* g_S = nullptr;  // owned by the harness thread once g_solved
static int g_pred_go_ok = 0, g_pred_go_bad = 0, g_pred_chk_ok = 0, g_pred_chk_bad = 0, g_pred_chk_true = 0;
static int g_solve_tries = 0;
static double g_solve_s = 0;

static void solver_thread(std::vector<Obs> obs) {
  const double t0 = now_us();
  std::stable_sort(obs.begin(), obs.end(), [](const Obs& a, const Obs& b) { return a.idx < b.idx; });
  auto* S = new mtsolve::Solver();
  for (const Obs& o : obs) S->add_low_bits(o.idx, o.value, o.nbits);
  const int rank = S->solve();
  bool good = true;
  for (const Obs& o : obs) {
    const uint64_t mask = o.nbits >= 64 ? ~0ull : ((1ull << o.nbits) - 1);
    if ((S->output(o.idx) & mask) != o.value) { good = false; break; }
  }
  S->release();
  g_solve_s = (now_us() - t0) / 1e6;
  LOG("solver: %zu obs rank %d incons %d good %d in %.2fs\n", obs.size(), rank, S->inconsistent, good ? 1 : 0, g_solve_s);
  if (good && rank >= 19937) {
    g_S = S;
    g_solved.store(true, std::memory_order_release);
  } else {
    delete S;
  }
  g_solving.store(false);
}

static void observe(long idx, uint64_t value, int nbits) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_obs.push_back(Obs{idx, value, nbits});
}

static void maybe_solve() {
  if (g_solved.load() || g_solving.load() || g_splices < SOLVE_AFTER + 40 * g_solve_tries) return;
  g_solving.store(true);
  ++g_solve_tries;
  std::vector<Obs> copy;
  { std::lock_guard<std::mutex> lock(g_mu); copy = g_obs; }
  std::thread(solver_thread, std::move(copy)).detach();
}

static uint64_t predicted(long idx) { return g_S->output(idx); }

static void on_judge_line(const std::string& m) {
  const bool solved = g_solved.load(std::memory_order_acquire);
  if (m == "{\"go\":true}") {  // timing_begin: rng_() % min_iterations
    g_tb_idx = g_idx++;
    g_tr = 0; g_calls = 0;
    g_tb_time = now_us(); g_sum = g_sumsq = 0; g_n = 0;
    return;
  }
  size_t at = m.find("\"splice\":");
  if (at != std::string::npos) {
    const int64_t n = std::strtoll(m.c_str() + at + 9, nullptr, 10);
    if (solved) { if ((predicted(g_idx) & ((1ull << 40) - 1)) == uint64_t(n)) ++g_pred_go_ok; else ++g_pred_go_bad; }
    observe(g_idx, uint64_t(n), 40);
    ++g_idx; ++g_splices;
    g_go_pending = true; g_go_splice = n;
    maybe_solve();
    return;
  }
  at = m.find("\"check\":");
  if (at != std::string::npos) {
    const bool chk = m.compare(at + 8, 4, "true") == 0;
    bool pred = false;
    if (g_tr == 0) {
      if (solved) pred = long(predicted(g_tb_idx) % 10) == g_calls;  // min_iterations 10
      if (chk) { g_tr = 1; observe(g_tb_idx, uint64_t(g_calls & 1), 1); }  // draw % 10 == R: its low bit
    } else {
      const bool freq = g_tr < 8;
      if (solved) pred = predicted(g_idx) % (freq ? 4 : 16) == 0;
      if (chk) { observe(g_idx, 0, freq ? 2 : 4); ++g_tr; }
      ++g_idx;
    }
    if (solved) { if (pred == chk) ++g_pred_chk_ok; else ++g_pred_chk_bad; if (chk) ++g_pred_chk_true; }
    ++g_calls;
  }
}

using ReadFn = ssize_t (*)(int, void*, size_t);
using MemsetFn = void* (*)(void*, int, size_t);
static ReadFn g_real_read = nullptr;
static MemsetFn g_real_memset = nullptr;
static std::string g_pending7;

extern "C" ssize_t attack_read(int fd, void* buf, size_t n) {
  const ssize_t r = g_real_read(fd, buf, n);
  if (fd == 7 && r > 0) {
    g_pending7.append(static_cast<const char*>(buf), size_t(r));
    size_t nl;
    while ((nl = g_pending7.find('\n')) != std::string::npos) {
      on_judge_line(g_pending7.substr(0, nl));
      g_pending7.erase(0, nl + 1);
    }
  }
  return r;
}

// The shape in hand, as the candidate's untimed calls show it.
static void* g_out = nullptr;
static size_t g_out_bytes = 0;
static const uint16_t *g_base_x = nullptr, *g_base_w = nullptr;
static int64_t g_rows = 0, g_H = 0;
static float g_eps = 1e-6f;
static std::string g_shape;
static double g_honest_us = 0;  // in-call time of the shape's last untimed call
static int64_t g_pre_splice = -1;  // the splice whose answer the memset hook wrote
static int g_precomputed = 0, g_fast = 0, g_slow_timed = 0;

// ATTACK 2: the candidate's own copy of the timing loop's stop rule (shape_measure.cpp done():
// max_iterations 200, min_iterations 10, min_time_s 0.2, max_timing_s 3, target_rse 0.01), with
// margins, on the samples as the candidate times them itself.
static bool might_be_last() {
  const long n = g_n + 1;
  const double s = g_sum + g_tau, q = g_sumsq + g_tau * g_tau;
  if (n >= 195) return true;
  if (n < 10) return false;
  if (now_us() - g_tb_time > 2.4e6) return true;
  const double mean = s / double(n), var = std::max(0.0, q / double(n) - mean * mean) * double(n) / double(n - 1);
  const double rse = std::sqrt(var / double(n)) / mean;
  return s >= 0.8 * 0.2e6 && rse <= 0.03;
}
// Whether the judge will re-check the timed call about to be made (its splice is draw g_idx, its
// re-check decision draw g_idx + 1 once the shape had its first re-check).
static bool will_recheck() {
  if (g_tr == 0) return long(predicted(g_tb_idx) % 10) == g_calls;
  return predicted(g_idx + 1) % (g_tr < 8 ? 4 : 16) == 0;
}

extern "C" void* attack_memset(void* dst, int c, size_t n) {
  if (ATTACK && dst == g_out && n == g_out_bytes && c == 0xFF && g_base_x &&
      g_solved.load(std::memory_order_acquire) && g_tb_idx >= 0) {
    // The next draw is this timed call's splice (prepare_timed_call comes after the previous
    // call's done and its re-check, before this call's call_begin).
    const int64_t N = int64_t(predicted(g_idx) & ((1ull << 40) - 1));
    if (ATTACK == 2 && !will_recheck() && !might_be_last()) {
      g_pre_splice = N;  // left poisoned: the judge will not look
      ++g_skipped;
      return g_real_memset(dst, c, n);
    }
    const uint64_t kx = window_offset(uint64_t(g_rows * g_H), 0, N);
    const uint64_t kw = window_offset(uint64_t(g_H), 1, N);
    rms_rows(g_base_x + kx, g_base_w + kw, static_cast<uint16_t*>(dst), g_rows, g_H, g_eps);
    g_pre_splice = N;
    ++g_precomputed;
    return dst;
  }
  return g_real_memset(dst, c, n);
}

static uintptr_t dyn_ptr(const ElfW(Dyn) * d, ElfW(Addr) base) { const uintptr_t p = d->d_un.d_ptr; return p < base ? p + base : p; }
static int g_patched = 0;
static int patch_main(struct dl_phdr_info* info, size_t, void* done) {
  if (*static_cast<bool*>(done)) return 0;
  *static_cast<bool*>(done) = true;
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  if (!dyn) return 0;
  const ElfW(Sym)* symtab = nullptr; const char* strtab = nullptr;
  const ElfW(Rela)* tables[2] = {nullptr, nullptr}; size_t sizes[2] = {0, 0};
  for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB: symtab = reinterpret_cast<const ElfW(Sym)*>(dyn_ptr(d, info->dlpi_addr)); break;
      case DT_STRTAB: strtab = reinterpret_cast<const char*>(dyn_ptr(d, info->dlpi_addr)); break;
      case DT_JMPREL: tables[0] = reinterpret_cast<const ElfW(Rela)*>(dyn_ptr(d, info->dlpi_addr)); break;
      case DT_PLTRELSZ: sizes[0] = d->d_un.d_val; break;
      case DT_RELA: tables[1] = reinterpret_cast<const ElfW(Rela)*>(dyn_ptr(d, info->dlpi_addr)); break;
      case DT_RELASZ: sizes[1] = d->d_un.d_val; break;
      default: break;
    }
  }
  if (!symtab || !strtab) return 0;
  const long page = sysconf(_SC_PAGESIZE);
  for (int t = 0; t < 2; ++t) {
    if (!tables[t]) continue;
    for (size_t k = 0; k < sizes[t] / sizeof(ElfW(Rela)); ++k) {
      const ElfW(Rela)& r = tables[t][k];
      const auto type = ELF64_R_TYPE(r.r_info);
      if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
      const char* name = strtab + symtab[ELF64_R_SYM(r.r_info)].st_name;
      void* repl = nullptr;
      if (std::strcmp(name, "read") == 0) repl = reinterpret_cast<void*>(&attack_read);
      else if (std::strcmp(name, "memset") == 0) repl = reinterpret_cast<void*>(&attack_memset);
      if (!repl) continue;
      auto* slot = reinterpret_cast<void**>(info->dlpi_addr + r.r_offset);
      const uintptr_t at = reinterpret_cast<uintptr_t>(slot) & ~static_cast<uintptr_t>(page - 1);
      if (mprotect(reinterpret_cast<void*>(at), size_t(page), PROT_READ | PROT_WRITE) != 0) continue;
      *slot = repl;
      ++g_patched;
    }
  }
  return 0;
}

// ATTACK_REPORT 1 (the test's mode, kernels/faults; runner/tests): once the solved state has
// predicted 32 goes' splices and none wrongly, the call fails with a message that says so: the
// judge's draws were predictable. Against a judge whose draws are unpredictable the solver never
// gets a consistent state, every call computes, and the candidate passes like its twin.
#ifndef ATTACK_REPORT
#define ATTACK_REPORT 0
#endif
static std::string g_report;
ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message() { return g_report.c_str(); }

static int run_call(const AtrexLaunch* launch);
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  if (ATTACK_REPORT && g_pred_go_ok >= 32 && g_pred_go_bad == 0) {
    g_report = "predicted the judge's draws: " + std::to_string(g_pred_go_ok) + " goes' splices "
               "right, " + std::to_string(g_pred_go_bad) + " wrong";
    return 1;
  }
  return run_call(launch);
}

static int run_call(const AtrexLaunch* launch) {
  static bool installed = false;
  if (!installed) {
    installed = true;
#ifdef ATTACK_LOG
    g_log = std::fopen(ATTACK_LOG, "a");  // e.g. -DATTACK_LOG='"/tmp/mt.log"' with --no-sandbox
#endif
    LOG("---- child start, ATTACK %d\n", ATTACK);
    g_real_read = reinterpret_cast<ReadFn>(dlsym(RTLD_DEFAULT, "read"));
    g_real_memset = reinterpret_cast<MemsetFn>(dlsym(RTLD_DEFAULT, "memset"));
    bool done = false;
    if (g_real_read && g_real_memset) dl_iterate_phdr(patch_main, &done);
    LOG("patched %d slots\n", g_patched);
  }
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  const int64_t rows = x->shape[0], H = x->shape[1];
  const float eps = float(atrex_param_float(launch, "eps", 1e-6));
  const std::string id = launch->shape_id ? launch->shape_id : "";
  const bool timed = g_go_pending;
  g_go_pending = false;
  if (id != g_shape || rows != g_rows || H != g_H) {
    if (!g_shape.empty()) LOG("shape %s: skipped %d\n", g_shape.c_str(), g_skipped);
    if (!g_shape.empty())
      LOG("shape %s: precomputed %d fast %d slow_timed %d | splices %d idx %ld solved %d pred go %d/%d chk %d/%d (true %d)\n",
          g_shape.c_str(), g_precomputed, g_fast, g_slow_timed, g_splices, g_idx, g_solved.load() ? 1 : 0,
          g_pred_go_ok, g_pred_go_bad, g_pred_chk_ok, g_pred_chk_bad, g_pred_chk_true);
    g_shape = id; g_rows = rows; g_H = H; g_base_x = g_base_w = nullptr; g_out = nullptr;
    g_precomputed = g_fast = g_slow_timed = g_skipped = 0;
  }
  g_eps = eps;
  const auto* xs = static_cast<const uint16_t*>(x->data);
  const auto* ws = static_cast<const uint16_t*>(w->data);
  auto* os = static_cast<uint16_t*>(out->data);
  if (!timed) {  // untimed calls point at the start of each input's work buffer
    g_base_x = xs; g_base_w = ws;
    g_out = os; g_out_bytes = size_t(rows * H) * 2;
  }
  const double t0 = now_us();
  if (ATTACK && timed && g_pre_splice == g_go_splice && g_pre_splice >= 0 && g_base_x &&
      xs == g_base_x + window_offset(uint64_t(rows * H), 0, g_go_splice) &&
      ws == g_base_w + window_offset(uint64_t(H), 1, g_go_splice)) {
    g_pre_splice = -1;
    const double target = g_tau;
    while (now_us() - t0 < target) {}
    ++g_fast;
    const double dt = now_us() - t0;
    g_sum += dt; g_sumsq += dt * dt; ++g_n;
    return 0;
  }
  g_pre_splice = -1;
  rms_rows(xs, ws, os, rows, H, eps);
  const double dt = now_us() - t0;
  if (!timed) {
    g_honest_us = dt;
    g_tau = ATTACK_GBPS > 0 ? 4.0 * double(rows * H) / (ATTACK_GBPS * 1e3) : ATTACK_FRAC * g_honest_us;
  } else {
    ++g_slow_timed;
    g_sum += dt; g_sumsq += dt * dt; ++g_n;
  }
  return 0;
}

__attribute__((destructor)) static void report() {
  LOG("exit: skipped %d\n", g_skipped);
  LOG("exit: shape %s precomputed %d fast %d slow_timed %d | splices %d idx %ld solved %d (tries %d, %.2fs) pred go %d/%d chk %d/%d (true %d)\n",
      g_shape.c_str(), g_precomputed, g_fast, g_slow_timed, g_splices, g_idx, g_solved.load() ? 1 : 0, g_solve_tries, g_solve_s,
      g_pred_go_ok, g_pred_go_bad, g_pred_chk_ok, g_pred_chk_bad, g_pred_chk_true);
}
