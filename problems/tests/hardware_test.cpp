#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "atrex/problems/hardware.h"

namespace atrex::problems {
namespace {
namespace fs = std::filesystem;

Result<std::vector<HardwareProfile>> defaults() {
  return load_hardware_profiles({fs::path(ATREX_TEST_SUITE_DIR) / "configs" / "hardware", ATREX_TEST_HARDWARE_DIR});
}

TEST(Hardware, ReleasedAndOwnProfilesLoad) {
  auto profiles = defaults();
  ASSERT_TRUE(profiles) << profiles.error().message;
  for (const char* name : {"H20", "XPU-A", "H200-SXM", "H100-SXM", "measured-H200"}) {
    EXPECT_TRUE(find_hardware_profile(*profiles, name)) << name;
  }
  auto h20 = find_hardware_profile(*profiles, "h20");
  ASSERT_TRUE(h20);
  EXPECT_DOUBLE_EQ(h20->p_peak_flops_per_s.at("bf16_tc"), 148e12);
  EXPECT_DOUBLE_EQ(h20->hbm_bytes_per_s, 4e12);
  auto measured = find_hardware_profile(*profiles, "measured-H200");
  EXPECT_DOUBLE_EQ(measured->hbm_bytes_per_s, 4.16e12);
  EXPECT_DOUBLE_EQ(measured->p_peak_flops_per_s.at("fp8_e4m3_tc"), 1264e12);
}

TEST(Hardware, AutoMatchPicksMeasuredH200ForAnH200) {
  auto profiles = defaults();
  ASSERT_TRUE(profiles);
  auto m = match_hardware_profile(*profiles, "NVIDIA H200");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->name, "measured-H200");
  EXPECT_EQ(match_hardware_profile(*profiles, "NVIDIA H100 80GB HBM3")->name, "H100-SXM");
  EXPECT_FALSE(match_hardware_profile(*profiles, "Intel Xeon"));
}

TEST(Hardware, UnknownProfileListsKnownOnes) {
  auto profiles = defaults();
  auto p = find_hardware_profile(*profiles, "B9000");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code, ErrorCode::kNotFound);
  EXPECT_NE(p.error().message.find("H20"), std::string::npos);
}

TEST(Hardware, BadPeakNamesFileFieldAndValue) {
  auto dir = fs::temp_directory_path() / ("atrex_hw_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "bad.yaml") << "hardware: {name: bad}\np_peak: {bf16_tc: -3}\nb_peak: {hbm: 1}\n";
  auto p = load_hardware_profile(dir / "bad.yaml");
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().message.find("bad.yaml: field \"p_peak.bf16_tc\": expected a positive FLOP/s value; got -3"),
            std::string::npos)
      << p.error().message;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace atrex::problems
