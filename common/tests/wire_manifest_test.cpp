// atrex.manifest/1 and the cluster options it carries: round trips, strictness, partial
// options over a base (the build entries are tested with the scheduler that writes them:
// scheduler/tests/build_record_test.cpp).
#include <gtest/gtest.h>

#include "atrex/common/wire/cluster_options.h"
#include "atrex/common/wire/manifest.h"

namespace atrex {
namespace {

TEST(Wire, ManifestRoundTripsWithLifecycleAndWorkers) {
  Manifest m;
  m.sweep_id = "0123456789ab";
  m.name = "s";
  m.backend = Backend::kCuda;
  m.hardware.name = "H200-SXM";
  m.hardware.p_peak = {{"bf16_tc", 9.89e14}};
  m.agents = {AgentSpec{.name = "search"}};
  m.operators = {OperatorPlan{"rms_norm", {"0", "1"}, {"0"}}};
  m.status = SweepStatus::kRunning;
  m.redis_url = "redis://:pw@h:1/0";
  m.cluster = ClusterOptions{};
  m.cluster->launcher = Launcher::kSlurm;
  m.workers =
      WorkersRecord{Launcher::kSlurm, "", {}, {SlurmRole{.role = "runner", .job_ids = {"12"}}}};
  m.builds = {BuildRecord{.atrex_version = "0.1.0", .commit = "2618e7b4c1d2-dirty",
                          .candidate_compiler = "/usr/local/cuda/bin/nvcc",
                          .candidate_arch = "sm_90a",
                          .candidate_flags = {"-O3", "-I/x/include"}}};
  auto back = manifest_from_json(to_json(m), "manifest.json");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->backend, Backend::kCuda);
  EXPECT_EQ(back->operator_names(), std::vector<std::string>{"rms_norm"});
  ASSERT_TRUE(back->cluster && back->workers);
  EXPECT_EQ(back->cluster->launcher, Launcher::kSlurm);
  EXPECT_EQ(back->workers->roles.at(0).job_ids, std::vector<std::string>{"12"});
  EXPECT_FALSE(back->started_at);
  ASSERT_EQ(back->builds.size(), 1u);
  EXPECT_TRUE(back->builds[0].same_build(m.builds[0]));
  EXPECT_EQ(describe(back->builds[0]).find("-I/x/include"), std::string::npos)
      << "the include folder is a path, not a choice: left out of the line people read";
  Json j = to_json(m);
  j["cluster"].erase("prefetch");  // a manifest's cluster options are complete
  auto bad = manifest_from_json(j, "manifest.json");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("\"cluster.prefetch\" is missing"), std::string::npos);
}

TEST(Wire, PartialClusterOptionsKeepTheBaseAndAreRangeChecked) {
  ClusterOptions base;
  base.runners = 4;
  Json j = Json{{"prefetch", 0}, {"launcher", "slurm"}};
  auto o = cluster_options_from_json(JsonField(j, "sweep.yaml", "cluster"), base);
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->runners, 4);
  EXPECT_EQ(o->prefetch, 0);
  EXPECT_EQ(o->launcher, Launcher::kSlurm);
  Json bad = Json{{"prefetch", 99}};
  auto b = cluster_options_from_json(JsonField(bad, "sweep.yaml", "cluster"), base);
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message.find("cluster.prefetch"), std::string::npos) << b.error().message;
}

// `atrex sweep submit --no-sandbox` travels to every runner in the manifest's cluster.sandbox; a
// manifest written before the member existed ran sandboxed and reads so; a bad value names itself.
TEST(Wire, ClusterSandboxRoundTripsAndIsBwrapInAnOlderManifest) {
  Manifest m;
  m.sweep_id = "0123456789ab";
  m.name = "s";
  m.cluster = ClusterOptions{};
  m.cluster->sandbox = SandboxMode::kNone;
  Json j = to_json(m);
  EXPECT_EQ(j["cluster"]["sandbox"], "none");
  auto back = manifest_from_json(j, "manifest.json");
  ASSERT_TRUE(back && back->cluster) << (back ? "" : back.error().message);
  EXPECT_EQ(back->cluster->sandbox, SandboxMode::kNone);
  j["cluster"].erase("sandbox");
  auto older = manifest_from_json(j, "manifest.json");
  ASSERT_TRUE(older && older->cluster) << (older ? "" : older.error().message);
  EXPECT_EQ(older->cluster->sandbox, SandboxMode::kBwrap);
  j["cluster"]["sandbox"] = "off";
  auto bad = manifest_from_json(j, "manifest.json");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("cluster.sandbox"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("off"), std::string::npos) << bad.error().message;
}

}  // namespace
}  // namespace atrex
