// atrex-template: mma_tile
// atrex-description: bf16 tensor cores (mma.sync m16n8k16 -> f32): BM x BN block tiles over 8 warps, 64-element K tiles staged by cp.async over STAGES buffers in XOR-swizzled shared memory and read with ldmatrix.x4; the epilogue adds the bias, rounds the gate to bf16, applies the sigmoid and multiplies by post_mul_mat in registers (paired bf16 loads and stores), so the gate never reaches memory
// atrex-param: BM = 128 | 64, 128
// atrex-param: BN = 128 | 64, 128
// atrex-param: WARPS_M = 2 | 2, 4
// atrex-param: STAGES = 4 | 3, 4
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef WARPS_M
#define WARPS_M 2
#endif
#ifndef STAGES
#define STAGES 4
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

// out[t, n] = bf16(sigmoid(bf16(x[t] . w[n] + bias[n])) * post[t, n]): x [T, H] and w [N, H]
// bf16 (H contiguous in both, so w is the "col" operand of mma as stored), fp32 accumulation.
namespace {

using atrex::cand::aligned;
using atrex::cand::fail;
using atrex::cand::kBF16;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBK = 64;          // bf16 elements of K per stage
constexpr int kRowBytes = 128;   // one 128-byte row per tile row and stage
constexpr int WARPS_N = kWarps / WARPS_M;
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
constexpr int MT = WM / 16, NT = WN / 8;  // m16 and n8 tiles per warp
constexpr int kStageBytes = (BM + BN) * kRowBytes;

static_assert(kWarps % WARPS_M == 0, "WARPS_M must divide the 8 warps");
static_assert(WM % 16 == 0 && WN % 16 == 0 && MT >= 1 && NT >= 2, "warp tile");
static_assert((BM * kRowBytes / 16) % kThreads == 0 && (BN * kRowBytes / 16) % kThreads == 0,
              "copy split");
static_assert(STAGES >= 2, "STAGES");

// Byte offset of (row, byte) in a tile of 128-byte rows whose 16-byte chunks are XOR-swizzled by
// the row's low 3 bits: the 8 rows one ldmatrix phase reads land in 8 different bank groups.
__device__ __forceinline__ uint32_t swz(int row, int byte) {
  return static_cast<uint32_t>(row * kRowBytes + ((((byte >> 4) ^ row) & 7) << 4) + (byte & 15));
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;  // src-size 0: the 16 bytes are zero-filled (rows past T or N)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// D = A (16x16 bf16, row) * B (16x8 bf16, col) + D, fp32.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One stage: BM rows of x and BN rows of w, 64 elements of K each, as 16-byte chunks.
__device__ __forceinline__ void load_stage(uint32_t stage, const uint16_t* x, const uint16_t* w,
                                           int64_t t, int64_t n, int64_t k, int64_t m0,
                                           int64_t n0, int64_t k0) {
#pragma unroll
  for (int i = 0; i < BM * kRowBytes / 16 / kThreads; ++i) {
    const int idx = threadIdx.x + i * kThreads, row = idx >> 3, chunk = idx & 7;
    const int64_t r = m0 + row;
    const bool ok = r < t;
    cp_async16(stage + swz(row, chunk * 16), x + (ok ? r : 0) * k + k0 + chunk * 8, ok);
  }
#pragma unroll
  for (int i = 0; i < BN * kRowBytes / 16 / kThreads; ++i) {
    const int idx = threadIdx.x + i * kThreads, row = idx >> 3, chunk = idx & 7;
    const int64_t c = n0 + row;
    const bool ok = c < n;
    cp_async16(stage + BM * kRowBytes + swz(row, chunk * 16), w + (ok ? c : 0) * k + k0 + chunk * 8, ok);
  }
}

__device__ __forceinline__ float bf2f(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
__device__ __forceinline__ float round_bf16(float f) {
  return __bfloat162float(__float2bfloat16_rn(f));
}
// bf16(sigmoid(bf16(acc + bias)) * post).
__device__ __forceinline__ float gate_mul(float acc, float bias, float post) {
  const float g = round_bf16(acc + bias);
  return (1.0f / (1.0f + expf(-g))) * post;
}

__global__ void __launch_bounds__(kThreads, 1)
    mma_tile_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,
                    const uint16_t* __restrict__ bias, const uint16_t* __restrict__ post,
                    uint16_t* __restrict__ out, int64_t t, int64_t n, int64_t k) {
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM, n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
  const int g = lane >> 2, q = lane & 3;
  const int64_t ktiles = k / kBK;
  // ldmatrix lane roles: A matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15) in a0..a3 order; B pairs
  // (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15).
  const int a_row = lane & 15, a_chunk = lane >> 4;
  const int b_row = (lane & 7) + ((lane >> 4) << 3), b_chunk = (lane >> 3) & 1;

  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ktiles) load_stage(sbase + s * kStageBytes, x, w, t, n, k, m0, n0, s * kBK);
    cp_commit();
  }

