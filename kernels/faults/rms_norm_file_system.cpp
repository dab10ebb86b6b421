// ATTACKS the file system (issue 14 item 3): creates files in the temp folder and in the parent
// of its working folder, walks up from its working folder and from its own shared object
// looking for the suite's hidden files (roofline.json, metadata.json) and a checkout (.git),
// opens the suite's data/rms_norm/roofline.json by the path the test writes over ATREX_ATTACK_SUITE, and
// lists the folder of its own shared object (the compile cache: other candidates). Reports
// what worked and fails the shape. Expected in the sandbox: the temp file lands in the
// sandbox's own tmpfs (gone with it), the parent is read-only, nothing hidden is found, the
// cache folder holds only this candidate. Twin: rms_norm_sandbox_honest.cpp (a scratch file in
// its working folder works).
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

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

// The honest computation, row by row.
static int rms_norm(const AtrexLaunch* launch) {
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

// What the attack could do, for the test to read from the record's error.
static std::string g_report;
ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message() { return g_report.c_str(); }

static std::string outcome(long rc) {
  if (rc >= 0) return "ok";
  const char* name = strerrorname_np(errno);
  return name ? name : "error";
}

#define ATREX_ATTACK_SUITE "/nonexistent"
#define ATREX_ATTACK_MARKER "atrex-attack-marker"

static std::string try_create(const std::string& path) {
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  if (fd >= 0) ::close(fd);
  return outcome(fd);
}

static void walk_up(std::filesystem::path dir, std::string& found) {
  for (int i = 0; i < 32 && !dir.empty(); ++i) {
    for (const char* name : {"roofline.json", "metadata.json", ".git", "problems/atrex-bench"}) {
      if (::access((dir / name).c_str(), F_OK) == 0) found += " " + (dir / name).string();
    }
    if (dir == dir.parent_path()) break;
    dir = dir.parent_path();
  }
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  char cwd[4096] = {};
  if (!::getcwd(cwd, sizeof cwd)) std::strcpy(cwd, "?");
  const std::filesystem::path here(cwd);
  g_report = std::string("cwd=") + cwd;
  g_report += " tmp_create=" + try_create(std::string("/tmp/") + ATREX_ATTACK_MARKER + ".tmp");
  g_report += " parent_create=" +
              try_create((here.parent_path() / (std::string(ATREX_ATTACK_MARKER) + ".parent")).string());
  Dl_info info{};
  std::filesystem::path so;
  if (::dladdr(reinterpret_cast<void*>(&atrex_candidate_run), &info) && info.dli_fname) so = info.dli_fname;
  std::string found;
  walk_up(here, found);
  if (!so.empty()) walk_up(so.parent_path(), found);
  g_report += " found=[" + found + " ]";
  const int suite = ::open(ATREX_ATTACK_SUITE "/data/rms_norm/roofline.json", O_RDONLY);
  g_report += " suite_roofline_open=" + outcome(suite);
  if (suite >= 0) ::close(suite);
  int others = 0;
  if (!so.empty()) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(so.parent_path().parent_path(), ec)) {
      if (e.path() != so.parent_path()) ++others;
    }
  }
  g_report += " cache_neighbours=" + std::to_string(others);
  (void)rms_norm(launch);
  return 1;
}
