// atrex-template: warp_pipeline
// atrex-description: persistent warps with an asynchronous row pipeline: a grid sized to the SMs, each warp walks rows with a grid stride and keeps STAGES rows of x and residual in flight through cp.async into its own shared-memory ring (the next rows load while the current one is reduced); v = bf16(x + residual) is written to residual_out and back over x in the ring, then the sum of squares, the amax of the doubly rounded normed values and the quantised store are passes over the row in shared memory with shuffle-only reductions; no block barrier, no register cache of the row
// atrex-param: WARPS = 4 | 2, 4
// atrex-param: STAGES = 2 | 2, 3
#ifndef WARPS
#define WARPS 4
#endif
#ifndef STAGES
#define STAGES 2
#endif

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(WARPS >= 1 && WARPS <= 16, "WARPS");
static_assert(STAGES >= 2 && STAGES <= 4, "STAGES");

namespace {

using atrex::cand::aligned;
using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::kF32;
using atrex::cand::kFP8E4M3;

constexpr int kMaxSmem = 200 * 1024;

__device__ __forceinline__ float bf2f(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_wait_stages() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 1));
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// The 8 bf16 values of a 16-byte word as floats.
__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ uint16_t f2bf(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
__device__ __forceinline__ float round_bf16(float f) {
  return __bfloat162float(__float2bfloat16_rn(f));
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// 8 floats as bf16 in one 16-byte word.
__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  uint32_t o[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    o[i] = *reinterpret_cast<const uint32_t*>(&v);
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// hidden % 8 == 0, bf16 rows 16-byte and q rows 8-byte aligned (checked by the host). Dynamic
// shared memory: WARPS x STAGES x (x row, residual row) of hidden bf16. Rows past the end are
// committed as empty groups so the wait count stays uniform.
__global__ void __launch_bounds__(WARPS * 32)
    pipeline_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ res,
                    const uint16_t* __restrict__ w, uint8_t* __restrict__ q, float* __restrict__ scale,
                    uint16_t* __restrict__ res_out, int64_t rows, int hidden, float eps) {
  extern __shared__ __align__(16) uint4 ring[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int packs = hidden / 8;
  uint4* mine = ring + static_cast<int64_t>(warp) * STAGES * 2 * packs;  // [slot][x | residual][packs]
  const int64_t first = static_cast<int64_t>(blockIdx.x) * WARPS + warp;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * WARPS;
  auto issue = [&](int64_t row, int slot) {
    if (row < rows) {
      const uint4* xs = reinterpret_cast<const uint4*>(x + row * hidden);
      const uint4* rs = reinterpret_cast<const uint4*>(res + row * hidden);
      for (int p = lane; p < packs; p += 32) {
        cp_async16(mine + (slot * 2) * packs + p, xs + p);
        cp_async16(mine + (slot * 2 + 1) * packs + p, rs + p);
      }
    }
    cp_commit();
  };
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) issue(first + st * stride, st);
  const float inv_h = 1.0f / static_cast<float>(hidden);
  int slot = 0;
  for (int64_t row = first; row < rows; row += stride) {
    issue(row + (STAGES - 1) * stride, (slot + STAGES - 1) % STAGES);
    cp_wait_stages();
    __syncwarp();
    uint4* vb = mine + (slot * 2) * packs;
    const uint4* rb = vb + packs;
    uint4* ro = reinterpret_cast<uint4*>(res_out + row * hidden);
    float ss = 0.f;
    for (int p = lane; p < packs; p += 32) {
      float a[8], r[8];
      unpack8(vb[p], a);
      unpack8(rb[p], r);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        a[e] = round_bf16(a[e] + r[e]);
        ss = fmaf(a[e], a[e], ss);
      }
      const uint4 v = pack8(a);
      vb[p] = v;  // v replaces x in the ring
      ro[p] = v;
    }
    const float rstd = 1.0f / sqrtf(warp_sum(ss) * inv_h + eps);
    float amax = 0.f;
    for (int p = lane; p < packs; p += 32) {
      float a[8], wf[8];
      unpack8(vb[p], a);
      unpack8(__ldg(reinterpret_cast<const uint4*>(w) + p), wf);
#pragma unroll
      for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(round_bf16(round_bf16(a[e] * rstd) * wf[e])));
    }
    amax = warp_max(amax);
    float sc = amax * (1.0f / 240.0f);
    if (sc == 0.f) sc = 1.f;
    uint2* qrow = reinterpret_cast<uint2*>(q + row * hidden);
    for (int p = lane; p < packs; p += 32) {
      float a[8], wf[8];
      unpack8(vb[p], a);
      unpack8(__ldg(reinterpret_cast<const uint4*>(w) + p), wf);
      uint32_t o[2] = {0u, 0u};
#pragma unroll
      for (int e = 0; e < 8; e += 2) {
        const float2 f = make_float2(__fdiv_rn(round_bf16(round_bf16(a[e] * rstd) * wf[e]), sc),
                                     __fdiv_rn(round_bf16(round_bf16(a[e + 1] * rstd) * wf[e + 1]), sc));
        const uint32_t two = __nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, __NV_E4M3);
        o[e >> 2] |= two << ((e & 2) * 8);
      }
      qrow[p] = make_uint2(o[0], o[1]);
    }
    if (lane == 0) scale[row] = sc;
    __syncwarp();  // this slot is refilled STAGES - 1 rows from now
    slot = (slot + 1) % STAGES;
  }
  asm volatile("cp.async.wait_group 0;\n" ::);
}

