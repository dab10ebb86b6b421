// PROBE E (reconnaissance, not an attack on the score): what a candidate can learn about and do
// with the judge's device arena from inside the sandboxed, seccomp-filtered child. At its first
// call it gathers, with driver entry points reached through cudaGetDriverEntryPointByVersion:
//   * the offsets of weight and out from x (device_arena_layout: x at 0, weight at page_up(x),
//     out after a 4096-byte front guard), and the mapping base/size of x and out
//     (CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR/_SIZE): one mapping = the arena;
//   * the bytes of the arena past out's back guard (the arena is sized for the TASK's largest
//     shape, shared_layout.h / judge.cpp offer_device_arena: a non-zero tail tells the candidate a
//     larger shape, e.g. an unseen one, is still to come in this task, and bounds its size);
//   * whether cuMemRetainAllocationHandle works on it, its requested handle types, and whether
//     cuMemExportToShareableHandle(POSIX fd) still works after the child's seccomp filter (a
//     second exported descriptor of the arena; there is no one in the sandbox to hand it to);
//   * whether cuMemCreate works under the filter (needed by ATTACK C).
// It then returns 9 with those facts as its error message.
// Expected verdict: wrong_result on every shape, error "the candidate returned 9: arena probe:
// x=... w-x=... out-x=... map(x)=base+size ... tail=... retain=0 types=1 export=0(fd N)
// create=0" (with ATREX_DEVICE_ARENA=0: mapping attributes of a cudaMalloc buffer and
// retain!=0). Read the numbers in the record's error; nothing here should pass.
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>

#include "atrex/candidate.h"

namespace {

char g_error[512];

template <typename F>
bool get(const char* name, F& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !p)
    return false;
  fn = reinterpret_cast<F>(p);
  return true;
}

}  // namespace

ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message(void) { return g_error; }

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  CUresult (*attr)(void*, CUpointer_attribute, CUdeviceptr) = nullptr;
  CUresult (*retain)(CUmemGenericAllocationHandle*, void*) = nullptr;
  CUresult (*props)(CUmemAllocationProp*, CUmemGenericAllocationHandle) = nullptr;
  CUresult (*export_fd)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                        unsigned long long) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                     unsigned long long) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  get("cuPointerGetAttribute", attr);
  get("cuMemRetainAllocationHandle", retain);
  get("cuMemGetAllocationPropertiesFromHandle", props);
  get("cuMemExportToShareableHandle", export_fd);
  get("cuMemCreate", create);
  get("cuMemRelease", release);
  const auto X = reinterpret_cast<CUdeviceptr>(x->data);
  const auto W = reinterpret_cast<CUdeviceptr>(w->data);
  const auto O = reinterpret_cast<CUdeviceptr>(out->data);
  const uint64_t out_bytes = static_cast<uint64_t>(atrex_numel(out)) * 2;
  CUdeviceptr xbase = 0, obase = 0;
  size_t xsize = 0, osize = 0;
  int ra = attr ? attr(&xbase, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, X) : -1;
  int rb = attr ? attr(&xsize, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, X) : -1;
  if (attr) {
    attr(&obase, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, O);
    attr(&osize, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, O);
  }
  const long long tail = static_cast<long long>(xbase + xsize) -
                         static_cast<long long>(O + out_bytes + 4096);
  CUmemGenericAllocationHandle h = 0;
  int rr = retain ? retain(&h, reinterpret_cast<void*>(X)) : -1;
  int types = -1, rp = -1, re = -1, fd = -1;
  if (rr == 0 && props) {
    CUmemAllocationProp p{};
    rp = props(&p, h);
    if (rp == 0) types = static_cast<int>(p.requestedHandleTypes);
  }
  if (rr == 0 && export_fd) {
    re = export_fd(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (re == 0 && fd >= 0) close(fd);
  }
  if (rr == 0 && release) release(h);
  int dev = 0;
  cudaGetDevice(&dev);
  CUmemAllocationProp cp{};
  cp.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  cp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  cp.location.id = dev;
  CUmemGenericAllocationHandle mine = 0;
  int rc = create ? create(&mine, size_t{2} << 20, &cp, 0) : -1;
  if (rc == 0 && release) release(mine);
  std::snprintf(g_error, sizeof g_error,
                "arena probe: shape %lldx%lld x=%#llx w-x=%lld out-x=%lld map(x)=%d/%d base-x=%lld "
                "size=%zu map(out)=%s tail=%lld retain=%d props=%d types=%d export=%d(fd %d) "
                "create=%d",
                static_cast<long long>(x->shape[0]), static_cast<long long>(x->shape[1]),
                static_cast<unsigned long long>(X), static_cast<long long>(W - X),
                static_cast<long long>(O - X), ra, rb,
                static_cast<long long>(xbase) - static_cast<long long>(X), xsize,
                (obase == xbase && osize == xsize) ? "same" : "other", tail, rr, rp, types, re, fd,
                rc);
  return 9;
}
