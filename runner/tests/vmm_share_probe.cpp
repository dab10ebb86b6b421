// atrex-vmm-share-probe: the receiving side of GpuVmmShare (gpu_vmm_share_test.cpp), run as an
// evaluation child is, in the evaluation sandbox when the test asks: it installs the
// candidate's seccomp filter (--seccomp), receives the arena offer on the Unix socket at fd 3
// (receive_arena_offer: its size and a file descriptor, SCM_RIGHTS), imports and maps it
// (CudaVmm::import_map), fills it with the 32-bit word --pattern and answers that it mapped it
// (send_arena_answer). On failure it prints the call and CUresult and exits 1. This is what the
// judge's device arena needs of the child (protocol/arena_handoff.h).
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "atrex/common/process/seccomp.h"
#include "child/cuda_vmm.h"
#include "protocol/arena_handoff.h"

namespace {

int fail(const std::string& what) {
  std::fprintf(stderr, "vmm-share-probe: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned pattern = 0;
  bool seccomp = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--pattern" && i + 1 < argc) pattern = std::strtoul(argv[++i], nullptr, 0);
    if (a == "--seccomp") seccomp = true;
  }
  atrex::runner::CudaVmm vmm;
  if (auto missing = vmm.load(); !missing.empty()) return fail("no entry point " + missing);
  // As the evaluation child: the runtime is up, then the filter, then the candidate's work.
  if (seccomp) {
    if (auto s = atrex::install_candidate_seccomp(); !s) return fail(s.error().message);
  }
  auto offer = atrex::runner::receive_arena_offer(3);
  if (!offer) return fail(offer.error().message);
  if (offer->fd < 0 || offer->bytes == 0) return fail("no arena was offered");
  std::string error;
  const CUdeviceptr ptr = vmm.import_map(offer->fd, offer->bytes, &error);
  if (!ptr) return fail(error);
  const size_t bytes = offer->bytes;
  std::string words(bytes, '\0');
  for (size_t i = 0; i + 4 <= bytes; i += 4) std::memcpy(words.data() + i, &pattern, 4);
  if (cudaMemcpy(reinterpret_cast<void*>(ptr), words.data(), bytes, cudaMemcpyHostToDevice) !=
          cudaSuccess ||
      cudaDeviceSynchronize() != cudaSuccess)
    return fail(std::string("cudaMemcpy into the imported allocation: ") +
                cudaGetErrorString(cudaGetLastError()));
  if (auto s = atrex::runner::send_arena_answer(3, true); !s) return fail(s.error().message);
  return 0;
}
