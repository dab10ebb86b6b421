// Reference re-expressed as a cuda candidate: fp8_blockscale_fused_moe, fp32 arithmetic on
// operands dequantised by their block scales:
//   x = fp8(hidden_states) * a_scale[t, h/bk]; W1 = fp8(w1) * fc1_scale[e, r/bn, h/bk];
//   W2 = fp8(w2) * fc2_scale[e, h/bk, n/bn]; act = silu(W1g . x) * (W1u . x); y = W2 . act;
//   out = fp8(sum_j topk_weights[t, j] * y) with torch's cast (rounding past 448 gives NaN).
// The pairs (t, j) are grouped by expert, and both GEMMs run as grouped 64 x 64 shared-memory
// tiles with fp32 accumulation; intermediates live in stream-ordered scratch.
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

__device__ float fp8_to_float(unsigned v) {
  const unsigned e = (v >> 3) & 15u, m = v & 7u;
  const float mag =
      e ? __uint_as_float(((e + 120u) << 23) | (m << 20)) : static_cast<float>(m) * 0.001953125f;
  return (v & 0x80u) ? -mag : mag;
}

// Round to nearest even on the e4m3fn grid (c10's float8_e4m3fn conversion).
__device__ unsigned char float_to_fp8(float f) {
  const unsigned u = __float_as_uint(f), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
  if (a >= 0x43f00000u) return static_cast<unsigned char>(sign | 0x7fu);  // >= 480, inf, NaN
  if (a < 0x3c800000u)
    return static_cast<unsigned char>(sign | __float2uint_rn(__uint_as_float(a) * 512.0f));
  const unsigned r = a + 0x7ffffu + ((a >> 20) & 1u);
  return static_cast<unsigned char>(sign | (((r >> 23) - 120u) << 3) | ((r >> 20) & 7u));
}

// Expert-major routing: count per expert, offsets, then each pair's position (atomics: the order
// within an expert varies, but every output is computed independently of its position).
__global__ void count_kernel(const int32_t* ids, int64_t pairs, int64_t experts, int32_t* count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pairs;
       i += stride) {
    if (ids[i] >= 0 && ids[i] < experts) atomicAdd(&count[ids[i]], 1);
  }
}
__global__ void scan_kernel(const int32_t* count, int64_t experts, int32_t* offset,
                            int32_t* cursor) {
  offset[0] = 0;
  for (int64_t e = 0; e < experts; ++e) {
    cursor[e] = offset[e];
    offset[e + 1] = offset[e] + count[e];
  }
}
__global__ void fill_kernel(const int32_t* ids, int64_t pairs, int64_t experts, int32_t* cursor,
                            int32_t* pair_at) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pairs;
       i += stride) {
    if (ids[i] >= 0 && ids[i] < experts)
      pair_at[atomicAdd(&cursor[ids[i]], 1)] = static_cast<int32_t>(i);
  }
}

constexpr int kTile = 64;   // routed pairs and columns per tile
constexpr int kTileK = 32;  // reduction step

