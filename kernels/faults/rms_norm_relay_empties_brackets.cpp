// ATTACKS the judge's clock (the attack round of the second session): the judge brackets each
// timed call from its go to the child's done, and a bracket can only be longer than the call
// it holds -- if the child's process waits for the go before the call and says done after it.
// The candidate runs in that process: on its first call it puts a relay thread of its own
// between the harness and the judge (fds 6 and 7, as rms_norm_relay_forges_timing.cpp does
// with fd 4). The relay answers each call_begin with a go of its own at once, well formed and
// naming a splice it drew itself (judge_messages.h: the harness cannot tell it from the
// judge's), and holds the call_begin back; when the call_end comes it sends the judge both, back
// to back: every bracket the judge stamps holds one pipe round trip and no call. With the
// child's clock slowed ATTACK_SLOWDOWN times (rms_norm_slows_clock.cpp's GOT patch) the claim is
// 1/ATTACK_SLOWDOWN of the true time. Every other message (checks, timing_begin, prepare,
// shape_end) goes through unchanged, so the judge checks honest outputs. On rms_norm shape 3
// (an honest ~55 ms on the development VM) ATTACK_SLOWDOWN 10 claimed ~5.5 ms and passed while
// the judge's bound counted every bracket. Now (cpu): the call's inputs carry the splice the
// relay drew, not the judge's, so the judge's re-check of a timed call (or its check of the last
// timed call's outputs) names a splice its go never named: `rejected: tampering`; and only
// brackets so checked bound the claim.
//   ATTACK_SLOWDOWN 1: the honest twin: the relay forwards every message at once, in order
//   (call_begin before the call, the judge's own go back), and the clock is not bent.
//   ATTACK_DONE_FIRST 1: the answer to that defeat, where brackets hold the work (cpu: the go
//   names the splice, and the judge reads the call's outputs in the shared memfd's arena when
//   the done reaches it). The relay forwards each call_begin and hands the harness the judge's
//   real go, so the call runs on the inputs the judge named; but the moment the go has passed it
//   sends the judge a call_end of its own (the outputs of this call do not exist yet), and holds
//   the judge's answer; the harness's real call_end is swallowed and answered with it.
//   Expected: the judge's check of the last timed call (and any re-check it chose) finds
//   outputs other than those it read at the done: `wrong_result`.
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
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
#include <thread>

#include "atrex/candidate.h"

#ifndef ATTACK_SLOWDOWN
#define ATTACK_SLOWDOWN 10
#endif
#ifndef ATTACK_DONE_FIRST
#define ATTACK_DONE_FIRST 0
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

// --- the relay between the harness (fds 6 out, 7 in) and the judge --------------------------
static int g_judge_out = -1, g_judge_in = -1;  // the real pipes, moved away from 6 and 7
static int g_from_harness = -1, g_to_harness = -1;

static bool read_line(int fd, std::string& pending, std::string& line) {
  for (;;) {
    const auto nl = pending.find('\n');
    if (nl != std::string::npos) {
      line = pending.substr(0, nl + 1);
      pending.erase(0, nl + 1);
      return true;
    }
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return false;
    pending.append(buf, static_cast<size_t>(n));
  }
}

static void write_all(int fd, const std::string& s) {
  for (size_t done = 0; done < s.size();) {
    const ssize_t n = write(fd, s.data() + done, s.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

static void relay() {
  std::string from_harness, from_judge, line, reply, held_begin, held_answer;
  uint64_t own_splice = 0x1234567;
  while (read_line(g_from_harness, from_harness, line)) {
    const bool begin = line.find("\"op\":\"call_begin\"") != std::string::npos;
    const bool end = line.find("\"op\":\"call_end\"") != std::string::npos;
    if (ATTACK_DONE_FIRST && ATTACK_SLOWDOWN > 1 && begin) {
      // The judge's own go, at once; then a done of our own before the call has even started.
      write_all(g_judge_out, line);
      if (!read_line(g_judge_in, from_judge, reply)) return;
      write_all(g_judge_out, "{\"op\":\"call_end\",\"calls\":1}\n");
      if (!read_line(g_judge_in, from_judge, held_answer)) return;
      write_all(g_to_harness, reply);
      continue;
    }
    if (ATTACK_DONE_FIRST && ATTACK_SLOWDOWN > 1 && end) {  // the real done: the judge had one
      write_all(g_to_harness, held_answer);
      continue;
    }
    if (ATTACK_SLOWDOWN > 1 && begin) {
      // A go of our own now; the judge hears of the call only once it is over.
      held_begin = line;
      own_splice = (own_splice * 6364136223846793005ull + 1442695040888963407ull) >> 25;
      write_all(g_to_harness, "{\"go\":true,\"splice\":" + std::to_string(own_splice) + "}\n");
      continue;
    }
    if (ATTACK_SLOWDOWN > 1 && end) {
      write_all(g_judge_out, held_begin);
      if (!read_line(g_judge_in, from_judge, reply)) return;
      write_all(g_judge_out, line);
      if (!read_line(g_judge_in, from_judge, reply)) return;
      write_all(g_to_harness, reply);
      continue;
    }
    write_all(g_judge_out, line);
    // The messages the judge answers: a check (pass, or a request for the inputs), the inputs
    // it asked for (pass), timing_begin, call_begin (go) and call_end (go and check).
    if (line.find("\"op\":\"check\"") != std::string::npos ||
        line.find("\"op\":\"inputs\"") != std::string::npos ||
        line.find("\"op\":\"timing_begin\"") != std::string::npos || begin || end) {
      if (!read_line(g_judge_in, from_judge, reply)) return;
      write_all(g_to_harness, reply);
    }
  }
}

static bool start_relay() {
  int to_relay[2], from_relay[2];
  if (pipe(to_relay) != 0 || pipe(from_relay) != 0) return false;
  g_judge_out = fcntl(6, F_DUPFD_CLOEXEC, 100);
  g_judge_in = fcntl(7, F_DUPFD_CLOEXEC, 100);
  if (g_judge_out < 0 || g_judge_in < 0) return false;
  if (dup2(to_relay[1], 6) < 0 || dup2(from_relay[0], 7) < 0) return false;
  close(to_relay[1]);
  close(from_relay[0]);
  g_from_harness = to_relay[0];
  g_to_harness = from_relay[1];
  std::thread(relay).detach();
  return true;
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  if (g_origin_ns < 0) {
    g_origin_ns = raw_ns(CLOCK_MONOTONIC);
    dl_iterate_phdr(patch_object, nullptr);
    if (g_patched == 0) {
      g_message = "no clock_gettime slot found to patch";
      return 9;
    }
    if (!start_relay()) {
      g_message = "could not put a relay between the harness and the judge";
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
