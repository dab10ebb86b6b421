// ATTACKS the judge's clock through the sample count of its brackets (attack round 3): every
// bracket's done says how many timed samples it holds ({"op":"call_end","calls":n,...}; n > 1 is
// meant for a graph replay's batch), the judge takes any n from 1 to 100000 on every backend
// (judge_messages.cpp), and the runner only checks that the child's sample count equals the sum
// of the brackets' n (shape_batch.cpp judge_record). The bound on one call is
// (bracket - latency - n x overhead) / n (timing_check.cpp): the candidate sets n itself.
// On its first call the candidate puts two relays of its own in the child:
//   - fd 6 (the harness's pipe to the judge): every call_end goes on with "calls":ATTACK_CALLS
//     instead of 1; every other message, in order, unchanged (the judge's go and its check
//     requests come back on fd 7, untouched: the splice, the judge's read at the done and the
//     re-checks all run honestly, and so does the candidate's computation).
//   - fd 4 (the child's result line to the runner): each timed sample divided by
//     ATTACK_SLOWDOWN (a bent clock, as rms_norm_slows_clock.cpp's, without touching the clock)
//     and repeated ATTACK_CALLS times, so that n equals the brackets' sum; median, quartiles,
//     mean and min recomputed from them. Nonce, status and everything else unchanged.
// With ATTACK_CALLS 1 and ATTACK_SLOWDOWN 100 this is rms_norm_relay_forges_timing.cpp's
// ATTACK_KEEP_COUNT 1: refuted by the judge's clock on a shape whose calls lie well past the cpu
// allowance (rms_norm shape 40, ~36 ms a call). With ATTACK_CALLS 1000 each checked bracket's
// bound was divided by 1000: a claim 100x under the true time is never refuted, on any shape, and
// S_j is 100x the honest one. The impossible-speed rule only bounds the claim from below at 0.8x
// the roofline.
// ATTACK_SPINNERS N > 0 (with ATTACK_CALLS 1): the latency allowance instead. The judge allows
// max(20 ms, twice the median of 15 ping round trips it measures when timing_begin comes) per
// bracket (judge.cpp wake_up_latency_us, timing_check.h); the relay releases N busy threads just
// before it hands the judge timing_begin and parks them at the first call_begin, so the judge
// measures a host the candidate has loaded. On the 2-core VM (kernel 6.18, EEVDF): once 152 ms
// measured (256 threads created on the spot while the lead's build also ran): the bound on shape
// 3 fell to 0 and the 100x bent samples passed; otherwise 16-18 ms (256 or 900 threads, all
// spinning before timing_begin goes on: the scheduler bounds a waking task's wait), under the
// 20 ms floor, and the bend is refuted. The candidate's own load alone does not widen it here;
// load it does not control (other work on the host) does, at a moment it can choose to add to.
//   ATTACK_CALLS 1, ATTACK_SLOWDOWN 1: the honest twin (both relays forward unchanged).
// ATTACK_PASSES k: every call computes its output k times over (an honest, slow kernel), so that
// a shape of modest size has calls past the cpu judge's 20 ms allowance: the spinners above slow
// every byte the judge moves while they run, so the shape's size, not its call, sets the test's
// time.
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "atrex/candidate.h"

#define ATTACK_CALLS 1000
#define ATTACK_SLOWDOWN 100
#define ATTACK_SPINNERS 0
#define ATTACK_PASSES 1

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

static bool read_line(int fd, std::string& pending, std::string& line) {
  for (;;) {
    const auto nl = pending.find('\n');
    if (nl != std::string::npos) {
      line = pending.substr(0, nl + 1);
      pending.erase(0, nl + 1);
      return true;
    }
    char buf[65536];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return false;
    pending.append(buf, static_cast<size_t>(n));
  }
}

static bool write_all(int fd, const std::string& s) {
  for (size_t done = 0; done < s.size();) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// ATTACK_SPINNERS: busy threads from the harness's timing_begin (the judge measures its wake-up
// latency when it gets it) to the first call_begin. They are started parked at the first call
// (64 KiB stacks) and released all at once; timing_begin goes on once they all spin.
// Never destroyed: at exit glibc's pthread_cond_destroy waits for the spinners parked on it,
// which never wake, and the child hung until the runner's shape limit killed it (120 s of every
// run of this attack).
static std::mutex& g_spin_mu = *new std::mutex;
static std::condition_variable& g_spin_cv = *new std::condition_variable;
static std::atomic<bool> g_spin{false};
static std::atomic<int> g_spinning{0}, g_spinners{0};
static void spinner() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(g_spin_mu);
      g_spin_cv.wait(lock, [] { return g_spin.load(); });
    }
    ++g_spinning;
    volatile uint64_t k = 0;
    while (g_spin.load(std::memory_order_relaxed)) k = k + 1;
    --g_spinning;
  }
}
static void start_spinners() {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 << 10);
  for (int i = 0; i < ATTACK_SPINNERS; ++i) {
    pthread_t t;
    if (pthread_create(&t, &attr, [](void*) -> void* { spinner(); return nullptr; }, nullptr) != 0)
      break;
    pthread_detach(t);
    ++g_spinners;
  }
  pthread_attr_destroy(&attr);
}
// Returns once every spinner spins (at most 5 s), so that the judge measures under the load.
static void spinners_on() {
  {
    std::lock_guard<std::mutex> lock(g_spin_mu);
    g_spin = true;
    g_spin_cv.notify_all();
  }
  for (int k = 0; k < 5000 && g_spinning.load() < g_spinners.load(); ++k) ::usleep(1000);
}
static void spinners_off() { g_spin = false; }

