#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "atrex/common/hash.h"
#include "atrex/common/json_io.h"
#include "atrex/common/process/sandbox.h"
#include "atrex/runner/compile.h"
#include "sandbox/compile_sandbox.h"

namespace atrex::runner {
namespace {
namespace fs = std::filesystem;

CandidateRef candidate(const std::string& file, const std::string& backend_spelling) {
  const Backend backend = *parse_backend(backend_spelling);
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
    dir_ = fs::temp_directory_path() /
           ("atrex_cc_" + std::to_string(::getpid()) + "_" +
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

// -march=native builds for the CPU at hand: runners on two CPU models sharing one cache folder
// must not reuse each other's objects (one may hold instructions the other lacks).
TEST_F(CompileCacheTest, CpuObjectOfAnotherCpuModelIsNotReused) {
  CompileCache here(dir_, ATREX_TEST_INCLUDE_DIR, "march=cooperlake; cpu=Xeon A; cpu-flags=1111");
  CompileCache there(dir_, ATREX_TEST_INCLUDE_DIR, "march=znver4; cpu=EPYC B; cpu-flags=2222");
  auto a = here.compile(candidate("rms_norm_correct.cpp", "cpu"), "native", 120);
  ASSERT_TRUE(a && a->ok) << (a ? a->log : a.error().message);
  auto b = there.compile(candidate("rms_norm_correct.cpp", "cpu"), "native", 120);
  ASSERT_TRUE(b && b->ok);
  EXPECT_NE(a->key, b->key);
  EXPECT_FALSE(b->cache_hit) << "an object built for another CPU was reused";
  auto again =
      CompileCache(dir_, ATREX_TEST_INCLUDE_DIR, "march=cooperlake; cpu=Xeon A; cpu-flags=1111")
          .compile(candidate("rms_norm_correct.cpp", "cpu"), "native", 120);
  ASSERT_TRUE(again && again->ok);
  EXPECT_TRUE(again->cache_hit) << "the same CPU target shares the cache";
  EXPECT_EQ(again->key, a->key);
}

// The default key material names this host's CPU: the model and feature flags of /proc/cpuinfo
// and the -march the compiler resolves `native` to.
// A compiler driver whose own program was killed by a signal (the OOM killer; the driver
// exits 1) gave no verdict on the source: nothing is cached, and the next compile tries again
// (the compile-sandbox attack of 2026-12-06 left an honest source a permanent .fail).
TEST_F(CompileCacheTest, ACompilerProgramKilledByASignalIsNotCachedAsAFailure) {
  const fs::path bin = dir_ / "toolchain" / "bin";
  fs::create_directories(bin);
  {
    std::ofstream script(bin / "c++");
    script << "#!/bin/sh\n"
              "for a in \"$@\"; do case \"$a\" in *candidate.so)\n"
              "  echo 'c++: fatal error: Killed signal terminated program cc1plus' >&2\n"
              "  echo 'compilation terminated.' >&2; exit 1;; esac; done\n"
              "exec /usr/bin/c++ \"$@\"\n";
  }
  fs::permissions(bin / "c++", fs::perms::owner_all);
  const char* before = std::getenv("CXX");
  const std::string saved = before ? before : "";
  ::setenv("CXX", (bin / "c++").c_str(), 1);
  auto restore = [&] { before ? ::setenv("CXX", saved.c_str(), 1) : ::unsetenv("CXX"); };
  CompileCache killed(dir_ / "cache", ATREX_TEST_INCLUDE_DIR);
  auto first = killed.compile(candidate("rms_norm_correct.cpp", "cpu"), "native", 120);
  auto again = killed.compile(candidate("rms_norm_correct.cpp", "cpu"), "native", 120);
  restore();
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_FALSE(first->ok);
  EXPECT_NE(first->log.find("Killed signal"), std::string::npos) << first->log;
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_FALSE(again->cache_hit) << "a killed compile was cached";
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "cache"))
    EXPECT_NE(e.path().extension(), ".fail") << e.path();
}

// The key covers whether the compiler ran in the compile sandbox: an object an unsandboxed
// compiler made (it may hold any file that compiler could read) never serves a sandboxed compile.
TEST_F(CompileCacheTest, SandboxedAndUnsandboxedCompilesAreCachedApart) {
  if (auto ready = probe_bwrap(bwrap_program()); !ready) GTEST_SKIP() << ready.error().message;
  CompileCache plain(dir_, ATREX_TEST_INCLUDE_DIR);
  auto a = plain.compile(candidate("rms_norm_correct.cpp", "cpu"), "native", 120);
  CompileCache jailed(dir_, ATREX_TEST_INCLUDE_DIR);
  jailed.sandbox_with(bwrap_program());
  auto b = jailed.compile(candidate("rms_norm_correct.cpp", "cpu"), "native", 120);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->ok && b->ok) << a->log << b->log;
  EXPECT_NE(a->key, b->key);
  EXPECT_FALSE(b->cache_hit);
}

// The syntax check of a Python candidate (the interpreter's compile() on untrusted source) runs
// in the compile sandbox too, under compile_limits(), and sandboxed and unsandboxed checks are
// cached apart: the error still names the file and the line from inside the sandbox.
TEST_F(CompileCacheTest, PythonSyntaxCheckRunsInTheCompileSandbox) {
  if (auto ready = probe_bwrap(bwrap_program()); !ready) GTEST_SKIP() << ready.error().message;
  // The interpreter as the Python candidate tests take it: $ATREX_PYTHON, else Debian's.
  const bool set_python = !std::getenv("ATREX_PYTHON") && fs::exists("/usr/bin/python3");
  if (set_python) ::setenv("ATREX_PYTHON", "/usr/bin/python3", 1);
  struct Unset {
    bool on;
    ~Unset() {
      if (on) ::unsetenv("ATREX_PYTHON");
    }
  } unset{set_python};
  auto module = [](const std::string& file) {
    CandidateRef c = candidate("python/" + file, "cpu");
    c.file_name = "generated_kernel.py";
    return c;
  };
  CompileCache plain(dir_, ATREX_TEST_INCLUDE_DIR);
  auto a = plain.compile(module("rms_norm_syntax_error.py"), "native", 60);
  if (!a && a.error().code == ErrorCode::kUnavailable) GTEST_SKIP() << a.error().message;
  CompileCache jailed(dir_, ATREX_TEST_INCLUDE_DIR);
  jailed.sandbox_with(bwrap_program());
  auto b = jailed.compile(module("rms_norm_syntax_error.py"), "native", 60);
  ASSERT_TRUE(a) << a.error().message;
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_FALSE(a->ok);
  EXPECT_FALSE(b->ok);
  EXPECT_NE(a->key, b->key);
  EXPECT_FALSE(b->cache_hit);
  EXPECT_NE(b->log.find("SyntaxError"), std::string::npos) << b->log;
  EXPECT_NE(b->log.find("generated_kernel.py\", line 6"), std::string::npos) << b->log;
  auto honest = jailed.compile(module("rms_norm_torch.py"), "native", 60);
  ASSERT_TRUE(honest) << honest.error().message;
  EXPECT_TRUE(honest->ok) << honest->log;
}

// A compiler outside /usr binds its tree's toolchain folders, never the tree: ~/bin/g++ must not
// bring the home folder's .ssh or ~/.cache/atrex into the sandbox (the compile-sandbox attack of
// 2026-12-06 read a planted key through CXX=<home>/bin/g++).
TEST_F(CompileCacheTest, ACompilerInAHomeFolderBindsItsToolchainFoldersOnly) {
  const fs::path home = dir_ / "home";
  for (const char* d : {"bin", "lib", ".ssh", ".cache/atrex", "Documents"})
    fs::create_directories(home / d);
  fs::create_symlink("/usr/bin/g++", home / "bin" / "g++");
  const auto jail = sandboxed_compile("/usr/bin/bwrap", {(home / "bin" / "g++").string(), "-c", "x.cpp"},
                                      dir_ / "work", ATREX_TEST_INCLUDE_DIR);
  auto bound = [&](const fs::path& p) {
    return std::find(jail.argv.begin(), jail.argv.end(), p.string()) != jail.argv.end();
  };
  EXPECT_TRUE(bound(home / "bin"));
  EXPECT_TRUE(bound(home / "lib"));
  for (const fs::path& p : {home, home / ".ssh", home / ".cache", home / "Documents"})
    EXPECT_FALSE(bound(p)) << p << " is in the compile sandbox";
}

// A library folder on LD_LIBRARY_PATH reached through a link inside a tree the sandbox binds
// read-only (/usr/local/cuda/lib64 on the GPU host, /usr/local/cuda a link): bound at the path
// as named, bwrap failed every compile there with "Can't mkdir /usr/local/cuda/lib64" (the GPU
// run of 2026-12-07). Any such link shows it: perl's versioned folder is one on Debian.
TEST_F(CompileCacheTest, ALibraryPathThroughALinkDoesNotBreakTheSandbox) {
  if (auto ready = probe_bwrap(bwrap_program()); !ready) GTEST_SKIP() << ready.error().message;
  std::string linked;
  std::error_code ec;
  for (const char* p : {"/usr/local/cuda/lib64", "/usr/share/perl/5.36", "/usr/src/gtest"}) {
    if (fs::is_directory(p, ec) && fs::canonical(p, ec) != fs::path(p)) {
      linked = p;
      break;
    }
  }
  if (linked.empty()) GTEST_SKIP() << "no folder reached through a link under /usr here";
  const char* old = std::getenv("LD_LIBRARY_PATH");
  const std::string saved = old ? old : "";
  ::setenv("LD_LIBRARY_PATH", linked.c_str(), 1);
  CompileCache cache(dir_, ATREX_TEST_INCLUDE_DIR);
  cache.sandbox_with(bwrap_program());
  auto r = cache.compile(candidate("rms_norm_correct.cpp", "cpu"), "native", 120);
  if (old) ::setenv("LD_LIBRARY_PATH", saved.c_str(), 1);
  else ::unsetenv("LD_LIBRARY_PATH");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->ok) << "LD_LIBRARY_PATH=" << linked << ": " << r->log;
}

