// The builds a results folder records (wire/manifest.h BuildRecord): the atrex build and the
// candidate compiler are written when a sweep's folder is opened, kept when the same build opens
// it again, and appended when another build resumes it; the entries are read strictly.
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <gtest/gtest.h>

#include "atrex/common/build_info.h"
#include "atrex/common/json_io.h"
#include "atrex/scheduler/build_record.h"
#include "atrex/scheduler/reconcile.h"

namespace atrex::scheduler {
namespace {
namespace fs = std::filesystem;

class BuildRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("atrex_builds_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    m_.sweep_id = "0123456789ab";
    m_.name = "builds";
    m_.backend = Backend::kCpu;
    m_.output = dir_.string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  Manifest m_;
};

TEST_F(BuildRecordTest, OpeningAResultsFolderRecordsThisBuildAndTheCandidateCompiler) {
  auto opened = open_results_dir(m_, nullptr);
  ASSERT_TRUE(opened) << opened.error().message;
  auto on_disk = read_manifest_file(dir_);
  ASSERT_TRUE(on_disk) << on_disk.error().message;
  ASSERT_EQ(on_disk->builds.size(), 1u);
  const BuildRecord& b = on_disk->builds[0];
  EXPECT_EQ(b.atrex_version, build_info().version);
  EXPECT_EQ(b.commit, build_info().commit);
  EXPECT_FALSE(b.commit.empty());
  EXPECT_NE(b.cxx_compiler.find(" ("), std::string::npos) << b.cxx_compiler;
  EXPECT_FALSE(b.recorded_at.empty());
  EXPECT_FALSE(b.host.empty());
  // The cpu backend's candidates: the system C++ compiler, -O3 -march=native.
  EXPECT_FALSE(b.candidate_compiler.empty());
  EXPECT_EQ(b.candidate_arch, "native");
  EXPECT_NE(std::find(b.candidate_flags.begin(), b.candidate_flags.end(), "-march=native"),
            b.candidate_flags.end());
  EXPECT_EQ(b.candidate_compiler_version.find('\n'), std::string::npos);
  EXPECT_FALSE(b.candidate_compiler_version.empty());
}

TEST_F(BuildRecordTest, TheSameBuildIsRecordedOnceAndAnotherBuildIsAppended) {
  ASSERT_TRUE(open_results_dir(m_, nullptr));
  ASSERT_TRUE(open_results_dir(m_, nullptr));  // resumed by the same build
  ASSERT_EQ(read_manifest_file(dir_)->builds.size(), 1u);
  // As if another atrex, with another compiler, had written the folder first.
  auto j = read_json_file(dir_ / "manifest.json");
  ASSERT_TRUE(j);
  (*j)["builds"][0]["commit"] = "000000000000";
  (*j)["builds"][0]["candidate_compiler_version"] = "c++ (Debian 11.3.0-1) 11.3.0";
  ASSERT_TRUE(write_text_file_atomic(dir_ / "manifest.json", j->dump(2)));
  ASSERT_TRUE(open_results_dir(m_, nullptr));
  auto m = read_manifest_file(dir_);
  ASSERT_TRUE(m) << m.error().message;
  ASSERT_EQ(m->builds.size(), 2u);
  EXPECT_EQ(m->builds[0].commit, "000000000000");
  EXPECT_EQ(m->builds[1].commit, build_info().commit);
  EXPECT_FALSE(m->builds[0].same_build(m->builds[1]));
}

TEST_F(BuildRecordTest, AManifestWrittenBeforeBuildsWereRecordedGetsItsFirstEntry) {
  ASSERT_TRUE(open_results_dir(m_, nullptr));
  auto j = read_json_file(dir_ / "manifest.json");
  ASSERT_TRUE(j);
  j->erase("builds");
  ASSERT_TRUE(write_text_file_atomic(dir_ / "manifest.json", j->dump(2)));
  ASSERT_TRUE(read_manifest_file(dir_)) << "an older manifest without builds reads";
  ASSERT_TRUE(open_results_dir(m_, nullptr));
  EXPECT_EQ(read_manifest_file(dir_)->builds.size(), 1u);
}

TEST_F(BuildRecordTest, ABuildEntryIsReadStrictly) {
  ASSERT_TRUE(open_results_dir(m_, nullptr));
  auto j = read_json_file(dir_ / "manifest.json");
  ASSERT_TRUE(j);
  Json unknown = *j;
  unknown["builds"][0]["compiler"] = "gcc";
  auto bad = manifest_from_json(unknown, "manifest.json");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("compiler"), std::string::npos) << bad.error().message;
  Json missing = *j;
  missing["builds"][0].erase("candidate_flags");
  bad = manifest_from_json(missing, "manifest.json");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("candidate_flags"), std::string::npos)
      << bad.error().message;
}

TEST(BuildInfo, VersionLineNamesTheVersionAndTheCommit) {
  const std::string line = build_info_line();
  EXPECT_EQ(line.rfind("atrex " + build_info().version + " (" + build_info().commit, 0), 0u)
      << line;
}

}  // namespace
}  // namespace atrex::scheduler
