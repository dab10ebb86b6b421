// Whether device memory one process allocates can be written by an evaluation child in its
// sandbox, with no copy through the host: the judge's device arena (protocol/arena_handoff.h,
// docs/evaluation.md "The judge's device arena"). The test allocates as the judge does
// (CudaVmm::create_exported: cuMemCreate, a POSIX file descriptor handle), offers it over a Unix
// socket (send_arena_offer, SCM_RIGHTS) to atrex-vmm-share-probe, which receives, imports, maps
// and fills it after installing the candidate's seccomp filter (stricter than the child, which
// maps the arena before it installs the filter), and reads the fill back through its own mapping. Once without the
// sandbox, once inside the evaluation child's bwrap view (eval_sandbox_view: its own PID, IPC,
// network and mount namespaces, the GPU device nodes bound). Label gpu.
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "atrex/common/process/sandbox.h"
#include "atrex/common/process/subprocess.h"
#include "child/cuda_vmm.h"
#include "protocol/arena_handoff.h"
#include "sandbox/eval_sandbox.h"

namespace atrex {
namespace {
namespace fs = std::filesystem;

class GpuVmmShare : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
    ASSERT_EQ(vmm_.load(), "");
    int supported = 0;
    ASSERT_EQ(vmm_.get_attribute(&supported,
                                 CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0),
              CUDA_SUCCESS);
    ASSERT_EQ(supported, 1) << "this GPU cannot export allocations as file descriptors";
  }

  // Allocates 64 MiB as the judge allocates its device arena (CudaVmm::create_exported), offers
  // it to the probe as the judge offers it to the child (send_arena_offer; argv before the
  // probe's own arguments: a sandbox wrapper or nothing) and checks that every word the probe
  // wrote is `pattern`.
  void share_and_check(const std::vector<std::string>& wrapper, unsigned pattern) {
    std::string error;
    const runner::CudaVmm::Exported arena = vmm_.create_exported(size_t{64} << 20, &error);
    ASSERT_NE(arena.ptr, 0u) << error;
    ASSERT_GE(arena.bytes, size_t{64} << 20);
    ASSERT_EQ(cudaMemset(reinterpret_cast<void*>(arena.ptr), 0, arena.bytes), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    // Queued: the probe reads it once it runs.
    ASSERT_TRUE(runner::send_arena_offer(sv[0], runner::ArenaOffer{arena.bytes, arena.fd}));
    ::close(arena.fd);
    SubprocessOptions o;
    o.argv = wrapper;
    for (const std::string& a : {probe_.string(), std::string("--pattern"),
                                 std::to_string(pattern), std::string("--seccomp")})
      o.argv.push_back(a);
    o.timeout = std::chrono::seconds(120);
    o.inherit_fds = {{sv[1], 3}};
    // The environment the runner gives its children: LD_LIBRARY_PATH resolved to real folders
    // (a CUDA image's /usr/local/cuda/lib runs through /etc/alternatives, which the sandbox
    // does not bind), as eval_sandbox_view binds them.
    o.env = clean_child_environment(fs::temp_directory_path());
    auto r = run_subprocess(o);
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_TRUE(r->ok()) << r->describe() << ": " << r->output_tail;
    EXPECT_TRUE(runner::receive_arena_answer(sv[0])) << "the probe did not answer that it mapped it";
    ::close(sv[0]);

    std::vector<unsigned> back(arena.bytes / 4);
    ASSERT_EQ(cudaMemcpy(back.data(), reinterpret_cast<void*>(arena.ptr), arena.bytes,
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    size_t wrong = 0;
    for (unsigned w : back) wrong += w != pattern;
    EXPECT_EQ(wrong, 0u) << "of " << back.size() << " words the probe wrote";
    EXPECT_EQ(vmm_.unmap(arena.ptr, arena.bytes), CUDA_SUCCESS);
    EXPECT_EQ(vmm_.free_address(arena.ptr, arena.bytes), CUDA_SUCCESS);
  }

  runner::CudaVmm vmm_;
  const fs::path probe_ = fs::path(ATREX_TEST_BIN_DIR) / "atrex-vmm-share-probe";
};

TEST_F(GpuVmmShare, AnAllocationPassedAsAFileDescriptorIsWrittenByAnotherProcess) {
  share_and_check({}, 0x5a5a1234u);
}

TEST_F(GpuVmmShare, AnAllocationPassedAsAFileDescriptorIsWrittenInTheEvaluationSandbox) {
  const fs::path bwrap = bwrap_program(ATREX_TEST_BIN_DIR);
  if (auto ready = probe_bwrap(bwrap); !ready) GTEST_SKIP() << ready.error().message;
  share_and_check(bwrap_argv(bwrap, runner::eval_sandbox_view(Backend::kCuda, probe_, {}), {}),
                  0x600dcafeu);
}

}  // namespace
}  // namespace atrex
