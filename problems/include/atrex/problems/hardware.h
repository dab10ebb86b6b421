// Hardware profiles: peak FLOP/s per execution path and memory bandwidth, in the schema of
// Atrex-Bench's configs/hardware/<sku>.yaml (SI units: FLOP/s, bytes/s):
//   hardware: {name, arch?, vendor?}
//   p_peak:   {bf16_tc, fp16_tc, fp8_e4m3_tc, fp32_tf32_tc, fp32_strict, ...}
//   b_peak:   {hbm}
//   source:   {vendor_doc, retrieved_at, notes}
// atrex adds optional `memory: {l2_bytes}` and `device: {sm_count, match}` where `match` lists
// substrings of the device name that select this profile for `hardware: auto`.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/wire/manifest.h"

namespace atrex::problems {

struct HardwareProfile {
  std::string name;  // e.g. "H20", "H200-SXM", "measured-H200"
  std::string arch;  // e.g. "sm_90", "gfx942"
  std::string vendor;
  std::map<std::string, double> p_peak_flops_per_s;  // path -> FLOP/s
  double hbm_bytes_per_s = 0;
  double l2_bytes = 0;             // 0 when unknown
  std::vector<std::string> match;  // device-name substrings for auto selection
  std::string source_doc;
  std::string retrieved_at;
  std::string notes;
  std::filesystem::path file;  // where it was loaded from (empty when measured)
};

// Parses one profile. Errors name the file and field (kInvalidInput).
Result<HardwareProfile> load_hardware_profile(const std::filesystem::path& file);

// Every *.yaml profile in `dirs`, in order; a later folder's profile with the same name
// replaces an earlier one.
Result<std::vector<HardwareProfile>> load_hardware_profiles(
    const std::vector<std::filesystem::path>& dirs);

// The released profiles (<suite>/configs/hardware) plus atrex's own (default_hardware_dir()),
// plus the folder named by $ATREX_HARDWARE_DIR when set (the user's measured profiles).
Result<std::vector<HardwareProfile>> load_default_hardware_profiles(
    const std::filesystem::path& suite_dir);

// The profile as YAML in the schema above (load_hardware_profile reads it back).
std::string hardware_profile_yaml(const HardwareProfile& p);

// Case-insensitive lookup; kNotFound lists the known names.
Result<HardwareProfile> find_hardware_profile(const std::vector<HardwareProfile>& profiles,
                                              std::string_view name);

// The first profile whose `match` substrings occur in `device_name` (case-insensitive).
std::optional<HardwareProfile> match_hardware_profile(const std::vector<HardwareProfile>& profiles,
                                                      std::string_view device_name);

// The profile as a sweep manifest keeps it (name, peaks, bandwidth, source), and back: workers
// compute T_roofline against the submitting machine's numbers, not their own measurement.
HardwareSummary hardware_summary(const HardwareProfile& p);
HardwareProfile hardware_from_summary(const HardwareSummary& s);

}  // namespace atrex::problems
