#include "atrex/runner/host_measure.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <spdlog/spdlog.h>

#include "atrex/common/clock.h"
#include "atrex/common/json_io.h"
#include "atrex/runner/compile.h"

namespace atrex::runner {
namespace {

using Clock = std::chrono::steady_clock;

// Eight independent vector accumulators hide the FMA latency; each step is one FMA per lane.
template <class V>
[[gnu::always_inline]] inline float fma_loop(int64_t iters, float seed) {
  V acc[8];
  for (int k = 0; k < 8; ++k) acc[k] = V{} + (seed + 0.001f * static_cast<float>(k));
  const V a = V{} + 0.9999f, b = V{} + 1e-5f;
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) acc[k] = acc[k] * a + b;
  }
  float s = 0;
  for (int k = 0; k < 8; ++k)
    for (size_t l = 0; l < sizeof(V) / sizeof(float); ++l) s += acc[k][l];
  return s;
}

typedef float v16f __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));

__attribute__((target("avx512f"))) float fma_avx512(int64_t iters, float seed) {
  return fma_loop<v16f>(iters, seed);
}
__attribute__((target("avx2,fma"))) float fma_avx2(int64_t iters, float seed) {
  return fma_loop<v8f>(iters, seed);
}
float fma_sse(int64_t iters, float seed) { return fma_loop<v4f>(iters, seed); }

double measure_fma(int threads, std::string& isa, double& spread) {
  float (*fn)(int64_t, float) = fma_sse;
  int width = 4;
  isa = "sse2";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    fn = fma_avx512;
    width = 16;
    isa = "avx512f";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    fn = fma_avx2;
    width = 8;
    isa = "avx2+fma";
  }
  const int64_t iters = 20'000'000;
  double best = 0, worst = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<std::thread> pool;
    std::vector<float> sink(static_cast<size_t>(threads));
    const auto t0 = Clock::now();
    for (int t = 0; t < threads; ++t)
      pool.emplace_back(
          [&, t] { sink[static_cast<size_t>(t)] = fn(iters, static_cast<float>(t)); });
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    const double rate = 2.0 * 8 * width * static_cast<double>(iters) * threads / s;
    best = std::max(best, rate);
    worst = rep == 0 ? rate : std::min(worst, rate);
  }
  spread = best > 0 ? (best - worst) / best : 0;
  return best;
}

double measure_copy(int threads, double& spread) {
  const size_t bytes = 256u << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  double best = 0, worst = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<std::thread> pool;
    const size_t chunk = bytes / static_cast<size_t>(threads);
    const auto t0 = Clock::now();
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back(
          [&, t] { std::memcpy(dst.data() + t * chunk, src.data() + t * chunk, chunk); });
    }
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    const double rate = 2.0 * static_cast<double>(bytes) / s;
    best = std::max(best, rate);
    // The first pass faults the destination's pages in: not a measurement of the copy.
    if (rep == 1) worst = rate;
    if (rep > 1) worst = std::min(worst, rate);
  }
  spread = best > 0 ? (best - worst) / best : 0;
  return best;
}

}  // namespace

HostCeilings measure_host_ceilings() {
  HostCeilings c;
  c.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  c.cpu_name = host_cpu_model();
  c.copy_bytes_per_s = measure_copy(c.threads, c.copy_spread);
  c.fp32_flops_per_s = measure_fma(c.threads, c.isa, c.fp32_spread);
  return c;
}

problems::HardwareProfile host_profile(const HostCeilings& c, const std::string& name) {
  problems::HardwareProfile p;
  p.name = name;
  p.arch = "x86-64";
  p.vendor = "host";
  for (const char* path : {"bf16_tc", "fp16_tc", "fp8_e4m3_tc", "fp32_tf32_tc", "fp32_strict"}) {
    p.p_peak_flops_per_s[path] = c.fp32_flops_per_s;
  }
  p.hbm_bytes_per_s = c.copy_bytes_per_s;
  p.source_doc = fmt::format(
      "measured by atrex on {} ({} threads, {}): copy {:.1f} GB/s, fp32 FMA {:.1f} GFLOP/s",
      c.cpu_name, c.threads, c.isa, c.copy_bytes_per_s / 1e9, c.fp32_flops_per_s / 1e9);
  p.retrieved_at = utc_timestamp_now();
  p.notes =
      "CPU: no tensor cores, every path gets the fp32 FMA rate; memory = DRAM copy bandwidth.";
  p.match = {c.cpu_name};
  return p;
}

std::string host_cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      return line.substr(std::min(line.size(), line.find(':') + 2));
    }
  }
  return "";
}

std::filesystem::path host_profile_cache_file() {
  return default_cache_dir() / "hardware" / "host-cpu.yaml";
}

std::optional<problems::HardwareProfile> load_cached_host_profile() {
  std::error_code ec;
  const auto file = host_profile_cache_file();
  if (!std::filesystem::exists(file, ec)) return std::nullopt;
  auto cached = problems::load_hardware_profile(file);
  if (!cached) {
    spdlog::warn("{} (measured again when needed)", cached.error().message);
    return std::nullopt;
  }
  return *cached;
}

Result<problems::HardwareProfile> cached_host_profile(bool refresh) {
  const std::filesystem::path file = host_profile_cache_file();
  if (!refresh) {
    auto cached = load_cached_host_profile();
    if (cached && !cached->match.empty() && cached->match.front() == host_cpu_model())
      return *cached;
  }
  spdlog::info("measuring this host's CPU ceilings for the roofline (kept in {})", file.string());
  return write_cached_host_profile(host_profile(measure_host_ceilings()));
}

Result<problems::HardwareProfile> write_cached_host_profile(const problems::HardwareProfile& p) {
  const std::filesystem::path file = host_profile_cache_file();
  ATREX_TRY(write_text_file_atomic(
      file, "# Measured by atrex on this host; `atrex hardware measure` refreshes it.\n" +
                problems::hardware_profile_yaml(p)));
  return problems::load_hardware_profile(file);  // exactly what later runs will read
}

std::optional<double> host_load_per_thread() {
  double load = 0;
  if (const char* env = std::getenv("ATREX_LOADAVG"); env && *env) {
    char* end = nullptr;
    load = std::strtod(env, &end);
    if (end == env) return std::nullopt;
  } else if (::getloadavg(&load, 1) != 1) {
    return std::nullopt;
  }
  return load / std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace atrex::runner
