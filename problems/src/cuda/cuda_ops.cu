#include "atrex/problems/cuda_ops.h"

#include <cmath>
#include <memory>

#include "../ops/generate.h"
#include "atrex/problems/cuda_status.h"
#include "cuda_exec.cuh"

namespace atrex::problems::cuda {
namespace {

const CudaRefTable& references() {
  static const CudaRefTable kRefs = [] {
    CudaRefTable t;
    add_norm_cuda(t);
    add_activation_cuda(t);
    add_quant_norm_cuda(t);
    add_moe_gemm_cuda(t);
    add_attention_cuda(t);
    add_rope_conv_delta_cuda(t);
    return t;
  }();
  return kRefs;
}

}  // namespace

Status generate_input(const ResolvedShape& shape, size_t index, uint64_t seed, void* device_data,
                      void* stream, int scale_exponent) {
  const TensorSpec& spec = shape.def->inputs[index];
  if (spec.generate) {  // structured inputs are drawn on the device when they can be, else on the
                        // host and copied
    ATREX_ASSIGN_OR_RETURN(const bool on_device,
                           generate_input_on_device(shape, index, seed, device_data,
                                                    static_cast<cudaStream_t>(stream)));
    if (on_device) return ok();
    // Left uninitialised: every structured generator writes each byte of its tensor, and
    // zero-filling a multi-GB fp8 weight first would cost a pass of its own.
    const size_t bytes = shape.inputs[index].bytes();
    std::unique_ptr<uint8_t[]> host(new uint8_t[bytes]);
    spec.generate(shape, index, seed, host.get());
    ATREX_TRY(cuda_status(cudaMemcpyAsync(device_data, host.get(), bytes, cudaMemcpyHostToDevice,
                                          static_cast<cudaStream_t>(stream)),
                          "copying a host-drawn input"));
    return cuda_status(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  }
  const Distribution& d = spec.distribution;
  GenerateFn f{d.kind,
               static_cast<float>(d.scale),
               static_cast<float>(d.offset),
               d.lo,
               d.hi,
               gen_dtype(spec.dtype),
               device_data,
               seed,
               input_stream_id(index),
               std::ldexp(1.0f, scale_exponent)};
  CudaExec{static_cast<cudaStream_t>(stream)}.for_each(shape.inputs[index].numel(), f);
  return cuda_last_launch("input generator");
}

Status reference(const ResolvedShape& shape, std::span<const void* const> in,
                 std::span<void* const> out, void* stream) {
  auto it = references().find(shape.def->name);
  if (it == references().end())
    return not_found("no CUDA reference for operator " + shape.def->name);
  it->second(CudaExec{static_cast<cudaStream_t>(stream)}, shape, in.data(), out.data());
  return cuda_last_launch("reference of " + shape.def->name);
}

}  // namespace atrex::problems::cuda
