// Measures this host's CPU ceilings for a `measured` hardware profile (docs/architecture.md §9,
// `atrex hardware measure`): copy bandwidth (bytes read + written, all cores, best of several
// passes over buffers far larger than the caches) and fp32 FMA throughput (all cores, widest
// vector ISA the CPU reports). CPUs have no tensor cores: every p_peak path gets the fp32 rate.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "atrex/problems/hardware.h"

namespace atrex::runner {

struct HostCeilings {
  double copy_bytes_per_s = 0;  // best of the passes
  double fp32_flops_per_s = 0;  // best of the passes
  // (best - worst) / best over the passes: the measurement's own spread.
  double copy_spread = 0;
  double fp32_spread = 0;
  int threads = 0;
  std::string isa;  // "avx512f", "avx2+fma", "sse2"
  std::string cpu_name;
};

HostCeilings measure_host_ceilings();

// A hardware profile named `name` from measured ceilings; `device.match` holds the CPU model.
problems::HardwareProfile host_profile(const HostCeilings& c, const std::string& name = "host-cpu");

// The measured host profile, measured once per machine and kept in
// <cache dir>/hardware/host-cpu.yaml so scores are comparable from run to run. A cached
// profile of another CPU model, or `refresh`, measures again and rewrites the file.
Result<problems::HardwareProfile> cached_host_profile(bool refresh = false);

// Writes `p` as the cached host profile (what cached_host_profile() and `hardware: auto` read)
// and returns it as read back.
Result<problems::HardwareProfile> write_cached_host_profile(const problems::HardwareProfile& p);

// This host's load: the 1-minute load average divided by the hardware threads ($ATREX_LOADAVG,
// a number, replaces /proc/loadavg's figure: for tests). nullopt where none can be read.
std::optional<double> host_load_per_thread();

// Where cached_host_profile() keeps the profile: <cache dir>/hardware/host-cpu.yaml.
std::filesystem::path host_profile_cache_file();
// This host's CPU model as /proc/cpuinfo's `model name` gives it ("" where it has none).
std::string host_cpu_model();
// The profile the cache file holds, without measuring: nothing when there is no readable file.
// It may be another CPU model's (its `match` names the CPU it was measured on), which
// cached_host_profile() would measure again.
std::optional<problems::HardwareProfile> load_cached_host_profile();

}  // namespace atrex::runner