// c[pair, col] = sum_k a(pair, k) * b(e, col, k) for the pairs routed to expert e, in grouped
// 64 x 64 shared-memory tiles (fp32 accumulation). blockIdx.x: slot tile (an upper bound of
// ceil(pairs / 64) + E; tile i is found from the offsets), blockIdx.y: column tile.
template <class A, class B>
__global__ void __launch_bounds__(256)
    grouped_gemm_kernel(const int32_t* offset, int64_t experts, const int32_t* pair_at, A a, B b,
                        int64_t kdim, int64_t ncols, float* c) {
  __shared__ float as[kTileK][kTile + 1];
  __shared__ float bs[kTileK][kTile + 1];
  int64_t e = 0, s0 = 0, s1 = 0, first = 0;
  for (; e < experts; ++e) {
    const int64_t n = (offset[e + 1] - offset[e] + kTile - 1) / kTile;
    if (blockIdx.x < first + n) {
      s0 = offset[e] + (blockIdx.x - first) * kTile;
      s1 = offset[e + 1];
      break;
    }
    first += n;
  }
  if (e == experts) return;
  const int64_t col0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < kdim; k0 += kTileK) {
    for (int i = threadIdx.x; i < kTile * kTileK; i += 256) {
      const int r = i / kTileK, kk = i % kTileK;
      const int64_t k = k0 + kk;
      as[kk][r] = (s0 + r < s1 && k < kdim) ? a.load(pair_at[s0 + r], k) : 0.0f;
      bs[kk][r] = (col0 + r < ncols && k < kdim) ? b.load(e, col0 + r, k) : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kTileK; ++kk) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = as[kk][ty * 4 + i], bv[i] = bs[kk][tx * 4 + i];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i) {
    if (s0 + ty * 4 + i >= s1) continue;
    const int64_t pair = pair_at[s0 + ty * 4 + i];
    for (int j = 0; j < 4; ++j) {
      const int64_t col = col0 + tx * 4 + j;
      if (col < ncols) c[pair * ncols + col] = acc[i][j];
    }
  }
}

// act[pair, n] = silu(h1[pair, n]) * h1[pair, N + n] (torch's fp32 silu: x / (1 + exp(-x))).
__global__ void silu_mul_kernel(const float* h1, int64_t pairs, int64_t inter, float* act) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pairs * inter;
       i += stride) {
    const int64_t p = i / inter, n = i % inter;
    const float g = h1[p * 2 * inter + n];
    act[i] = g / (1.0f + expf(-g)) * h1[p * 2 * inter + inter + n];
  }
}

struct ActRows {  // GEMM 2's rows
  const float* act;
  int64_t inter;
  __device__ float load(int64_t pair, int64_t k) const { return act[pair * inter + k]; }
};

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(n / 256 + 1 < 65536 ? n / 256 + 1 : 65536);
}

// Routing, GEMM 1 (x . W1^T into h1 [pairs, 2N]), silu * up, GEMM 2 (act . W2^T into y
// [pairs, H]) in one stream-ordered scratch allocation; the caller combines y. 0 or an error code.
template <class XRows, class W1Rows, class W2Rows>
int moe_gemms(cudaStream_t stream, const int32_t* ids, int64_t pairs, int64_t experts,
              int64_t hidden, int64_t inter, XRows x, W1Rows w1, W2Rows w2, float** y_out,
              void** scratch) {
  const size_t ints = static_cast<size_t>(3 * experts + 1 + pairs);
  const size_t floats = static_cast<size_t>(pairs) * static_cast<size_t>(3 * inter + hidden);
  char* buf = nullptr;
  if (cudaMallocAsync(reinterpret_cast<void**>(&buf), ints * 4 + 16 + floats * 4, stream) !=
      cudaSuccess)
    return 2;
  *scratch = buf;
  auto* count = reinterpret_cast<int32_t*>(buf);
  int32_t* offset = count + experts;
  int32_t* cursor = offset + experts + 1;
  int32_t* pair_at = cursor + experts;
  float* h1 = reinterpret_cast<float*>(buf + (ints * 4 + 15) / 16 * 16);
  float* act = h1 + pairs * 2 * inter;
  float* y = act + pairs * inter;
  *y_out = y;
  cudaMemsetAsync(count, 0, static_cast<size_t>(experts) * 4, stream);
  count_kernel<<<grid_for(pairs), 256, 0, stream>>>(ids, pairs, experts, count);
  scan_kernel<<<1, 1, 0, stream>>>(count, experts, offset, cursor);
  fill_kernel<<<grid_for(pairs), 256, 0, stream>>>(ids, pairs, experts, cursor, pair_at);
  const auto tiles = static_cast<unsigned>((pairs + kTile - 1) / kTile + experts);
  grouped_gemm_kernel<<<dim3(tiles, static_cast<unsigned>((2 * inter + kTile - 1) / kTile)), 256, 0,
                        stream>>>(offset, experts, pair_at, x, w1, hidden, 2 * inter, h1);
  silu_mul_kernel<<<grid_for(pairs * inter), 256, 0, stream>>>(h1, pairs, inter, act);
  grouped_gemm_kernel<<<dim3(tiles, static_cast<unsigned>((hidden + kTile - 1) / kTile)), 256, 0,
                        stream>>>(offset, experts, pair_at, ActRows{act, inter}, w2, inter, hidden,
                                  y);
  return 0;
}