// A relative cache folder (ATREX_CACHE_DIR=.gpu-bundle/cache, as deploy/gpu/bundle.sh used it)
// made every sandboxed compile fail with "cc1plus: fatal error: <file>: No such file or directory":
// the compiler runs in the sandbox's working folder, where the relative path names nothing.
TEST_F(CompileCacheTest, ARelativeCacheFolderStillCompilesInTheSandbox) {
  if (auto ready = probe_bwrap(bwrap_program()); !ready) GTEST_SKIP() << ready.error().message;
  const fs::path relative = fs::relative(dir_);
  ASSERT_TRUE(relative.is_relative()) << relative;
  CompileCache cache(relative, ATREX_TEST_INCLUDE_DIR);
  cache.sandbox_with(bwrap_program());
  auto r = cache.compile(candidate("rms_norm_correct.cpp", "cpu"), "native", 120);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->ok) << "cache folder " << relative << ": " << r->log;
  EXPECT_TRUE(r->library.is_absolute()) << r->library;
}

TEST(NativeCpuTarget, NamesTheCpuModelAndTheResolvedMarch) {
  std::string model;
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  const std::string target = native_cpu_target("c++");
  if (!model.empty()) {
    EXPECT_NE(target.find("cpu=" + model + ";"), std::string::npos) << target;
    EXPECT_EQ(target.find("cpu-flags=unknown"), std::string::npos) << target;
  }
  EXPECT_EQ(target.rfind("march=", 0), 0u) << target;
  EXPECT_EQ(target.find("march=unknown"), std::string::npos)
      << "c++ did not resolve -march=native: " << target;
  EXPECT_EQ(target.find("march= "), std::string::npos) << target;
  EXPECT_EQ(native_cpu_target("c++"), target) << "the key must be stable from call to call";
}

