// atrex-vmm-share-probe: the receiving side of GpuVmmShare (gpu_vmm_share_test.cpp), run as an
// evaluation child is, in the evaluation sandbox when the test asks: it installs the
// candidate's seccomp filter (--seccomp), receives one file descriptor on the Unix socket at
// fd 3 (SCM_RIGHTS), imports it as a CUDA device allocation of --bytes bytes
// (cuMemImportFromShareableHandle, POSIX file descriptor handle), maps it, fills it with the
// 32-bit word --pattern and answers "ok" on the socket. On failure it prints the call and
// CUresult and exits 1. This is what a judge-allocated output arena needs of the child
// (docs/benchmarks.md "Since the judge").
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "atrex/common/process/seccomp.h"
#include "cuda_driver_entry.h"
#include "fd_passing.h"

namespace {

int fail(const std::string& what) {
  std::fprintf(stderr, "vmm-share-probe: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = 0;
  unsigned pattern = 0;
  bool seccomp = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--bytes" && i + 1 < argc) bytes = std::strtoull(argv[++i], nullptr, 10);
    if (a == "--pattern" && i + 1 < argc) pattern = std::strtoul(argv[++i], nullptr, 0);
    if (a == "--seccomp") seccomp = true;
  }
  if (bytes == 0) return fail("usage: atrex-vmm-share-probe --bytes N --pattern P [--seccomp]");
  atrex::testing::CudaVmm vmm;
  if (auto missing = vmm.load(); !missing.empty()) return fail("no entry point " + missing);
  // As the evaluation child: the runtime is up, then the filter, then the candidate's work.
  if (seccomp) {
    if (auto s = atrex::install_candidate_seccomp(); !s) return fail(s.error().message);
  }
  const int fd = atrex::testing::receive_fd(3);
  if (fd < 0) return fail(std::string("recvmsg on fd 3: ") + std::strerror(errno));
  CUmemGenericAllocationHandle handle = 0;
  if (CUresult r = vmm.import_handle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      r != CUDA_SUCCESS)
    return fail("cuMemImportFromShareableHandle: " + std::to_string(r));
  std::string error;
  const CUdeviceptr ptr = vmm.map_read_write(handle, bytes, &error);
  if (!ptr) return fail(error);
  std::string words(bytes, '\0');
  for (size_t i = 0; i + 4 <= bytes; i += 4) std::memcpy(words.data() + i, &pattern, 4);
  if (cudaMemcpy(reinterpret_cast<void*>(ptr), words.data(), bytes, cudaMemcpyHostToDevice) !=
          cudaSuccess ||
      cudaDeviceSynchronize() != cudaSuccess)
    return fail(std::string("cudaMemcpy into the imported allocation: ") +
                cudaGetErrorString(cudaGetLastError()));
  if (::write(3, "ok", 2) != 2) return fail("answering on fd 3");
  return 0;
}