// fd 6: the done of each bracket claims ATTACK_CALLS samples.
static std::string to_judge(const std::string& line) {
  if (ATTACK_SPINNERS > 0 && line.find("\"op\":\"timing_begin\"") != std::string::npos)
    spinners_on();
  if (ATTACK_SPINNERS > 0 && g_spin && line.find("\"op\":\"call_begin\"") != std::string::npos)
    spinners_off();
  const std::string one = "\"calls\":1,";
  const auto at = line.find(one);
  if (line.find("\"op\":\"call_end\"") == std::string::npos || at == std::string::npos) return line;
  std::string out = line;
  out.replace(at, one.size(), "\"calls\":" + std::to_string(ATTACK_CALLS) + ",");
  return out;
}

static double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(sorted.size() - 1, lo + 1);
  return sorted[lo] + (pos - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

// fd 4: the timing summary of each result line, bent and repeated.
static std::string to_runner(const std::string& line) {
  if (ATTACK_CALLS == 1 && ATTACK_SLOWDOWN == 1) return line;
  using nlohmann::json;
  json j;
  try {
    j = json::parse(line);
  } catch (...) {
    return line;
  }
  if (!j.contains("timing") || !j["timing"].is_object()) return line;
  json& t = j["timing"];
  if (!t.contains("samples_us") || !t["samples_us"].is_array()) return line;
  std::vector<double> samples;
  for (const auto& s : t["samples_us"]) {
    for (int k = 0; k < ATTACK_CALLS; ++k) samples.push_back(s.get<double>() / ATTACK_SLOWDOWN);
  }
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  double sum = 0;
  for (double v : samples) sum += v;
  t["samples_us"] = samples;
  t["n"] = static_cast<int>(samples.size());
  t["time_us_median"] = quantile(sorted, 0.5);
  t["time_us_p25"] = quantile(sorted, 0.25);
  t["time_us_p75"] = quantile(sorted, 0.75);
  t["time_us_iqr"] = quantile(sorted, 0.75) - quantile(sorted, 0.25);
  t["time_us_min"] = sorted.empty() ? 0.0 : sorted.front();
  t["time_us_mean"] = samples.empty() ? 0.0 : sum / static_cast<double>(samples.size());
  return j.dump() + "\n";
}

struct Relay {
  int from = -1;  // our pipe's read end (the harness writes to the fd we took over)
  int to = -1;    // the real pipe, moved away
  std::string (*rewrite)(const std::string&) = nullptr;
  std::thread* thread = nullptr;
};
static Relay g_judge, g_runner;

static void run_relay(Relay* r) {
  std::string pending, line;
  while (read_line(r->from, pending, line)) {
    if (!write_all(r->to, r->rewrite(line))) return;
  }
  if (!pending.empty()) write_all(r->to, pending);
}

static bool take_over(int fd, Relay& r, std::string (*rewrite)(const std::string&)) {
  r.to = ::fcntl(fd, F_DUPFD_CLOEXEC, 100);
  if (r.to < 0) return false;
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return false;
  if (::dup2(p[1], fd) < 0) return false;
  ::close(p[1]);
  r.from = p[0];
  r.rewrite = rewrite;
  r.thread = new std::thread(run_relay, &r);
  return true;
}

// At the child's exit: EOF for both relays once the harness's last lines are through.
__attribute__((destructor)) static void drain() {
  if (g_judge.thread) {
    ::close(6);
    g_judge.thread->join();
  }
  if (g_runner.thread) {
    ::close(4);
    g_runner.thread->join();
  }
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  static bool installed = false;
  if (!installed) {
    installed = true;
    if (ATTACK_SPINNERS > 0) start_spinners();
    if (!take_over(6, g_judge, to_judge) || !take_over(4, g_runner, to_runner)) {
      g_message = "could not put the relays in place";
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
  for (int pass = 0; pass < ATTACK_PASSES; ++pass) {
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
  }
  return 0;
}