struct XRows {  // GEMM 1's rows: the pair's token, times its per-(token, bk columns) scale
  const unsigned char* x;
  const float* scale;
  int64_t hidden, top_k, bk;
  __device__ float load(int64_t pair, int64_t k) const {
    const int64_t t = pair / top_k;
    return fp8_to_float(x[t * hidden + k]) * scale[t * (hidden / bk) + k / bk];
  }
};
struct WRows {  // expert e's row j of a stacked [E * rows, cols] weight with [br, bc] block scales
  const unsigned char* w;
  const float* scale;
  int64_t rows, cols, br, bc;
  __device__ float load(int64_t e, int64_t j, int64_t k) const {
    const int64_t r = e * rows + j;
    return fp8_to_float(w[r * cols + k]) * scale[(r / br) * (cols / bc) + k / bc];
  }
};

__global__ void combine_kernel(const float* y, const float* weights, unsigned char* out,
                               int64_t tokens, int64_t k, int64_t hidden) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < tokens * hidden;
       i += stride) {
    const int64_t t = i / hidden, h = i % hidden;
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j) acc += y[(t * k + j) * hidden + h] * weights[t * k + j];
    out[i] = float_to_fp8(acc);
  }
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "hidden_states");
  const DLTensor* w1 = atrex_input(launch, "w1");
  const DLTensor* w2 = atrex_input(launch, "w2");
  const DLTensor* w = atrex_input(launch, "topk_weights");
  const DLTensor* ids = atrex_input(launch, "topk_ids");
  const DLTensor* a_scale = atrex_input(launch, "a_scale");
  const DLTensor* fc1 = atrex_input(launch, "fc1_scale");
  const DLTensor* fc2 = atrex_input(launch, "fc2_scale");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w1 || !w2 || !w || !ids || !a_scale || !fc1 || !fc2 || !out || w2->ndim != 3 ||
      ids->ndim != 2)
    return 1;
  const int64_t tokens = x->shape[0], hidden = x->shape[1], inter = w2->shape[2], k = ids->shape[1];
  const int64_t experts = w1->shape[0], pairs = tokens * k;
  const int64_t bn = atrex_param_int(launch, "scale_block_n", 128),
                bk = atrex_param_int(launch, "scale_block_k", 128);
  if (pairs == 0) return 0;
  auto stream = static_cast<cudaStream_t>(launch->stream);
  float* y = nullptr;
  void* scratch = nullptr;
  const int rc =
      moe_gemms(stream, static_cast<const int32_t*>(ids->data), pairs, experts, hidden, inter,
                XRows{static_cast<const unsigned char*>(x->data),
                      static_cast<const float*>(a_scale->data), hidden, k, bk},
                WRows{static_cast<const unsigned char*>(w1->data),
                      static_cast<const float*>(fc1->data), 2 * inter, hidden, bn, bk},
                WRows{static_cast<const unsigned char*>(w2->data),
                      static_cast<const float*>(fc2->data), hidden, inter, bk, bn},
                &y, &scratch);
  if (rc != 0) return rc;
  combine_kernel<<<grid_for(tokens * hidden), 256, 0, stream>>>(
      y, static_cast<const float*>(w->data), static_cast<unsigned char*>(out->data), tokens, k,
      hidden);
  cudaFreeAsync(scratch, stream);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
