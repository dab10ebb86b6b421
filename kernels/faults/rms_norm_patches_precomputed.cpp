// ATTACKS the timed calls by rewriting the harness around them ("precompute and patch", the open
// row of docs/evaluation.md's threat model; attack round 3). The candidate runs in the child's
// process, so the harness's own libc calls are in its reach: on its first call it redirects
// memcpy and memset in the child executable's GOT (the real ones from dlsym) and watches what
// the harness does with its buffers:
//   - a memcpy of a whole input into the launch's x (or weight) buffer is the rotation's copy of
//     input set k (runner/src/child/shape_measure.cpp prepare_timed_call, restore_rotation_set):
//     its source is the pristine set k, which stays put for the shape's whole timing;
//   - the memset of the output to 0xFF right after those copies is the poisoning before the call.
//     The hook writes instead the answer for the pristine set k (computed once per set, in the
//     hook, from the source buffers: outside the timed window and outside the judge's bracket),
//     and remembers the per-row 1/rms;
//   - the memcpys inside x or weight after that are the splice the judge's go named (applied in
//     this process, shape_run_support.h splice_input): a run of <= 64 elements moved.
// The call then only patches what the splice moved: the <= 2 rows of x it touched, and the
// <= 64 columns of weight it touched in every row (from the cached 1/rms). Outputs are correct
// for the spliced inputs, finished when the call returns (so the judge's read at the done matches),
// every check passes; the call is timed at a fraction of a full pass, and the judge's bracket,
// which holds the real call, agrees. Every other call (correctness seeds, range probe, warm-up)
// is computed in full.
// The patch beats any full pass, honest or not: it is under the host's own DRAM roofline, and
// with the measured host-cpu profile (`--hardware auto`) the impossible-speed rule rejects it.
// ATTACK_PAD p > 0 pads each patched call (a spin) to p x the time the hook's copy of a cached
// answer took (about one read and one write of the output: the roofline's traffic), so that the
// claim sits just above the roofline.
//   ATTACK_PATCH 0: the honest twin: the same hooks, passing everything through, every call
//   computed in full.
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
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "atrex/candidate.h"

#define ATTACK_PATCH 1
#define ATTACK_PAD 0

static float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

static uint16_t float_to_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

static std::string g_message;
ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message() { return g_message.c_str(); }

using MemcpyFn = void* (*)(void*, const void*, size_t);
using MemsetFn = void* (*)(void*, int, size_t);
static MemcpyFn g_real_memcpy = nullptr;
static MemsetFn g_real_memset = nullptr;
static int g_patched = 0;

// The shape in hand, from the last call's launch.
struct ShapeView {
  const uint16_t* x = nullptr;
  const uint16_t* w = nullptr;
  uint16_t* out = nullptr;
  size_t xb = 0, wb = 0, ob = 0;
  int64_t rows = 0, hidden = 0;
  float eps = 1e-6f;
  std::string id;
};
static ShapeView g_view;

// One pristine input set's answer: the outputs and each row's 1/rms.
struct Answer {
  std::vector<uint16_t> out;
  std::vector<float> inv;
};
static std::map<std::pair<const void*, const void*>, Answer> g_answers;  // (x source, w source)

static uint64_t g_seq = 0;  // hooked events so far
static uint64_t g_x_copy_seq = 0, g_w_copy_seq = 0;
static const uint16_t* g_src_x = nullptr;
static const uint16_t* g_src_w = nullptr;
static bool g_prefilled = false;
static std::vector<std::pair<size_t, size_t>> g_x_splices, g_w_splices;  // (byte offset, bytes)
static uint64_t g_patched_calls = 0, g_full_calls = 0;
static double g_copy_us = 0;  // the fastest copy of a whole cached answer (ATTACK_PAD)

static double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

static void rms_rows(const uint16_t* xs, const uint16_t* ws, uint16_t* os, float* inv_out,
                     int64_t r0, int64_t r1, int64_t hidden, float eps) {
  for (int64_t r = r0; r < r1; ++r) {
    float ss = 0;
    for (int64_t h = 0; h < hidden; ++h) {
      const float v = bf16_to_float(xs[r * hidden + h]);
      ss += v * v;
    }
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(hidden) + eps);
    if (inv_out) inv_out[r] = inv;
    for (int64_t h = 0; h < hidden; ++h)
      os[r * hidden + h] =
          float_to_bf16(bf16_to_float(xs[r * hidden + h]) * inv * bf16_to_float(ws[h]));
  }
}

extern "C" void* attack_memcpy(void* dst, const void* src, size_t n) {
  ++g_seq;
  const ShapeView& v = g_view;
  if (ATTACK_PATCH && v.x) {
    const auto* d = static_cast<const uint8_t*>(dst);
    const auto* xb = reinterpret_cast<const uint8_t*>(v.x);
    const auto* wb = reinterpret_cast<const uint8_t*>(v.w);
    if (dst == v.x && n == v.xb) {
      g_src_x = static_cast<const uint16_t*>(src);
      g_x_copy_seq = g_seq;
    } else if (dst == v.w && n == v.wb) {
      g_src_w = static_cast<const uint16_t*>(src);
      g_w_copy_seq = g_seq;
    } else if (g_prefilled && d >= xb && d + n <= xb + v.xb && n < v.xb) {
      g_x_splices.emplace_back(static_cast<size_t>(d - xb), n);
    } else if (g_prefilled && d >= wb && d + n <= wb + v.wb && n < v.wb) {
      g_w_splices.emplace_back(static_cast<size_t>(d - wb), n);
    }
  }
  return g_real_memcpy(dst, src, n);
}

