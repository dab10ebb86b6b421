// The CUDA driver API's virtual memory management entry points (cuMemCreate and its kin), reached
// through the runtime (cudaGetDriverEntryPointByVersion) so that nothing links libcuda.so.1: the
// build machines have the toolkit's stub only, and the test binaries run there to be listed.
// Used by the probe of device memory shared with a sandboxed process
// (gpu_vmm_share_test.cpp, vmm_share_probe.cpp). Source: CUDA Driver API, "Virtual Memory
// Management"; CUDA Runtime API, "Driver Entry Point Access".
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <string>
#include <type_traits>

namespace atrex::testing {

struct CudaVmm {
  CUresult (*get_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*granularity)(size_t*, const CUmemAllocationProp*,
                          CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                     unsigned long long) = nullptr;
  CUresult (*export_handle)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                            unsigned long long) = nullptr;
  CUresult (*import_handle)(CUmemGenericAllocationHandle*, void*,
                            CUmemAllocationHandleType) = nullptr;
  CUresult (*reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long) = nullptr;
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*free_address)(CUdeviceptr, size_t) = nullptr;

  // Initialises the runtime on device 0 and looks every entry point up; "" when all were found,
  // else the name of the first that was not (or the runtime's error).
  std::string load() {
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(nullptr) != cudaSuccess)
      return std::string("the CUDA runtime: ") + cudaGetErrorString(cudaGetLastError());
    auto get = [](const char* name, auto& fn) {
      void* p = nullptr;
      cudaDriverEntryPointQueryResult found{};
      if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found) !=
              cudaSuccess ||
          found != cudaDriverEntryPointSuccess || !p)
        return false;
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
      return true;
    };
    if (!get("cuDeviceGetAttribute", get_attribute)) return "cuDeviceGetAttribute";
    if (!get("cuMemGetAllocationGranularity", granularity)) return "cuMemGetAllocationGranularity";
    if (!get("cuMemCreate", create)) return "cuMemCreate";
    if (!get("cuMemExportToShareableHandle", export_handle)) return "cuMemExportToShareableHandle";
    if (!get("cuMemImportFromShareableHandle", import_handle))
      return "cuMemImportFromShareableHandle";
    if (!get("cuMemAddressReserve", reserve)) return "cuMemAddressReserve";
    if (!get("cuMemMap", map)) return "cuMemMap";
    if (!get("cuMemSetAccess", set_access)) return "cuMemSetAccess";
    if (!get("cuMemUnmap", unmap)) return "cuMemUnmap";
    if (!get("cuMemRelease", release)) return "cuMemRelease";
    if (!get("cuMemAddressFree", free_address)) return "cuMemAddressFree";
    return {};
  }

  // Maps `handle` (bytes, a multiple of the granularity) read-write for device 0 at a fresh
  // address; 0 and `*error` set on failure.
  CUdeviceptr map_read_write(CUmemGenericAllocationHandle handle, size_t bytes,
                             std::string* error) {
    CUdeviceptr ptr = 0;
    if (CUresult r = reserve(&ptr, bytes, 0, 0, 0); r != CUDA_SUCCESS) {
      *error = "cuMemAddressReserve: " + std::to_string(r);
      return 0;
    }
    if (CUresult r = map(ptr, bytes, 0, handle, 0); r != CUDA_SUCCESS) {
      *error = "cuMemMap: " + std::to_string(r);
      return 0;
    }
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (CUresult r = set_access(ptr, bytes, &access, 1); r != CUDA_SUCCESS) {
      *error = "cuMemSetAccess: " + std::to_string(r);
      return 0;
    }
    return ptr;
  }
};

}  // namespace atrex::testing
