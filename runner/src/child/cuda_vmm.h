// The CUDA driver API's virtual memory management entry points (cuMemCreate and its kin), reached
// through the runtime (cudaGetDriverEntryPointByVersion) so that nothing links libcuda.so.1: the
// build machines have the toolkit's stub only, and the test binaries run there to be listed.
// Device memory shared between the evaluation child and its judge (the judge's device arena:
// protocol/arena_handoff.h; cuda_child.cpp) and its probe (gpu_vmm_share_test.cpp,
// vmm_share_probe.cpp). Source: CUDA Driver API, "Virtual Memory Management"; CUDA Runtime API,
// "Driver Entry Point Access".
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

namespace atrex::runner {

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

  // Initialises the runtime on `device` and looks every entry point up; "" when all were found,
  // else the name of the first that was not (or the runtime's error).
  std::string load(int device = 0) {
    device_ = device;
    if (cudaSetDevice(device) != cudaSuccess || cudaFree(nullptr) != cudaSuccess)
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

  // Maps `handle` (bytes, a multiple of the granularity) read-write for the device at a fresh
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
    access.location.id = device_;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (CUresult r = set_access(ptr, bytes, &access, 1); r != CUDA_SUCCESS) {
      *error = "cuMemSetAccess: " + std::to_string(r);
      return 0;
    }
    return ptr;
  }

  // At least `bytes` (rounded up to the granularity) of device memory, mapped read-write here,
  // with a POSIX file descriptor another process imports it by (import_map). `*error` names the
  // failing call (with its CUresult) when the result is 0.
  struct Exported {
    CUdeviceptr ptr = 0;
    size_t bytes = 0;
    int fd = -1;
  };
  Exported create_exported(size_t bytes, std::string* error) {
    int supported = 0;
    if (get_attribute(&supported, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                      device_) != CUDA_SUCCESS ||
        !supported) {
      *error = "the device cannot export allocations as file descriptors";
      return {};
    }
    CUmemAllocationProp prop{};  // device memory exportable as a POSIX file descriptor
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device_;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t unit = 0;
    if (CUresult r = granularity(&unit, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        r != CUDA_SUCCESS) {
      *error = "cuMemGetAllocationGranularity: " + std::to_string(r);
      return {};
    }
    Exported out;
    out.bytes = (std::max<size_t>(bytes, 1) + unit - 1) / unit * unit;
    CUmemGenericAllocationHandle handle = 0;
    if (CUresult r = create(&handle, out.bytes, &prop, 0); r != CUDA_SUCCESS) {
      *error = "cuMemCreate: " + std::to_string(r);
      return {};
    }
    if (CUresult r = export_handle(&out.fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        r != CUDA_SUCCESS) {
      (void)release(handle);
      *error = "cuMemExportToShareableHandle: " + std::to_string(r);
      return {};
    }
    out.ptr = map_read_write(handle, out.bytes, error);
    // The mapping keeps the memory; the descriptor keeps it for the importer.
    (void)release(handle);
    if (!out.ptr) return {};
    return out;
  }

  // Maps the allocation behind `fd` (`bytes`, as exported) read-write here; 0 and `*error` set
  // on failure.
  CUdeviceptr import_map(int fd, size_t bytes, std::string* error) {
    CUmemGenericAllocationHandle handle = 0;
    if (CUresult r = import_handle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        r != CUDA_SUCCESS) {
      *error = "cuMemImportFromShareableHandle: " + std::to_string(r);
      return 0;
    }
    const CUdeviceptr ptr = map_read_write(handle, bytes, error);
    (void)release(handle);
    return ptr;
  }

 private:
  int device_ = 0;
};

}  // namespace atrex::runner