// Any hidden, any alignment: one warp per row (grid stride), passes over global memory.
__global__ void scalar_kernel(const uint16_t* x, const uint16_t* res, const uint16_t* w, uint8_t* q,
                              float* scale, uint16_t* res_out, int64_t rows, int hidden, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  const float inv_h = 1.0f / static_cast<float>(hidden);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows;
       row += warps) {
    const int64_t base = row * hidden;
    float ss = 0.f;
    for (int h = lane; h < hidden; h += 32) {
      const uint16_t v = f2bf(bf2f(x[base + h]) + bf2f(res[base + h]));
      res_out[base + h] = v;
      ss = fmaf(bf2f(v), bf2f(v), ss);
    }
    const float rstd = 1.0f / sqrtf(warp_sum(ss) * inv_h + eps);
    auto normed = [&](int h) {
      const float v = round_bf16(bf2f(x[base + h]) + bf2f(res[base + h]));
      return round_bf16(round_bf16(v * rstd) * bf2f(w[h]));
    };
    float amax = 0.f;
    for (int h = lane; h < hidden; h += 32) amax = fmaxf(amax, fabsf(normed(h)));
    amax = warp_max(amax);
    float sc = amax * (1.0f / 240.0f);
    if (sc == 0.f) sc = 1.f;
    for (int h = lane; h < hidden; h += 32)
      q[base + h] = __nv_cvt_float_to_fp8(__fdiv_rn(normed(h), sc), __NV_SATFINITE, __NV_E4M3);
    if (lane == 0) scale[row] = sc;
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// x, residual [T, H], weight [H] (bf16) -> quantized [T, H] e4m3, scale [T, 1] fp32,
// residual_out [T, H] bf16.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "fused_rmsnorm_quant");
  const DLTensor* x = ts.input("x", kBF16, 2);
  const DLTensor* r = ts.input("residual", kBF16, 2);
  const DLTensor* w = ts.input("weight", kBF16, 1);
  const DLTensor* qt = ts.output("quantized", kFP8E4M3, 2);
  const DLTensor* sct = ts.output("scale", kF32, 2);
  const DLTensor* ro = ts.output("residual_out", kBF16, 2);
  ts.same_dims(x, r);
  ts.same_dims(x, qt);
  ts.same_dims(x, ro);
  if (!ts.ok()) return ts.failed();
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  if (w->shape[0] != hidden) return fail("fused_rmsnorm_quant: weight must be [hidden_size]");
  if (sct->shape[0] != rows || sct->shape[1] != 1) return fail("fused_rmsnorm_quant: scale must be [T, 1]");
  if (rows > 0x7fffffff || hidden > 0x7fffffff) return fail("fused_rmsnorm_quant: too large");
  if (rows == 0 || hidden == 0) return 0;
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-5));
  const auto* xp = static_cast<const uint16_t*>(x->data);
  const auto* rp = static_cast<const uint16_t*>(r->data);
  const auto* wp = static_cast<const uint16_t*>(w->data);
  auto* qp = static_cast<uint8_t*>(qt->data);
  auto* sp = static_cast<float*>(sct->data);
  auto* op = static_cast<uint16_t*>(ro->data);
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  static int sms = 0;  // once per process
  if (sms == 0) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      sms = 132;
  }
  const int64_t bytes = static_cast<int64_t>(WARPS) * STAGES * 2 * hidden * 2;
  const bool fits = hidden % 8 == 0 && aligned(xp, 16) && aligned(rp, 16) && aligned(wp, 16) &&
                    aligned(op, 16) && aligned(qp, 8);
  const int h = static_cast<int>(hidden);
  if (fits && bytes <= kMaxSmem) {
    static int64_t attr_bytes = 0;
    if (bytes > attr_bytes) {
      const cudaError_t e = cudaFuncSetAttribute(pipeline_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(bytes));
      if (e != cudaSuccess) return fail("fused_rmsnorm_quant: %s", cudaGetErrorString(e));
      attr_bytes = bytes;
    }
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, pipeline_kernel, WARPS * 32, static_cast<size_t>(bytes)) !=
            cudaSuccess ||
        per_sm < 1)
      per_sm = 1;
    const int64_t need = (rows + WARPS - 1) / WARPS;
    const int64_t grid = need < static_cast<int64_t>(sms) * per_sm ? need : static_cast<int64_t>(sms) * per_sm;
    pipeline_kernel<<<static_cast<unsigned>(grid), WARPS * 32, static_cast<size_t>(bytes), s>>>(xp, rp, wp, qp, sp, op,
                                                                                                 rows, h, eps);
  } else {
    const int64_t blocks = (rows + 7) / 8;
    scalar_kernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), 256, 0, s>>>(xp, rp, wp, qp, sp, op, rows, h, eps);
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("fused_rmsnorm_quant: %s", cudaGetErrorString(err));
}
