// Twin of rms_norm_relay_rewrites_verdict.cpp with ATTACK_SKIP_WORK=0: honest results, forged timing only.
// ATTACK (result channel, no nonce scan needed; from the attack round of 2026-12-01, branch
// attack-round, attacks/): man-in-the-middle on fd 4. On its first call the
// candidate moves the runner's response pipe to a private fd, puts a pipe of its own at fd 4 and
// starts a thread that reads the child's own, nonce-carrying verdict lines, rewrites them and
// forwards them to the runner's pipe. A destructor (run at the child's exit) closes fd 4 and joins
// the thread so the last line is forwarded before the process ends.
//   ATTACK_SKIP_WORK=1: the candidate writes nothing (outputs stay poisoned NaN: wrong_result);
//                       the relay turns the verdict into ok with zero error.
//   ATTACK_SKIP_WORK=0: honest outputs, forged timing only (rms_norm_relay_forges_timing.cpp).
//   ATTACK_ROOFLINE_FACTOR: the forged median, as a multiple of the shape's roofline (below).
//   ATTACK_KEEP_COUNT=1: the forged timing keeps the child's sample count (only the values are
//                        forged), so that only the judge's clock can refute it.
// Before the judge (docs/evaluation.md "The judge") the runner took the rewritten lines: a slow
// kernel scored S_i 0.95, a kernel that computes nothing passed. With it, the child's "ok" meets
// the judge's wrong_result (tampering), and forged timing meets the judge's brackets.
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <string>
#include <map>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "atrex/candidate.h"

#ifndef ATTACK_SKIP_WORK
#define ATTACK_SKIP_WORK 0
#endif
// The forged median: ATTACK_ROOFLINE_FACTOR x the shape's DRAM roofline on the target profile
// (rms_norm moves 2*rows*hidden + hidden bf16 values; H20: 4.0 TB/s), computed by the candidate
// from the launch: close to S_j = 1, inside the impossible-speed margin.
#ifndef ATTACK_ROOFLINE_FACTOR
#define ATTACK_ROOFLINE_FACTOR 1.05
#endif
#ifndef ATTACK_KEEP_COUNT
#define ATTACK_KEEP_COUNT 0
#endif
#ifndef ATTACK_BYTES_PER_S
#define ATTACK_BYTES_PER_S 4.0e12
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
    for (int64_t h = 0; h < hidden; ++h)
      os[r * hidden + h] =
          float_to_bf16(bf16_to_float(xs[r * hidden + h]) * inv * bf16_to_float(ws[h]));
  }
  return 0;
}

static std::string g_report;
ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message() { return g_report.c_str(); }

static int g_real = -1;     // the runner's response pipe, moved here
static int g_read = -1;     // our pipe's read end
static std::thread* g_relay = nullptr;

static std::mutex g_mu;
static std::map<std::string, double> g_fake_us;  // shape id -> forged median

static void note_shape(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  if (!x || x->ndim != 2 || !launch->shape_id) return;
  const double bytes = 2.0 * (2.0 * x->shape[0] * x->shape[1] + x->shape[1]);
  std::lock_guard<std::mutex> l(g_mu);
  g_fake_us[launch->shape_id] = ATTACK_ROOFLINE_FACTOR * bytes / ATTACK_BYTES_PER_S * 1e6;
}

static std::string rewrite(const std::string& line) {
  using nlohmann::json;
  json j;
  try {
    j = json::parse(line);
  } catch (...) {
    return line;
  }
  const std::string was = j.value("status", "?");
  j["status"] = "ok";
  j["error"] = "";
  j["max_abs_error"] = 0.0;
  j["max_rel_error"] = 0.0;
  if (j["seeds_passed"].is_number() && j["seeds_passed"].get<int>() < 1) j["seeds_passed"] = 1;
  double m = 1.0;
  {
    std::lock_guard<std::mutex> l(g_mu);
    auto it = g_fake_us.find(j.value("shape_id", ""));
    if (it != g_fake_us.end()) m = it->second;
  }
  json t = j["timing"].is_object() ? j["timing"] : json::object();
  int count = 50;
  if (ATTACK_KEEP_COUNT && t.contains("n") && t["n"].is_number_integer()) count = t["n"].get<int>();
  json samples = json::array();
  for (int i = 0; i < count; ++i) samples.push_back(m * (0.99 + 0.0004 * i));
  t["time_us_median"] = m;
  t["time_us_p25"] = m * 0.995;
  t["time_us_p75"] = m * 1.005;
  t["time_us_iqr"] = m * 0.01;
  t["time_us_min"] = m * 0.99;
  t["time_us_mean"] = m;
  t["n"] = count;
  t["samples_us"] = samples;
  if (!t.contains("method")) t["method"] = "steady_clock_llc_flush";
  t["relative_standard_error"] = 0.001;
  if (!t.contains("graph_fallback")) t["graph_fallback"] = "";
  if (!t.contains("event_time_us_median")) t["event_time_us_median"] = nullptr;
  if (!t.contains("cupti_fallback")) t["cupti_fallback"] = "";
  if (!t.contains("cupti_unavailable")) t["cupti_unavailable"] = "";
  if (!t.contains("kernels")) t["kernels"] = json::array();
  if (!t.contains("cupti_records")) t["cupti_records"] = json::object();
  j["timing"] = t;
  (void)was;
  return j.dump() + "\n";
}

static void relay() {
  std::string buf;
  char chunk[65536];
  for (;;) {
    const ssize_t n = ::read(g_read, chunk, sizeof chunk);
    if (n <= 0) break;
    buf.append(chunk, static_cast<size_t>(n));
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      const std::string out = rewrite(buf.substr(0, nl + 1));
      buf.erase(0, nl + 1);
      size_t done = 0;
      while (done < out.size()) {
        const ssize_t w = ::write(g_real, out.data() + done, out.size() - done);
        if (w <= 0) return;
        done += static_cast<size_t>(w);
      }
    }
  }
}

static bool install() {
  g_real = ::fcntl(4, F_DUPFD_CLOEXEC, 100);
  if (g_real < 0) return false;
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return false;
  if (::dup2(p[1], 4) < 0) return false;
  ::close(p[1]);
  g_read = p[0];
  g_relay = new std::thread(relay);
  return true;
}

__attribute__((destructor)) static void drain() {
  if (!g_relay) return;
  ::close(4);  // EOF for the relay once the child's last line is read
  g_relay->join();
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  static bool installed = false;
  if (!installed) {
    installed = true;
    if (!install()) g_report = "relay install failed";
  }
  note_shape(launch);
  if (ATTACK_SKIP_WORK) return 0;
  return rms_norm(launch);
}
