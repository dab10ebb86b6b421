// The kernels a CUDA candidate library defines (elf_symbols.h defined_kernels) and the ghost
// kernels among them (kernel_checks.h report_unlaunched_kernels): no GPU needed, nvcc where
// the build found it (CI has it).
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "atrex/common/hash.h"
#include "atrex/common/json_io.h"
#include "atrex/runner/compile.h"
#include "elf_symbols.h"
#include "kernel_checks.h"

namespace atrex::runner {
namespace {
namespace fs = std::filesystem;

TEST(KernelSymbols, StubSymbolsNameTheirKernel) {
  EXPECT_EQ(kernel_of_stub_symbol("_Z31__device_stub__Z11dead_kernelPfPf"), "_Z11dead_kernelPf");
  // -O3 inlines a template kernel's stub: only its static locals keep the name.
  EXPECT_EQ(kernel_of_stub_symbol("_ZZL38__device_stub__Z11tmpl_kernelILi4EEvPfPfE8__handle"),
            "_Z11tmpl_kernelILi4EEvPf");
  EXPECT_EQ(kernel_of_stub_symbol("_ZGVZL33__device_stub__Z9tmpl_deadIfEvPT_PfE5__tmp"),
            "_Z9tmpl_deadIfEvPT_");
  EXPECT_FALSE(kernel_of_stub_symbol("_Z11dead_kernelPf"));
  EXPECT_FALSE(kernel_of_stub_symbol("__device_stub__"));          // no length prefix
  EXPECT_FALSE(kernel_of_stub_symbol("_Z99__device_stub__Z1fv"));  // length past the end
}

#ifdef ATREX_TEST_HAVE_NVCC

// Compiles `source` (a .cu candidate) as the evaluator does; the library path.
fs::path compile_cuda(const std::string& name, const std::string& source,
                      const fs::path& cache_dir) {
  CandidateRef c;
  c.source = source;
  c.sha256 = sha256_hex(source);
  c.backend = Backend::kCuda;
  c.file_name = name;
  c.agent = "test";
  CompileCache cache(cache_dir, ATREX_TEST_INCLUDE_DIR);
  auto r = cache.compile(c, "sm_90a", 300);
  EXPECT_TRUE(r) << r.error().message;
  if (!r) return {};
  EXPECT_TRUE(r->ok) << r->log;
  return r->library;
}

class KernelSymbolsNvccTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("atrex_ks_" + std::to_string(::getpid()));
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// Every kind of kernel definition, named as CUPTI (and cudart's registration) names it:
// a plain kernel, one never launched, two instances of a template (stubs inlined at -O3), an
// extern "C" kernel (device name unmangled) and one in an anonymous namespace. Host functions
// and __device__ functions are not kernels.
TEST_F(KernelSymbolsNvccTest, EveryKindOfKernelIsFoundByItsDeviceName) {
  const std::string source = R"(
#include <cuda_runtime.h>
#include "atrex/candidate.h"
namespace { __global__ void anon_kernel(float* x) { x[threadIdx.x] = 1; } }
template <int N> __global__ void tmpl_kernel(float* x) { x[threadIdx.x] = N; }
__global__ void dead_kernel(float* x) { x[0] = 2; }
extern "C" __global__ void c_kernel(float* x) { x[0] = 3; }
__device__ float helper(float v) { return v * 2; }
float host_helper(float v) { return v + 1; }
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  float* x = static_cast<float*>(launch->outputs[0].tensor.data);
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  anon_kernel<<<1, 1, 0, s>>>(x);
  tmpl_kernel<4><<<1, 1, 0, s>>>(x);
  tmpl_kernel<8><<<1, 1, 0, s>>>(x);
  c_kernel<<<1, 1, 0, s>>>(x);
  return static_cast<int>(host_helper(0)) - 1;
}
)";
  const fs::path lib = compile_cuda("kinds.cu", source, dir_);
  ASSERT_FALSE(lib.empty());
  auto kernels = defined_kernels(lib);
  ASSERT_TRUE(kernels) << kernels.error().message;
  std::set<std::string> keys;
  for (const auto& k : *kernels) keys.insert(kernel_key(k));
  EXPECT_EQ(kernels->size(), 5u);
  EXPECT_TRUE(kernels->count("_Z11dead_kernelPf"));
  EXPECT_TRUE(kernels->count("_Z11tmpl_kernelILi4EEvPf"));
  EXPECT_TRUE(kernels->count("_Z11tmpl_kernelILi8EEvPf"));
  EXPECT_TRUE(kernels->count("c_kernel")) << "extern \"C\": the device name is the plain one";
  EXPECT_TRUE(keys.count("(anonymous namespace)::anon_kernel(float*)"));
  for (const auto& k : keys)
    EXPECT_EQ(k.find("helper"), std::string::npos) << k << " is not a kernel";
}

