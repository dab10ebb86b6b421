#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "atrex/runner/host_measure.h"

namespace atrex::runner {
namespace {
namespace fs = std::filesystem;

// Scores on the cpu backend are only comparable from run to run if the measured ceilings are
// measured once and reused.
TEST(HostProfile, MeasuredOnceThenReusedFromTheCache) {
  const fs::path dir =
      fs::temp_directory_path() / ("atrex_host_cache_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  ::setenv("ATREX_CACHE_DIR", dir.c_str(), 1);
  auto first = cached_host_profile();
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_GT(first->hbm_bytes_per_s, 1e8);
  EXPECT_GT(first->p_peak_flops_per_s.at("fp32_strict"), 1e8);
  EXPECT_TRUE(fs::exists(dir / "hardware" / "host-cpu.yaml"));
  auto second = cached_host_profile();
  ASSERT_TRUE(second);
  EXPECT_DOUBLE_EQ(second->hbm_bytes_per_s, first->hbm_bytes_per_s);
  EXPECT_DOUBLE_EQ(second->p_peak_flops_per_s.at("bf16_tc"),
                   first->p_peak_flops_per_s.at("bf16_tc"));
  EXPECT_EQ(second->match, first->match);
  ::unsetenv("ATREX_CACHE_DIR");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace atrex::runner