extern "C" void* attack_memset(void* dst, int c, size_t n) {
  ++g_seq;
  const ShapeView& v = g_view;
  // The poisoning right after the rotation's copies of x and weight (in that order).
  if (ATTACK_PATCH && v.out && dst == v.out && (c & 0xFF) == 0xFF && n == v.ob &&
      g_w_copy_seq == g_seq - 1 && g_x_copy_seq == g_seq - 2) {
    Answer& a = g_answers[{g_src_x, g_src_w}];
    if (a.out.empty()) {
      a.out.resize(v.ob / 2);
      a.inv.resize(static_cast<size_t>(v.rows));
      rms_rows(g_src_x, g_src_w, a.out.data(), a.inv.data(), 0, v.rows, v.hidden, v.eps);
    }
    const double t0 = now_us();
    g_real_memcpy(dst, a.out.data(), n);
    const double took = now_us() - t0;
    if (g_copy_us == 0 || took < g_copy_us) g_copy_us = took;
    g_prefilled = true;
    g_x_splices.clear();
    g_w_splices.clear();
    return dst;
  }
  g_prefilled = false;
  return g_real_memset(dst, c, n);
}

static uintptr_t dyn_ptr(const ElfW(Dyn) * d, ElfW(Addr) base) {
  const uintptr_t p = d->d_un.d_ptr;
  return p < base ? p + base : p;
}

// The child executable only (the first object dl_iterate_phdr lists, name ""): the harness.
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
      if (std::strcmp(name, "memcpy") == 0) hook = reinterpret_cast<void*>(&attack_memcpy);
      if (std::strcmp(name, "memset") == 0) hook = reinterpret_cast<void*>(&attack_memset);
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
    g_real_memcpy = reinterpret_cast<MemcpyFn>(dlsym(RTLD_DEFAULT, "memcpy"));
    g_real_memset = reinterpret_cast<MemsetFn>(dlsym(RTLD_DEFAULT, "memset"));
    bool done = false;
    if (g_real_memcpy && g_real_memset) dl_iterate_phdr(patch_main, &done);
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
  ShapeView& v = g_view;
  const std::string id = launch->shape_id ? launch->shape_id : "";
  if (v.id != id || v.x != xs || v.w != ws || v.out != os || v.rows != rows || v.hidden != hidden) {
    if (v.id != id) g_answers.clear();  // a new shape: its buffers may reuse old addresses
    v = ShapeView{xs, ws, os, static_cast<size_t>(rows * hidden * 2), static_cast<size_t>(hidden * 2),
                  static_cast<size_t>(rows * hidden * 2), rows, hidden, eps, id};
    g_prefilled = false;
    g_copy_us = 0;
  }
  if (g_prefilled) {
    // The outputs hold the pristine set's answer: patch the splice's columns, then its rows.
    g_prefilled = false;
    const double start = now_us();
    const Answer& a = g_answers[{g_src_x, g_src_w}];
    for (const auto& [off, n] : g_w_splices) {
      const int64_t c0 = static_cast<int64_t>(off / 2), c1 = static_cast<int64_t>((off + n) / 2);
      for (int64_t r = 0; r < rows; ++r) {
        const float inv = a.inv[static_cast<size_t>(r)];
        for (int64_t c = c0; c < c1; ++c)
          os[r * hidden + c] =
              float_to_bf16(bf16_to_float(xs[r * hidden + c]) * inv * bf16_to_float(ws[c]));
      }
    }
    for (const auto& [off, n] : g_x_splices) {
      const int64_t r0 = static_cast<int64_t>(off / 2) / hidden;
      const int64_t r1 = static_cast<int64_t>((off + n - 1) / 2) / hidden + 1;
      rms_rows(xs, ws, os, nullptr, r0, r1, hidden, eps);
    }
    ++g_patched_calls;
    if (ATTACK_PAD > 0) {
      while (now_us() - start < ATTACK_PAD * g_copy_us) {
      }
    }
    return 0;
  }
  rms_rows(xs, ws, os, nullptr, 0, rows, hidden, eps);
  ++g_full_calls;
  return 0;
}

// For a look from outside (stderr ends up in a crashed record's tail, and in the child's log).
__attribute__((destructor)) static void report() {
  std::fprintf(stderr, "rms_norm_patches_precomputed: patched_slots=%d patched_calls=%llu "
                       "full_calls=%llu\n",
               g_patched, static_cast<unsigned long long>(g_patched_calls),
               static_cast<unsigned long long>(g_full_calls));
}
