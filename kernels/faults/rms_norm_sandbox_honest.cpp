// The HONEST TWIN of the sandbox attacks (rms_norm_forges_records, _network, _file_system,
// _fork_bomb, _memory_hog, _huge_file, _reads_parent): does, next to each attack, what a
// legitimate candidate may do in the sandbox, and fails the shape naming the first that did not
// work: threads (std::thread), an AF_UNIX socketpair, a small scratch file in its working folder
// and in $TMPDIR, a 256 MiB heap buffer, its own /proc/self/status, a line on stdout. Expected:
// `ok` on every shape, sandboxed or not.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <thread>
#include <vector>
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

static bool file_round_trip(const std::string& path) {
  { std::ofstream(path) << "scratch"; }
  std::ifstream in(path);
  std::string s;
  in >> s;
  std::remove(path.c_str());
  return s == "scratch";
}

static const char* neighbours() {
  int sum = 0;
  std::thread t([&] { sum = 42; });
  t.join();
  if (sum != 42) return "thread";
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return "socketpair";
  char c = 'x', back = 0;
  const bool sent = ::write(sv[0], &c, 1) == 1 && ::read(sv[1], &back, 1) == 1 && back == 'x';
  ::close(sv[0]);
  ::close(sv[1]);
  if (!sent) return "socketpair io";
  if (!file_round_trip("scratch.txt")) return "scratch file in the working folder";
  const char* tmp = std::getenv("TMPDIR");
  if (!file_round_trip(std::string(tmp ? tmp : "/tmp") + "/scratch-tmp.txt")) return "TMPDIR file";
  std::vector<char> buffer(256u << 20, 1);
  if (buffer[12345] != 1) return "heap buffer";
  std::ifstream status("/proc/self/status");
  std::string first;
  if (!(status >> first) || first != "Name:") return "/proc/self/status";
  std::printf("honest candidate: a line on stdout\n");
  std::fflush(stdout);
  return nullptr;
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  static bool checked = false;
  if (!checked) {
    checked = true;
    if (const char* failed = neighbours()) {
      g_report = std::string("an honest neighbour failed: ") + failed;
      return 1;
    }
  }
  return rms_norm(launch);
}
