// CUDA twin of rms_norm_slows_clock.cpp (issue 14 attack 6 on the GPU): on its first call the
// candidate redirects cudaEventElapsedTime in every loaded object's global offset table (the
// child binary's calls into the shared CUDA runtime) to a function of its own that divides the
// elapsed time by ATTACK_SLOWDOWN (the real function taken from the loader, so that lazy
// binding's resolver cannot write the slot back). The kernel is a correct but deliberately slow rms_norm (one
// block of 32 threads walks every row: tens of milliseconds on rms_norm shape 0). Event and graph-replay
// timing read cudaEventElapsedTime, so the child claims 1/ATTACK_SLOWDOWN of the true time; the
// judge's clock brackets each timed call (or replay batch) from another process: `rejected:
// timing refuted by the judge's clock`. CUPTI spans (timing_mode auto) do not read the event
// time; there the bent event window is only compared with the span, and the span stands.
//   ATTACK_SLOWDOWN 1: the honest twin (the same patch, true times): passes.
// x86-64 ELF only.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "atrex/candidate.h"

#ifndef ATTACK_SLOWDOWN
#define ATTACK_SLOWDOWN 100
#endif

namespace {
__global__ void slow_rms_norm(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* out,
                              int64_t rows, int64_t hidden, float eps) {
  for (int64_t row = threadIdx.x; row < rows; row += blockDim.x) {
    const __nv_bfloat16* xr = x + row * hidden;
    float ss = 0.f;
    for (int64_t h = 0; h < hidden; ++h) {
      const float v = __bfloat162float(xr[h]);
      ss += v * v;
    }
    const float inv = rsqrtf(ss / static_cast<float>(hidden) + eps);
    for (int64_t h = 0; h < hidden; ++h)
      out[row * hidden + h] =
          __float2bfloat16_rn(__bfloat162float(xr[h]) * inv * __bfloat162float(w[h]));
  }
}
}  // namespace

static int g_patched = 0;
static std::string g_message;
ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message() { return g_message.c_str(); }

using ElapsedFn = cudaError_t (*)(float*, cudaEvent_t, cudaEvent_t);
static ElapsedFn g_real = nullptr;

extern "C" cudaError_t slow_elapsed(float* ms, cudaEvent_t a, cudaEvent_t b) {
  const cudaError_t e = g_real(ms, a, b);
  if (e == cudaSuccess && ms) *ms /= static_cast<float>(ATTACK_SLOWDOWN);
  return e;
}

static uintptr_t dyn_ptr(const ElfW(Dyn) * d, ElfW(Addr) base) {
  const uintptr_t v = d->d_un.d_ptr;
  return v < base ? v + base : v;
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
      if (std::strcmp(name, "cudaEventElapsedTime") != 0 &&
          std::strncmp(name, "cudaEventElapsedTime_v", 22) != 0)
        continue;
      auto* slot = reinterpret_cast<void**>(info->dlpi_addr + r.r_offset);
      if (*slot == reinterpret_cast<void*>(&slow_elapsed)) continue;
      const uintptr_t at = reinterpret_cast<uintptr_t>(slot) & ~static_cast<uintptr_t>(page - 1);
      if (mprotect(reinterpret_cast<void*>(at), static_cast<size_t>(page),
                   PROT_READ | PROT_WRITE) != 0)
        continue;
      // The real function from the loader, not from the slot: the child is linked with lazy
      // binding, and before the child's first timed call the slot holds its PLT stub, whose
      // resolver writes the real address back into the slot on the first call through it and
      // so undoes the patch after one sample (the H200 run of 2026-12-01: not one sample bent).
      if (!g_real) g_real = reinterpret_cast<ElapsedFn>(dlsym(RTLD_DEFAULT, "cudaEventElapsedTime"));
      if (!g_real) continue;
      *slot = reinterpret_cast<void*>(&slow_elapsed);
      ++g_patched;
    }
  }
  return 0;
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  static bool tried = false;
  if (!tried) {
    tried = true;
    dl_iterate_phdr(patch_object, nullptr);
    if (g_patched == 0 || !g_real) {
      g_message = "no cudaEventElapsedTime slot found to patch";
      return 9;
    }
  }
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  slow_rms_norm<<<1, 32, 0, static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const __nv_bfloat16*>(x->data), static_cast<const __nv_bfloat16*>(w->data),
      static_cast<__nv_bfloat16*>(out->data), rows, hidden, eps);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
