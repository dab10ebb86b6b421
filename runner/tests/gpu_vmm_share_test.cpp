// Whether device memory one process allocates can be written by an evaluation child in its
// sandbox, with no copy through the host: the design that would take the judge's copies out of
// every check (docs/benchmarks.md "Since the judge"). The test allocates with the CUDA VMM API
// (cuMemCreate, a POSIX file descriptor handle), hands the descriptor over a Unix socket
// (SCM_RIGHTS) to atrex-vmm-share-probe, which imports, maps and fills it (after installing the
// candidate's seccomp filter), and reads the fill back through its own mapping. Once without the
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
#include "cuda_driver_entry.h"
#include "fd_passing.h"
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

  // Allocates 64 MiB, shares it with the probe (argv before the probe's own arguments: a
  // sandbox wrapper or nothing) and checks that every word the probe wrote is `pattern`.
  void share_and_check(const std::vector<std::string>& wrapper, unsigned pattern) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t granularity = 0;
    ASSERT_EQ(vmm_.granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
              CUDA_SUCCESS);
    const size_t bytes = ((size_t{64} << 20) + granularity - 1) / granularity * granularity;
    CUmemGenericAllocationHandle handle = 0;
    ASSERT_EQ(vmm_.create(&handle, bytes, &prop, 0), CUDA_SUCCESS);
    int fd = -1;
    ASSERT_EQ(vmm_.export_handle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_SUCCESS);
    std::string error;
    const CUdeviceptr ptr = vmm_.map_read_write(handle, bytes, &error);
    ASSERT_NE(ptr, 0u) << error;
    ASSERT_EQ(cudaMemset(reinterpret_cast<void*>(ptr), 0, bytes), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    ASSERT_TRUE(testing::send_fd(sv[0], fd));  // queued: the probe reads it once it runs
    ::close(fd);
    SubprocessOptions o;
    o.argv = wrapper;
    for (const std::string& a : {probe_.string(), std::string("--bytes"), std::to_string(bytes),
                                 std::string("--pattern"), std::to_string(pattern),
                                 std::string("--seccomp")})
      o.argv.push_back(a);
    o.timeout = std::chrono::seconds(120);
    o.inherit_fds = {{sv[1], 3}};
    auto r = run_subprocess(o);
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_TRUE(r->ok()) << r->describe() << ": " << r->output_tail;
    char answer[2] = {};
    EXPECT_EQ(::read(sv[0], answer, 2), 2);
    EXPECT_EQ(std::string(answer, 2), "ok");
    ::close(sv[0]);

    std::vector<unsigned> back(bytes / 4);
    ASSERT_EQ(cudaMemcpy(back.data(), reinterpret_cast<void*>(ptr), bytes, cudaMemcpyDeviceToHost),
              cudaSuccess);
    size_t wrong = 0;
    for (unsigned w : back) wrong += w != pattern;
    EXPECT_EQ(wrong, 0u) << "of " << back.size() << " words the probe wrote";
    EXPECT_EQ(vmm_.unmap(ptr, bytes), CUDA_SUCCESS);
    EXPECT_EQ(vmm_.free_address(ptr, bytes), CUDA_SUCCESS);
    EXPECT_EQ(vmm_.release(handle), CUDA_SUCCESS);
  }

  testing::CudaVmm vmm_;
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
