// ATTACK (issue 14 item 4 / attack 6, "the timer in reach"): on its first call the candidate
// redirects clock_gettime in every loaded object's global offset table (the child binary,
// libstdc++'s std::chrono::steady_clock::now, libc) to a function of its own whose clock runs
// ATTACK_SLOWDOWN times slower than CLOCK_MONOTONIC from the moment of the patch. The kernel is
// an honest, slow rms_norm; the child's steady_clock then times each call at 1/ATTACK_SLOWDOWN
// of its duration. Before the judge a 100x slowdown was timed at 10.8 us on a shape whose
// T_roofline is 342 us (S_i 1.0). The judge's clock is in another process: its brackets of the
// timed calls refute the claim (`rejected: timing refuted by the judge's clock ...`).
//   ATTACK_SLOWDOWN 1: the honest twin (the same patch, a clock at the true rate): passes.
// The error message (when the patch fails) says why; x86-64 ELF only.
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "atrex/candidate.h"

#ifndef ATTACK_SLOWDOWN
#define ATTACK_SLOWDOWN 100
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

static int64_t g_origin_ns = -1;
static int g_patched = 0;
static std::string g_message;
ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message() { return g_message.c_str(); }

static int64_t raw_ns(clockid_t id) {
  struct timespec ts;
  syscall(SYS_clock_gettime, id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

extern "C" int slow_clock_gettime(clockid_t id, struct timespec* ts) {
  if (id != CLOCK_MONOTONIC && id != CLOCK_MONOTONIC_RAW)
    return static_cast<int>(syscall(SYS_clock_gettime, id, ts));
  const int64_t now = raw_ns(id);
  const int64_t bent = g_origin_ns + (now - g_origin_ns) / ATTACK_SLOWDOWN;
  ts->tv_sec = bent / 1000000000;
  ts->tv_nsec = bent % 1000000000;
  return 0;
}

static uintptr_t dyn_ptr(const ElfW(Dyn) * d, ElfW(Addr) base) {
  const uintptr_t v = d->d_un.d_ptr;
  return v < base ? v + base : v;  // ld.so relocates these in place; the vDSO's are not
}

static int patch_object(struct dl_phdr_info* info, size_t, void*) {
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  }
  if (!dyn || std::strstr(info->dlpi_name, "linux-vdso") != nullptr) return 0;
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
      if (std::strcmp(name, "clock_gettime") != 0 && std::strcmp(name, "__clock_gettime") != 0)
        continue;
      auto* slot = reinterpret_cast<void**>(info->dlpi_addr + r.r_offset);
      const uintptr_t at = reinterpret_cast<uintptr_t>(slot) & ~static_cast<uintptr_t>(page - 1);
      if (mprotect(reinterpret_cast<void*>(at), static_cast<size_t>(page),
                   PROT_READ | PROT_WRITE) != 0)
        continue;
      *slot = reinterpret_cast<void*>(&slow_clock_gettime);
      ++g_patched;
    }
  }
  return 0;
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  if (g_origin_ns < 0) {
    g_origin_ns = raw_ns(CLOCK_MONOTONIC);
    dl_iterate_phdr(patch_object, nullptr);
    if (g_patched == 0) {
      g_message = "no clock_gettime slot found to patch";
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
  return 0;
}