  for (int64_t kt = 0; kt < ktiles; ++kt) {
    cp_wait<STAGES - 2>();
    __syncthreads();
    // Refill the buffer every thread finished reading in the previous iteration.
    const int64_t next = kt + STAGES - 1;
    if (next < ktiles)
      load_stage(sbase + static_cast<uint32_t>(next % STAGES) * kStageBytes, x, w, t, n, k, m0, n0, next * kBK);
    cp_commit();

    const uint32_t sa = sbase + static_cast<uint32_t>(kt % STAGES) * kStageBytes;
    const uint32_t sb = sa + BM * kRowBytes;
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      uint32_t af[MT][4], bf[NT / 2][4];
#pragma unroll
      for (int i = 0; i < MT; ++i)
        ldmatrix_x4(af[i], sa + swz(wm + i * 16 + a_row, ks * 32 + a_chunk * 16));
#pragma unroll
      for (int j = 0; j < NT / 2; ++j)
        ldmatrix_x4(bf[j], sb + swz(wn + j * 16 + b_row, ks * 32 + b_chunk * 16));
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
          mma_bf16(acc[i][j], af[i], bf[j >> 1][(j & 1) * 2], bf[j >> 1][(j & 1) * 2 + 1]);
    }
  }
  cp_wait<0>();

  // Fragment rows g and g + 8, columns 2q and 2q + 1 of each m16 x n8 tile.
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int64_t c = n0 + wn + j * 8 + q * 2;
    if (c >= n) continue;
    const bool pair = c + 1 < n;
    const float b0 = bf2f(bias[c]), b1 = pair ? bf2f(bias[c + 1]) : 0.f;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t r = m0 + wm + i * 16 + g + h * 8;
        if (r >= t) continue;
        const int64_t off = r * n + c;
        if (pair && (off & 1) == 0) {
          const __nv_bfloat162 p = *reinterpret_cast<const __nv_bfloat162*>(post + off);
          const __nv_bfloat162 o = __floats2bfloat162_rn(
              gate_mul(acc[i][j][h * 2], b0, __low2float(p)),
              gate_mul(acc[i][j][h * 2 + 1], b1, __high2float(p)));
          *reinterpret_cast<__nv_bfloat162*>(out + off) = o;
        } else {
          out[off] = __bfloat16_as_ushort(__float2bfloat16_rn(gate_mul(acc[i][j][h * 2], b0, bf2f(post[off]))));
          if (pair)
            out[off + 1] = __bfloat16_as_ushort(
                __float2bfloat16_rn(gate_mul(acc[i][j][h * 2 + 1], b1, bf2f(post[off + 1]))));
        }
      }
  }
}

// Any H, any alignment: one warp per output, lanes striding over K, a shuffle sum.
__global__ void scalar_kernel(const uint16_t* x, const uint16_t* w, const uint16_t* bias,
                              const uint16_t* post, uint16_t* out, int64_t t, int64_t n, int64_t k) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); o < t * n;
       o += warps) {
    const int64_t r = o / n, c = o % n;
    float s = 0.f;
    for (int64_t i = lane; i < k; i += 32) s = fmaf(bf2f(x[r * k + i]), bf2f(w[c * k + i]), s);
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) s += __shfl_xor_sync(0xffffffffu, s, d);
    if (lane == 0) out[o] = __bfloat16_as_ushort(__float2bfloat16_rn(gate_mul(s, bf2f(bias[c]), bf2f(post[o]))));
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// hidden_states [T, H], weight [N, H], bias [N], post_mul_mat [T, N] (bf16) -> out [T, N] bf16.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "linear_sigmoid_mul");
  const DLTensor* x = ts.input("hidden_states", kBF16, 2);
  const DLTensor* w = ts.input("weight", kBF16, 2);
  const DLTensor* b = ts.input("bias", kBF16, 1);
  const DLTensor* p = ts.input("post_mul_mat", kBF16, 2);
  const DLTensor* o = ts.output("out", kBF16, 2);
  ts.same_dims(p, o);
  if (!ts.ok() || !ts.dim_is(w, 1, x->shape[1]) || !ts.dim_is(b, 0, w->shape[0]) ||
      !ts.dim_is(o, 0, x->shape[0]) || !ts.dim_is(o, 1, w->shape[0]))
    return ts.failed();
  const int64_t t = x->shape[0], k = x->shape[1], n = w->shape[0];
  if (t == 0 || n == 0) return 0;
  const auto* xp = static_cast<const uint16_t*>(x->data);
  const auto* wp = static_cast<const uint16_t*>(w->data);
  const auto* bp = static_cast<const uint16_t*>(b->data);
  const auto* pp = static_cast<const uint16_t*>(p->data);
  auto* op = static_cast<uint16_t*>(o->data);
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  const int64_t gy = (t + BM - 1) / BM;
  if (k % kBK == 0 && k > 0 && aligned(xp, 16) && aligned(wp, 16) && gy <= 65535) {
    const int bytes = STAGES * kStageBytes;
    static bool attr_set = false;  // once per process: the dynamic shared memory beyond 48 KiB
    if (!attr_set) {
      const cudaError_t e =
          cudaFuncSetAttribute(mma_tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      if (e != cudaSuccess) return fail("linear_sigmoid_mul: %s", cudaGetErrorString(e));
      attr_set = true;
    }
    const dim3 grid(static_cast<unsigned>((n + BN - 1) / BN), static_cast<unsigned>(gy));
    mma_tile_kernel<<<grid, kThreads, bytes, s>>>(xp, wp, bp, pp, op, t, n, k);
  } else {
    const int64_t blocks = (t * n + 7) / 8;
    scalar_kernel<<<static_cast<unsigned>(blocks < (1 << 16) ? blocks : (1 << 16)), 256, 0, s>>>(
        xp, wp, bp, pp, op, t, n, k);
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("linear_sigmoid_mul: %s", cudaGetErrorString(err));
}
