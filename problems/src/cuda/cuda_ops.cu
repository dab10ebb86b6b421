#include "atrex/problems/cuda_ops.h"

#include <algorithm>
#include <map>
#include <string_view>

#include <cuda_runtime.h>

#include "../ops/activation_ops.h"
#include "../ops/generate.h"
#include "../ops/norm_ops.h"

namespace atrex::problems::cuda {
namespace {

template <class F>
__global__ void for_each_kernel(F f, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) f(i);
}

// Runs a host/device functor f(i) for i in [0, n) on the GPU.
struct CudaExec {
  cudaStream_t stream;
  template <class F>
  void for_each(int64_t n, const F& f) const {
    if (n <= 0) return;
    constexpr int kThreads = 128;
    const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 20);
    for_each_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(f, n);
  }
};

using CudaRefFn = void (*)(const CudaExec&, const ResolvedShape&, const void* const*, void* const*);

const std::map<std::string_view, CudaRefFn>& references() {
  static const std::map<std::string_view, CudaRefFn> kRefs = {
      {"rms_norm", &ops::rms_norm_reference<CudaExec>},
      {"fused_add_rms_norm", &ops::fused_add_rms_norm_reference<CudaExec>},
      {"silu_and_mul", &ops::silu_and_mul_reference<CudaExec>},
      {"l2_norm", &ops::l2_norm_reference<CudaExec>},
      {"moe_sum_reduce", &ops::moe_sum_reduce_reference<CudaExec>},
  };
  return kRefs;
}

int gen_dtype(DType d) {
  switch (d) {
    case DType::kBF16: return kGenBF16;
    case DType::kF16: return kGenF16;
    case DType::kF32: return kGenF32;
    case DType::kF64: return kGenF64;
    case DType::kI32: return kGenI32;
    case DType::kI64: return kGenI64;
    default: return -1;
  }
}

std::string last_error() {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

}  // namespace

std::string generate_input(const ResolvedShape& shape, size_t index, uint64_t seed, void* device_data, void* stream) {
  const TensorSpec& spec = shape.def->inputs[index];
  const Distribution& d = spec.distribution;
  GenerateFn f{d.kind, static_cast<float>(d.scale), static_cast<float>(d.offset), d.lo, d.hi,
               gen_dtype(spec.dtype), device_data, seed, input_stream_id(index)};
  CudaExec{static_cast<cudaStream_t>(stream)}.for_each(shape.inputs[index].numel(), f);
  return last_error();
}

std::string reference(const ResolvedShape& shape, std::span<const void* const> in, std::span<void* const> out,
                      void* stream) {
  auto it = references().find(shape.def->name);
  if (it == references().end()) return "no CUDA reference for operator " + shape.def->name;
  it->second(CudaExec{static_cast<cudaStream_t>(stream)}, shape, in.data(), out.data());
  return last_error();
}

}  // namespace atrex::problems::cuda