// The dead-kernel fixture: with only its row kernel in the traced calls, the wide kernel is
// the one reported; with both traced, none is.
TEST_F(KernelSymbolsNvccTest, KernelsNoTracedCallLaunchedAreReported) {
  const fs::path file = fs::path(ATREX_TEST_DATA_DIR) / "rms_norm_dead_kernel.cu";
  const fs::path lib = compile_cuda(file.filename().string(), *read_text_file(file), dir_);
  ASSERT_FALSE(lib.empty());
  auto kernels = defined_kernels(lib);
  ASSERT_TRUE(kernels) << kernels.error().message;
  ASSERT_EQ(kernels->size(), 2u);
  std::string row, wide;
  for (const auto& k : *kernels)
    (k.find("rms_norm_row_kernel") != std::string::npos ? row : wide) = k;
  ASSERT_NE(wide.find("rms_norm_wide_kernel"), std::string::npos) << wide;
  std::map<uint64_t, CallTrace> traces;
  traces[0].kernels.push_back(TracedKernel{row, 3.0});
  traces[1].kernels.push_back(TracedKernel{row, 3.0});
  ChildShapeResponse resp;
  child::report_unlaunched_kernels(resp, lib.string(), traces);
  ASSERT_TRUE(resp.unlaunched_kernels.has_value());
  ASSERT_EQ(resp.unlaunched_kernels->size(), 1u) << to_json(resp).dump();
  EXPECT_EQ(resp.unlaunched_kernels->at(0), kernel_key(wide));
  EXPECT_NE(resp.unlaunched_kernels->at(0).find("rms_norm_wide_kernel<4>"), std::string::npos);
  traces[2].kernels.push_back(TracedKernel{wide, 1.0});
  resp = ChildShapeResponse{};
  child::report_unlaunched_kernels(resp, lib.string(), traces);
  ASSERT_TRUE(resp.unlaunched_kernels.has_value());
  EXPECT_TRUE(resp.unlaunched_kernels->empty()) << to_json(resp).dump();
}

#endif  // ATREX_TEST_HAVE_NVCC

// A vector-width or alignment fallback (another instantiation of a kernel template that ran) is
// not a ghost; a kernel of a template or name that never ran is (seen on the H200: every
// built-in template was flagged for its unlaunched VEC < 8 instantiations before this).
TEST(KernelSymbols, InstantiationsOfALaunchedTemplateAreNotGhosts) {
  const std::string k1 =
      "void (anonymous namespace)::rms_norm_kernel<1>(unsigned short const*, int)";
  const std::string k8 =
      "void (anonymous namespace)::rms_norm_kernel<8>(unsigned short const*, int)";
  const std::string wide =
      "void (anonymous namespace)::rms_norm_wide_kernel<8>(unsigned short const*, int)";
  const std::string plain = "helper_kernel(float*)";
  EXPECT_EQ(child::kernel_template(k8), "void {anon}::rms_norm_kernel");
  EXPECT_EQ(child::kernel_template(plain), "helper_kernel");
  size_t siblings = 99;
  const auto ghosts = child::ghost_kernels({k1, k8, wide, plain}, {k8}, &siblings);
  EXPECT_EQ(ghosts, (std::vector<std::string>{wide, plain}));
  EXPECT_EQ(siblings, 1u);
  EXPECT_TRUE(child::ghost_kernels({k1, k8}, {k1, k8}, &siblings).empty());
  EXPECT_EQ(siblings, 0u);
}

// A cpu candidate defines no kernels; an unreadable library reports nothing (not an empty list).
TEST(KernelSymbols, NoKernelsInAHostLibraryAndNothingReportedForAnUnreadableOne) {
  auto none = defined_kernels("/proc/self/exe");
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_TRUE(none->empty());
  ChildShapeResponse resp;
  child::report_unlaunched_kernels(resp, "/nonexistent/candidate.so", {});
  EXPECT_FALSE(resp.unlaunched_kernels.has_value());
}

// Python candidates (docs/python-candidates.md): the kernels Triton compiled in this child are the
// functions of the .cubin files under its TRITON_CACHE_DIR (a file that is no ELF counts by its
// name); every other traced kernel is vendor time, and a cache folder that does not exist (no
// Triton kernel compiled: a PyTorch fallback) gives dsl_share 0.
TEST(KernelSymbols, TritonKernelsAreTheFunctionsOfTheCubinsInTheCacheFolder) {
  const fs::path dir = fs::temp_directory_path() / ("atrex_triton_cache_" + std::to_string(::getpid()));
  fs::create_directories(dir / "ab");
  fs::create_directories(dir / "cd");
  fs::copy_file("/proc/self/exe", dir / "ab" / "k.cubin");  // an ELF that defines main
  ASSERT_TRUE(write_text_file_atomic(dir / "cd" / "_silu_and_mul_rows.cubin", "not an ELF"));
  ASSERT_TRUE(write_text_file_atomic(dir / "cd" / "_other.json", "{}"));
  auto names = child::triton_kernel_names(dir.string());
  ASSERT_TRUE(names) << names.error().message;
  EXPECT_TRUE(names->count("main"));
  EXPECT_TRUE(names->count("_silu_and_mul_rows"));
  EXPECT_FALSE(names->count("_other"));
  std::map<uint64_t, CallTrace> traces;
  traces[0].kernels = {{"main", 3.0}, {"_silu_and_mul_rows", 1.0},
                       {"_ZN2at6native29vectorized_elementwise_kernelILi4EEEviT_", 4.0}};
  ChildShapeResponse resp;
  resp.timing = TimingSummary{};
  child::attribute_python_kernels(resp, dir.string(), traces);
  ASSERT_TRUE(resp.dsl_share);
  EXPECT_DOUBLE_EQ(*resp.dsl_share, 0.5);
  ASSERT_EQ(resp.timing->kernels.size(), 3u);
  ChildShapeResponse fallback;
  fallback.timing = TimingSummary{};
  child::attribute_python_kernels(fallback, (dir / "missing").string(), traces);
  ASSERT_TRUE(fallback.dsl_share);
  EXPECT_EQ(*fallback.dsl_share, 0.0);
  fs::remove_all(dir);
}

