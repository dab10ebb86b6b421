// Device generators of the large structured moe_gemm inputs, bit-identical to the host
// generators of moe_gemm_hooks.h (the CPU backend keeps those): the fp8 block-quantised tensors
// and their scales (fp8_blockscale_fused_moe, block_scaled_mm: BlockQuantSource) and fused_moe's
// bf16 weights (GenerateFn). The block quantisation runs the host's float operations in the same
// order with explicitly rounded device intrinsics (no FMA contraction; IEEE division), takes the
// Box-Muller radius and angle from tables of the host's own libm results (box_muller.h), and its
// block max is exact in any order. `deploy/gpu/run-gpu-checks.sh dumpcmp` cmps both backends.
#include <string>
#include <vector>

#include "../ops/box_muller.h"
#include "../ops/moe_gemm_sources.h"
#include "atrex/problems/cuda_status.h"
#include "cuda_exec.cuh"

namespace atrex::problems::cuda {
namespace {

// The Box-Muller tables in device memory, built and copied once per process (~400 MB).
struct DeviceTables {
  ops::BoxMullerTables tables{nullptr, nullptr};
  Status status;
};
const DeviceTables& device_tables() {
  static const DeviceTables kTables = [] {
    DeviceTables d;
    std::vector<float> radius, angle;
    ops::build_box_muller_tables(radius, angle);
    float* r = nullptr;
    float* a = nullptr;
    cudaError_t e = cudaMalloc(&r, radius.size() * sizeof(float));
    if (e == cudaSuccess) e = cudaMalloc(&a, angle.size() * sizeof(float));
    if (e == cudaSuccess)
      e = cudaMemcpy(r, radius.data(), radius.size() * sizeof(float), cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
      e = cudaMemcpy(a, angle.data(), angle.size() * sizeof(float), cudaMemcpyHostToDevice);
    d.status = cuda_status(e, "copying the Box-Muller tables to the device");
    d.tables = {r, a};
    return d;
  }();
  return kTables;
}

// std::max and std::clamp as the host generator calls them (operand order matters for NaN and
// signed zeros only, which the generator never produces).
__device__ __forceinline__ float max_of(float a, float b) { return (a < b) ? b : a; }
__device__ __forceinline__ float clamp_fp8(float v) {
  return (v < -ops::kFp8Max) ? -ops::kFp8Max : (ops::kFp8Max < v) ? ops::kFp8Max : v;
}

// BlockQuantSource::draw's per-element value: randn, then bf16 rounding and the multiplier.
__device__ __forceinline__ float finish_value(const ops::BlockQuantSource& src, float x) {
  if (src.bf16) x = num::round_bf16(x);
  if (src.mul != 1.0f) x = num::round_bf16(__fmul_rn(x, src.mul));
  return x;
}
__device__ __forceinline__ float normal_at(const ops::BoxMullerTables& t,
                                           const ops::BlockQuantSource& src, uint64_t i) {
  float a, b;
  t.pair(ops::counter_hash(src.seed, src.stream, i / 2), a, b);
  return (i & 1) ? b : a;
}

// Elements l and l + 1 (row-major within block (br, bc)): their flat indices and values. When
// the rows and blocks have even widths, l even shares one hash with l + 1 (normal_pair).
// Returns false when l + 1 lies past the block.
__device__ __forceinline__ bool draw_two(const ops::BoxMullerTables& t,
                                         const ops::BlockQuantSource& src, int64_t br, int64_t bc,
                                         int64_t l, int64_t per, int64_t idx[2], float x[2]) {
  const bool two = l + 1 < per;
  for (int j = 0; j < (two ? 2 : 1); ++j) {
    const int64_t r = (l + j) / src.block_c, c = (l + j) % src.block_c;
    idx[j] = (br * src.block_r + r) * src.cols + bc * src.block_c + c;
  }
  if (two && idx[0] % 2 == 0 && idx[1] == idx[0] + 1) {
    t.pair(ops::counter_hash(src.seed, src.stream, static_cast<uint64_t>(idx[0] / 2)), x[0], x[1]);
  } else {
    x[0] = normal_at(t, src, static_cast<uint64_t>(idx[0]));
    if (two) x[1] = normal_at(t, src, static_cast<uint64_t>(idx[1]));
  }
  x[0] = finish_value(src, x[0]);
  if (two) x[1] = finish_value(src, x[1]);
  return two;
}

__device__ float block_max(float m, float* red) {
  for (int o = 16; o > 0; o >>= 1) m = max_of(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
  __syncthreads();
  float r = red[0];
  for (unsigned w = 1; w < blockDim.x / 32; ++w) r = max_of(r, red[w]);
  __syncthreads();  // red is reused by the next block
  return r;
}

// One CUDA block per quantisation block (grid-stride): pass 1 the block's max and scale, pass 2
// (when q is set) the fp8 values, recomputed rather than stored. blockDim: a multiple of 32.
__global__ void __launch_bounds__(256)
    block_quant_kernel(ops::BlockQuantSource src, ops::BoxMullerTables t, uint8_t* q,
                       float* scales) {
  __shared__ float red[8];
  const int64_t nbc = src.cols / src.block_c, nblocks = src.rows / src.block_r * nbc;
  const int64_t per = src.block_r * src.block_c;
  int64_t idx[2];
  float x[2];
  for (int64_t b = blockIdx.x; b < nblocks; b += gridDim.x) {
    const int64_t br = b / nbc, bc = b % nbc;
    float m = src.signed_max ? -INFINITY : 0.0f;
    for (int64_t l = 2 * static_cast<int64_t>(threadIdx.x); l < per;
         l += 2 * static_cast<int64_t>(blockDim.x)) {
      const bool two = draw_two(t, src, br, bc, l, per, idx, x);
      for (int j = 0; j < (two ? 2 : 1); ++j)
        m = src.signed_max ? max_of(m, x[j]) : max_of(m, fabsf(x[j]));
    }
    m = block_max(m, red);
    const float s = max_of(__fdiv_rn(max_of(m, src.amax_floor), ops::kFp8Max), src.scale_floor);
    if (scales && threadIdx.x == 0) scales[b] = s;
    if (!q) continue;
    for (int64_t l = 2 * static_cast<int64_t>(threadIdx.x); l < per;
         l += 2 * static_cast<int64_t>(blockDim.x)) {
      const bool two = draw_two(t, src, br, bc, l, per, idx, x);
      for (int j = 0; j < (two ? 2 : 1); ++j)
        q[idx[j]] = num::float_to_fp8e4m3(clamp_fp8(__fdiv_rn(x[j], s)));
    }
  }
}

Status block_quant_on_device(const ops::BlockQuantSource& src, uint8_t* q, float* scales,
                             cudaStream_t stream) {
  const DeviceTables& dt = device_tables();
  ATREX_TRY(dt.status);
  const int64_t nblocks = src.blocks();
  if (nblocks <= 0) return ok();
  const int64_t per = src.block_r * src.block_c;
  const int threads = static_cast<int>(std::clamp<int64_t>((per / 2 + 31) / 32 * 32, 32, 256));
  const auto grid = static_cast<unsigned>(std::min<int64_t>(nblocks, int64_t{1} << 24));
  block_quant_kernel<<<grid, threads, 0, stream>>>(src, dt.tables, q, scales);
  return cuda_last_launch("block quantisation generator");
}

}  // namespace

Result<bool> generate_input_on_device(const ResolvedShape& shape, size_t index, uint64_t seed,
                                      void* data, cudaStream_t stream) {
  const std::string& op = shape.def->name;
  if (op == "fp8_blockscale_fused_moe" && index <= 2) {
    ATREX_TRY(block_quant_on_device(ops::fp8_moe_source(shape, index, seed),
                                    static_cast<uint8_t*>(data), nullptr, stream));
  } else if (op == "fp8_blockscale_fused_moe" && index >= 5 && index <= 7) {
    ATREX_TRY(block_quant_on_device(ops::fp8_moe_source(shape, index - 5, seed), nullptr,
                                    static_cast<float*>(data), stream));
  } else if (op == "block_scaled_mm" && index <= 1) {
    ATREX_TRY(block_quant_on_device(ops::block_mm_source(shape, index, seed),
                                    static_cast<uint8_t*>(data), nullptr, stream));
  } else if (op == "block_scaled_mm" && index <= 3) {
    ATREX_TRY(block_quant_on_device(ops::block_mm_source(shape, index - 2, seed), nullptr,
                                    static_cast<float*>(data), stream));
  } else if (op == "fused_moe" && (index == 1 || index == 2)) {
    CudaExec{stream}.for_each(shape.inputs[index].numel(),
                              ops::fused_moe_weight_fn(shape, index, seed, data));
    ATREX_TRY(cuda_last_launch("fused_moe weight generator"));
  } else {
    return false;
  }
  return true;
}

}  // namespace atrex::problems::cuda
