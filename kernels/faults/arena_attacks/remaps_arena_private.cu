// ATTACK C: split the child's view of the device arena from the judge's.
//
// What it attacks: the assumption "the judge compares where the candidate wrote" (docs
// evaluation.md "The judge's device arena"). At its first call the candidate finds the arena from
// its input pointer (CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR / _MAPPING_SIZE: x is at offset 0 of
// device_arena_layout, shared_layout.h), takes the shared allocation's handle
// (cuMemRetainAllocationHandle) and maps it a second time at an address of its own ("judge view"),
// then cuMemUnmap's the harness's range and maps a PRIVATE cuMemCreate allocation at the very same
// address (copying the current contents into it). From then on every write of the harness
// (inputs, rotation copies, splices, poison, guards) and of the kernel goes to private memory the
// judge never sees; the judge keeps reading the shared pages, which only the candidate (through
// its second mapping) can still change. All driver calls go through cudaGetDriverEntryPointByVersion.
//
// MIRROR 0: the candidate computes honestly into the harness's (now private) buffers and never
// touches the judge view. Expected: wrong_result at the first seed of the first shape: the judge's
// view still holds the poisoned outputs (0xFF: NaN) of the moment of the remap (the message names
// out and a NaN candidate value) -- the judge reads only its own mapping (judge.cpp enter_shape
// cand_out_ = device_arena_ + offset; judge_checks.cpp Judge::compare).
// MIRROR 1: after computing it copies x, weight and out into the judge view at the same offsets.
// Expected: 'ok' and timed a little slower than honest (three extra copies per call): the split
// gains nothing, because the judge compares the shared pages with ITS OWN draw of the input set
// the child names and with ITS OWN reference, so the shared pages must hold exactly the right
// inputs and the right outputs anyway.
// Without the arena (ATREX_DEVICE_ARENA=0, or the judge could not allocate it) x is an ordinary
// cudaMalloc buffer: the candidate then returns 7 naming the driver call that failed
// (wrong_result "the candidate returned 7: remap: ..."). The same 7 appears if a driver call is
// refused under the child's seccomp filter (that would be a finding about the environment).
// Honest twin: kernels/faults/rms_norm_correct.cu.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "atrex/candidate.h"

#ifndef MIRROR
#define MIRROR 0
#endif

namespace {

constexpr int kThreads = 256;

__global__ void rms_norm_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* out,
                                int64_t hidden, float eps) {
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * hidden;
  float ss = 0.f;
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    const float v = __bfloat162float(xr[h]);
    ss += v * v;
  }
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = ss;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = rsqrtf(partial[0] / static_cast<float>(hidden) + eps);
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    out[row * hidden + h] =
        __float2bfloat16_rn(__bfloat162float(xr[h]) * inv * __bfloat162float(w[h]));
  }
}

char g_error[512];

struct Driver {
  CUresult (*pointer_attr)(void*, CUpointer_attribute, CUdeviceptr) = nullptr;
  CUresult (*retain)(CUmemGenericAllocationHandle*, void*) = nullptr;
  CUresult (*reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long) = nullptr;
  CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                     unsigned long long) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
};

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

int fail(const char* what, int r) {
  std::snprintf(g_error, sizeof g_error, "remap: %s failed (%d)", what, r);
  return 7;
}

bool g_done = false;
CUdeviceptr g_base = 0, g_judge_view = 0;
size_t g_size = 0;

// The split, once: returns 0 or the entry point's error code.
int split_views(CUdeviceptr any_arena_ptr) {
  Driver d;
  if (!get("cuPointerGetAttribute", d.pointer_attr) ||
      !get("cuMemRetainAllocationHandle", d.retain) || !get("cuMemAddressReserve", d.reserve) ||
      !get("cuMemMap", d.map) || !get("cuMemUnmap", d.unmap) ||
      !get("cuMemSetAccess", d.set_access) || !get("cuMemCreate", d.create) ||
      !get("cuMemRelease", d.release))
    return fail("cudaGetDriverEntryPointByVersion", 0);
  CUresult r;
  if ((r = d.pointer_attr(&g_base, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, any_arena_ptr)))
    return fail("MAPPING_BASE_ADDR", r);
  if ((r = d.pointer_attr(&g_size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, any_arena_ptr)))
    return fail("MAPPING_SIZE", r);
  CUmemGenericAllocationHandle shared = 0, priv = 0;
  if ((r = d.retain(&shared, reinterpret_cast<void*>(g_base))))
    return fail("cuMemRetainAllocationHandle (not a VMM mapping: no arena?)", r);
  int dev = 0;
  cudaGetDevice(&dev);
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = dev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if ((r = d.reserve(&g_judge_view, g_size, 0, 0, 0))) return fail("cuMemAddressReserve", r);
  if ((r = d.map(g_judge_view, g_size, 0, shared, 0))) return fail("cuMemMap (judge view)", r);
  if ((r = d.set_access(g_judge_view, g_size, &access, 1))) return fail("cuMemSetAccess 1", r);
  d.release(shared);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  if ((r = d.create(&priv, g_size, &prop, 0))) return fail("cuMemCreate (private)", r);
  cudaDeviceSynchronize();
  if ((r = d.unmap(g_base, g_size))) return fail("cuMemUnmap (harness view)", r);
  if ((r = d.map(g_base, g_size, 0, priv, 0))) return fail("cuMemMap (private at the harness VA)", r);
  if ((r = d.set_access(g_base, g_size, &access, 1))) return fail("cuMemSetAccess 2", r);
  d.release(priv);
  // The private view starts as the shared one was: inputs, guards, poisoned outputs.
  if (cudaMemcpy(reinterpret_cast<void*>(g_base), reinterpret_cast<void*>(g_judge_view), g_size,
                 cudaMemcpyDeviceToDevice) != cudaSuccess)
    return fail("cudaMemcpy (fill the private view)", static_cast<int>(cudaGetLastError()));
  return 0;
}

void mirror(const void* p, size_t bytes, cudaStream_t s) {
  const auto at = reinterpret_cast<CUdeviceptr>(p);
  if (at < g_base || at + bytes > g_base + g_size) return;
  cudaMemcpyAsync(reinterpret_cast<void*>(g_judge_view + (at - g_base)), p, bytes,
                  cudaMemcpyDeviceToDevice, s);
}

}  // namespace

ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message(void) { return g_error; }

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  auto stream = static_cast<cudaStream_t>(launch->stream);
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(stream, &capturing);
  if (!g_done && capturing == cudaStreamCaptureStatusNone) {
    g_done = true;
    if (int rc = split_views(reinterpret_cast<CUdeviceptr>(x->data))) return rc;
  }
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(x->data), static_cast<const __nv_bfloat16*>(w->data),
      static_cast<__nv_bfloat16*>(out->data), hidden, eps);
  if (MIRROR && g_judge_view) {
    mirror(x->data, static_cast<size_t>(rows * hidden) * 2, stream);
    mirror(w->data, static_cast<size_t>(hidden) * 2, stream);
    mirror(out->data, static_cast<size_t>(rows * hidden) * 2, stream);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
