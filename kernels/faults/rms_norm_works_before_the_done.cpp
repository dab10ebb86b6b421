// ATTACKS the timed sample by moving the work past the call's return, into the harness's own
// steps before the done (attack round 3, where it was the harness's digest of the outputs, since
// removed): on cpu the child times the call alone with steady_clock and then sends the done
// {"op":"call_end",...} on fd 6, which ends the judge's bracket. On its first call the candidate
// redirects the `write` slot of the child executable's GOT (the real function from dlsym): it
// sees the harness send {"op":"call_begin"} (the next call is a timed one), and a timed call
// then returns at once, doing nothing (the sample is ~1 us); the hooked write computes that
// call's outputs before it lets the done go: the judge reads finished, correct outputs at the
// done, and the re-checks and the check of the last timed call pass. Every other call computes
// in the call. Nothing bends the child's clock; the work just leaves the sample for the part of
// the bracket the sample does not cover.
// Expected: like a bent clock, refuted by the judge's clock where the call is longer than the
// latency allowance (rms_norm shape 3, ~50 ms: `rejected: timing refuted by the judge's clock`);
// unrefuted below it (the documented open row: calls under ~25 ms on cpu).
// ATTACK_MIN_US t: a deferred call spins t us before it returns (the claim then clears the
// impossible-speed rule, 0.8x T_roofline, on the short shapes the judge cannot refute).
//   ATTACK_DEFER 0: the honest twin: the same hook, every call computed in the call.
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "atrex/candidate.h"

#define ATTACK_DEFER 1
#define ATTACK_MIN_US 0

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

static std::string g_message;
ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message() { return g_message.c_str(); }

using WriteFn = ssize_t (*)(int, const void*, size_t);
static WriteFn g_real_write = nullptr;
static int g_patched = 0;

static bool g_timed_next = false;  // the harness has just sent call_begin
struct Pending {
  bool set = false;
  const uint16_t* x = nullptr;
  const uint16_t* w = nullptr;
  uint16_t* out = nullptr;
  int64_t rows = 0, hidden = 0;
  float eps = 1e-6f;
};
static Pending g_pending;

static void rms_norm(const uint16_t* xs, const uint16_t* ws, uint16_t* os, int64_t rows,
                     int64_t hidden, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    float ss = 0;
    for (int64_t h = 0; h < hidden; ++h) {
      const float v = bf16_to_float(xs[r * hidden + h]);
      ss += v * v;
    }
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(hidden) + eps);
    for (int64_t h = 0; h < hidden; ++h)
      os[r * hidden + h] =
          float_to_bf16(bf16_to_float(xs[r * hidden + h]) * inv * bf16_to_float(ws[h]));
  }
}

extern "C" ssize_t attack_write(int fd, const void* buf, size_t n) {
  if (fd == 6 && n > 0 && ::memmem(buf, n, "\"op\":\"call_begin\"", 17) != nullptr)
    g_timed_next = true;
  if (fd == 6 && n > 0 && g_pending.set && ::memmem(buf, n, "\"op\":\"call_end\"", 15) != nullptr) {
    const Pending p = g_pending;
    g_pending.set = false;
    rms_norm(p.x, p.w, p.out, p.rows, p.hidden, p.eps);
  }
  return g_real_write(fd, buf, n);
}

static uintptr_t dyn_ptr(const ElfW(Dyn) * d, ElfW(Addr) base) {
  const uintptr_t p = d->d_un.d_ptr;
  return p < base ? p + base : p;
}

// The child executable only (the first object dl_iterate_phdr lists): the harness.
static int patch_main(struct dl_phdr_info* info, size_t, void* done) {
  if (*static_cast<bool*>(done)) return 0;
  *static_cast<bool*>(done) = true;
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  }
  if (!dyn) return 0;
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const ElfW(Rela)* tables[2] = {nullptr, nullptr};
  size_t sizes[2] = {0, 0};
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
      void* hook = nullptr;
      if (std::strcmp(name, "write") == 0) hook = reinterpret_cast<void*>(&attack_write);
      if (!hook) continue;
      auto* slot = reinterpret_cast<void**>(info->dlpi_addr + r.r_offset);
      const uintptr_t at = reinterpret_cast<uintptr_t>(slot) & ~static_cast<uintptr_t>(page - 1);
      if (mprotect(reinterpret_cast<void*>(at), static_cast<size_t>(page),
                   PROT_READ | PROT_WRITE) != 0)
        continue;
      *slot = hook;
      ++g_patched;
    }
  }
  return 0;
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  static bool installed = false;
  if (!installed) {
    installed = true;
    g_real_write = reinterpret_cast<WriteFn>(dlsym(RTLD_DEFAULT, "write"));
    bool done = false;
    if (g_real_write) dl_iterate_phdr(patch_main, &done);
    if (g_patched < 1) {
      g_message = "found no GOT slot of write to patch";
      return 9;
    }
  }
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const auto* xs = static_cast<const uint16_t*>(x->data);
  const auto* ws = static_cast<const uint16_t*>(w->data);
  auto* os = static_cast<uint16_t*>(out->data);
  const bool timed = g_timed_next;
  g_timed_next = false;
  if (ATTACK_DEFER && timed) {
    g_pending = Pending{true, xs, ws, os, rows, hidden, eps};
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::micro>(ATTACK_MIN_US);
    while (ATTACK_MIN_US > 0 && std::chrono::steady_clock::now() < until) {
    }
    return 0;
  }
  rms_norm(xs, ws, os, rows, hidden, eps);
  return 0;
}
