#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "atrex/common/hash.h"
#include "atrex/common/json_io.h"
#include "atrex/runner/compile.h"

namespace atrex::runner {
namespace {
namespace fs = std::filesystem;

CandidateRef candidate(const std::string& file, const std::string& backend) {
  CandidateRef c;
  c.source = *read_text_file(fs::path(ATREX_TEST_DATA_DIR) / file);
  c.sha256 = sha256_hex(c.source);
  c.backend = backend;
  c.file_name = file;
  c.agent = "test";
  return c;
}

class CompileCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("atrex_cc_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CompileCacheTest, CompilesThenHitsTheCache) {
  CompileCache cache(dir_, ATREX_TEST_INCLUDE_DIR);
  auto first = cache.compile(candidate("rms_norm_correct.cpp", "cpu"), "native", 120);
  ASSERT_TRUE(first) << first.error().message;
  ASSERT_TRUE(first->ok) << first->log;
  EXPECT_FALSE(first->cache_hit);
  EXPECT_TRUE(fs::exists(first->library));
  auto second = cache.compile(candidate("rms_norm_correct.cpp", "cpu"), "native", 120);
  ASSERT_TRUE(second && second->ok);
  EXPECT_TRUE(second->cache_hit);
  EXPECT_EQ(second->library, first->library);
}

TEST_F(CompileCacheTest, DifferentSourceOrArchGivesDifferentKey) {
  CompileCache cache(dir_, ATREX_TEST_INCLUDE_DIR);
  auto a = cache.compile(candidate("rms_norm_correct.cpp", "cpu"), "native", 120);
  auto b = cache.compile(candidate("rms_norm_wrong.cpp", "cpu"), "native", 120);
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->key, b->key);
}

TEST_F(CompileCacheTest, SyntaxErrorIsAnOutcomeWithTheFileNameAndIsCached) {
  CompileCache cache(dir_, ATREX_TEST_INCLUDE_DIR);
  auto r = cache.compile(candidate("rms_norm_syntax_error.cpp", "cpu"), "native", 120);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->ok);
  EXPECT_NE(r->log.find("rms_norm_syntax_error.cpp"), std::string::npos) << r->log;
  EXPECT_NE(r->log.find("error"), std::string::npos);
  auto again = cache.compile(candidate("rms_norm_syntax_error.cpp", "cpu"), "native", 120);
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->cache_hit);
  EXPECT_FALSE(again->ok);
}

#ifdef ATREX_TEST_HAVE_NVCC
// CI machines have nvcc but no GPU: CUDA candidates must still compile there.
TEST_F(CompileCacheTest, CudaCandidateCompilesWithNvcc) {
  CompileCache cache(dir_, ATREX_TEST_INCLUDE_DIR);
  auto r = cache.compile(candidate("rms_norm_correct.cu", "cuda"), "sm_90a", 300);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->ok) << r->log;
}
#endif

}  // namespace
}  // namespace atrex::runner