#ifdef ATREX_TEST_HAVE_NVCC
// CI machines have nvcc but no GPU: CUDA candidates must still compile there.
TEST_F(CompileCacheTest, CudaCandidateCompilesWithNvcc) {
  CompileCache cache(dir_, ATREX_TEST_INCLUDE_DIR);
  auto r = cache.compile(candidate("rms_norm_correct.cu", "cuda"), "sm_90a", 300);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->ok) << r->log;
}

// nvcc in the compile sandbox: its helpers (cicc under nvvm/, ptxas), headers and the host
// compiler are all reachable (a toolkit at /usr/local/cuda, a link into /usr: binding its folders
// again made bwrap fail with "Can't mkdir /usr/local/cuda/bin", and that failure was cached).
TEST_F(CompileCacheTest, CudaCandidateCompilesWithNvccInTheSandbox) {
  if (auto ready = probe_bwrap(bwrap_program()); !ready) GTEST_SKIP() << ready.error().message;
  CompileCache cache(dir_, ATREX_TEST_INCLUDE_DIR);
  cache.sandbox_with(bwrap_program());
  auto r = cache.compile(candidate("rms_norm_correct.cu", "cuda"), "sm_90a", 300);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->ok) << r->log;
}
#endif

}  // namespace
}  // namespace atrex::runner
