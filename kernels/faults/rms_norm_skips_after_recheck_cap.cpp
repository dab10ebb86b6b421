// Fault candidate (the window-splice attack of 2026-12-06, cpu; runner/tests/attack_round3_test.cpp
// AttackRound3.TimedCallsCannotSkipTheirWorkAfterTheLastRecheck): the judge re-checked at most 8
// timed calls on cpu. A GOT hook on read() in the child executable sees the judge's replies:
// {"go":true,"splice":N} (a timed call follows) and {"check":..,"go":true} (was the call just
// done re-checked?). Once 8 re-checks were made no later timed call was compared but the LAST
// one (checked after timing), and the loop ends at max_iterations or the wall limit, which the
// candidate can predict. So after the 8th re-check, timed calls that are surely not the last do
// no work (outputs left poisoned), spinning to ATTACK_FRAC x the honest call's time so the claim
// stays above the judge's bound: shape 0 `ok` at 112 us against the twin's 2334 us. Fixed: after
// the first 8 the judge re-checks with probability 1/16 per call and no cap (judge.cpp
// choose_recheck), so the skipped calls are compared and fail. ATTACK 0: the honest twin (the
// same hooks, every call computed).
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <algorithm>
#include <vector>
#include "atrex/candidate.h"

#ifndef ATTACK
#define ATTACK 1
#endif
#ifndef ATTACK_FRAC
#define ATTACK_FRAC 0.05
#endif
#ifndef ATTACK_SAFE_S
#define ATTACK_SAFE_S 2.2
#endif

static float bf16_to_float(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; __builtin_memcpy(&f, &u, 4); return f; }
static uint16_t float_to_bf16(float f) {
  uint32_t u; __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

using ReadFn = ssize_t (*)(int, void*, size_t);
static ReadFn g_real_read = nullptr;
static int g_patched = 0;
static int g_checks = 0, g_gos = 0;
static bool g_go_pending = false;
static double g_t_bare_go = 0, g_t_timing = 0;
static int g_fakes = 0, g_honest_timed = 0;

extern "C" ssize_t attack_read(int fd, void* buf, size_t n) {
  ssize_t r = g_real_read(fd, buf, n);
  if (r > 0) {
    std::string s(static_cast<const char*>(buf), (size_t)r);
    size_t pos = 0;
    while ((pos = s.find('{', pos)) != std::string::npos) {
      size_t e = s.find('}', pos);
      std::string m = s.substr(pos, e == std::string::npos ? std::string::npos : e - pos + 1);
      if (m.find("\"splice\"") != std::string::npos) {
        if (g_gos == 0) g_t_timing = g_t_bare_go ? g_t_bare_go : now_s();
        ++g_gos; g_go_pending = true;
      } else if (m.find("\"check\":true") != std::string::npos) {
        ++g_checks;
      } else if (m == "{\"go\":true}") {
        g_t_bare_go = now_s();
      }
      pos = e == std::string::npos ? s.size() : e + 1;
    }
  }
  return r;
}

static uintptr_t dyn_ptr(const ElfW(Dyn) * d, ElfW(Addr) base) { const uintptr_t p = d->d_un.d_ptr; return p < base ? p + base : p; }
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
      if (std::strcmp(name, "read") != 0) continue;
      auto* slot = reinterpret_cast<void**>(info->dlpi_addr + r.r_offset);
      const uintptr_t at = reinterpret_cast<uintptr_t>(slot) & ~static_cast<uintptr_t>(page - 1);
      if (mprotect(reinterpret_cast<void*>(at), (size_t)page, PROT_READ | PROT_WRITE) != 0) continue;
      *slot = reinterpret_cast<void*>(&attack_read);
      ++g_patched;
    }
  }
  return 0;
}

static void rms_rows(const uint16_t* xs, const uint16_t* ws, uint16_t* os, int64_t rows, int64_t hidden, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    float ss = 0;
    for (int64_t h = 0; h < hidden; ++h) { const float v = bf16_to_float(xs[r * hidden + h]); ss += v * v; }
    const float inv = 1.0f / std::sqrt(ss / (float)hidden + eps);
    for (int64_t h = 0; h < hidden; ++h)
      os[r * hidden + h] = float_to_bf16(bf16_to_float(xs[r * hidden + h]) * inv * bf16_to_float(ws[h]));
  }
}

static std::string g_shape;
static std::vector<double> g_honest_us;

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  static bool installed = false;
  if (!installed) {
    installed = true;
    g_real_read = reinterpret_cast<ReadFn>(dlsym(RTLD_DEFAULT, "read"));
    bool done = false;
    if (g_real_read) dl_iterate_phdr(patch_main, &done);
  }
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  const std::string id = launch->shape_id ? launch->shape_id : "";
  if (id != g_shape) { g_shape = id; g_checks = 0; g_gos = 0; g_go_pending = false; g_t_timing = 0; g_honest_us.clear(); }
  const bool timed = g_go_pending;
  g_go_pending = false;
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = (float)atrex_param_float(launch, "eps", 1e-6);
  const double t0 = now_s();
  if (ATTACK && timed && g_checks >= 8 && g_gos < 199 && t0 - g_t_timing < ATTACK_SAFE_S && !g_honest_us.empty()) {
    std::vector<double> h = g_honest_us;
    std::nth_element(h.begin(), h.begin() + h.size() / 2, h.end());
    const double target = ATTACK_FRAC * h[h.size() / 2] * 1e-6;
    while (now_s() - t0 < target) {}
    ++g_fakes;
    return 0;  // outputs left poisoned: never compared
  }
  rms_rows((const uint16_t*)x->data, (const uint16_t*)w->data, (uint16_t*)out->data, rows, hidden, eps);
  if (timed) { g_honest_us.push_back((now_s() - t0) * 1e6); ++g_honest_timed; }
  return 0;
}

__attribute__((destructor)) static void report() {
  std::fprintf(stderr, "cap attack: patched=%d fakes=%d honest_timed=%d checks=%d gos=%d\n", g_patched, g_fakes, g_honest_timed, g_checks, g_gos);
}