// Device work outside the timed calls (kernel_checks.h check_stray_work): the harness's own
// records between the calls pass; a launch from another thread, one inside a call without its
// id, a kernel of no harness name or of a harness name the candidate also defines are rejected,
// each naming the kernel and why.
TEST(StrayWork, TheHarnessesOwnWorkBetweenTheCallsPassesAndAnyOtherIsRejected) {
  const std::string flush = "_ZN5atrex8problems4cuda12guard_kernelEPKhm";
  const std::string real = "_Z14rms_norm_kernelPK13__nv_bfloat16S1_PS_iif";
  const std::set<std::string> harness{kernel_key(flush)};
  auto stray = [](std::string kernel, bool other_thread, int64_t in_call) {
    StrayRecord s;
    s.kernel = std::move(kernel);
    s.other_thread = other_thread;
    s.in_call = in_call;
    s.start_ns = 1000;
    s.end_ns = 4500;
    return s;
  };
  // The harness between the calls: its kernels and its copies, on its thread.
  EXPECT_FALSE(
      child::check_stray_work({stray(flush, false, -1), stray("", false, -1)}, harness, {}));
  EXPECT_FALSE(child::check_stray_work({}, harness, {}));
  struct Case {
    StrayRecord s;
    std::set<std::string> candidate;
    std::string why;
  };
  const std::vector<Case> cases = {
      {stray(real, true, -1), {}, "launched by a thread other than"},
      {stray("", true, -1), {}, "launched by a thread other than"},  // a copy from a worker
      {stray(real, false, 6), {}, "inside timed call 7 without that call's correlation id"},
      {stray(flush, false, 2), {}, "inside timed call 3"},  // a harness name does not excuse it
      {stray(real, false, -1), {}, "not one of the harness's kernels"},
      // A made-up external id (bogus_external_id.cu): counted as no call's, whatever its name.
      {[&] {
         auto s = stray(flush, false, -1);
         s.foreign_id = 987654321;
         return s;
       }(),
       {},
       "tagged with external correlation id 987654321, which is no timed call's"},
      {stray(flush, false, -1), {kernel_key(flush)}, "not one of the harness's kernels"},
  };
  for (const auto& c : cases) {
    auto f = child::check_stray_work({stray(flush, false, -1), c.s}, harness, c.candidate);
    ASSERT_TRUE(f) << c.why;
    EXPECT_EQ(f->status, EvalStatus::kRejected);
    EXPECT_NE(f->error.find(c.why), std::string::npos) << f->error;
    EXPECT_NE(f->error.find("3.5 us"), std::string::npos) << f->error;
    EXPECT_NE(f->error.find(c.s.kernel.empty() ? "a memcpy or memset" : c.s.kernel),
              std::string::npos)
        << f->error;
  }
}

// The harness's kernel names are read off the evaluation child's executable (its host stubs):
// a build that stripped them would turn the name rule off. The CUDA child must name its guard
// and comparison kernels; an empty set (this test binary defines no kernel) means no name rule.
TEST(StrayWork, TheEvaluationChildsOwnKernelsAreNamedInItsExecutable) {
  const StrayRecord foreign{.kernel = "_Z14rms_norm_kernelPfS_", .end_ns = 1000};
  EXPECT_FALSE(child::check_stray_work({foreign}, {}, {})) << "no names: no name rule";
  const fs::path child_bin = fs::path(ATREX_TEST_BIN_DIR) / "atrex-eval-cuda";
  if (!fs::exists(child_bin)) GTEST_SKIP() << "no CUDA child built: " << child_bin;
  const std::set<std::string>& keys = child::defined_kernel_keys(child_bin.string());
  bool first_difference = false;
  for (const auto& k : keys)
    first_difference |= k.find("first_difference_kernel") != std::string::npos;
  EXPECT_TRUE(first_difference) << keys.size() << " kernels";
  EXPECT_TRUE(child::check_stray_work({foreign}, keys, {}));
}

}  // namespace
}  // namespace atrex::runner
