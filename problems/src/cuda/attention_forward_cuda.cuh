// Tiled CUDA reference of attention_forward (included by attention_cuda.cu): flash attention in
// fp32 on CUDA cores. A block takes 64 queries of one sequence and one head, 4 threads per query
// (each holds a quarter of the head dim: float4 chunks c = 4i + lane), and walks the sequence's
// keys in tiles of 32 staged in shared memory, with the online softmax of attend_row (running
// max, rescaled sum). Same definition as AttentionForwardRow (scores scaled by 1/sqrt(d), fp32
// softmax and weighted sum, one bf16 rounding), other summation order: results differ from the
// functor in the last fp32 bits. Head dims up to 128 and multiples of 4 (the released shapes:
// 72 and 128); other dims use the functor.
#pragma once

#include <cmath>

#include "../ops/attention_ops.h"
#include "cuda_exec.cuh"

namespace atrex::problems::cuda {

inline constexpr int kAttnQueries = 64;  // queries per block (x 4 threads)
inline constexpr int kAttnKeys = 32;     // keys per shared-memory tile
inline constexpr int kAttnChunks = 32;   // float4 chunks of the largest head dim (128)

__device__ inline float4 load_bf16x4(const uint16_t* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  return make_float4(num::bf16_to_float(static_cast<uint16_t>(u.x & 0xffffu)),
                     num::bf16_to_float(static_cast<uint16_t>(u.x >> 16)),
                     num::bf16_to_float(static_cast<uint16_t>(u.y & 0xffffu)),
                     num::bf16_to_float(static_cast<uint16_t>(u.y >> 16)));
}

// Grid: x = an upper bound of the query tiles (ceil(T / 64) + S), y = head.
__global__ void __launch_bounds__(256)
    attention_forward_kernel(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                             const int32_t* cu_q, const int32_t* cu_k, uint16_t* out,
                             int64_t num_seqs, int64_t heads, int dim, float scale) {
  __shared__ float4 ks[kAttnKeys][kAttnChunks];
  __shared__ float4 vs[kAttnKeys][kAttnChunks];
  __shared__ int64_t tile_seq, tile_q0;
  if (threadIdx.x == 0) {  // which sequence and query offset this block's tile is
    int64_t first = 0, seq = -1, q0 = 0;
    for (int64_t s = 0; s < num_seqs; ++s) {
      const int64_t n = (cu_q[s + 1] - cu_q[s] + kAttnQueries - 1) / kAttnQueries;
      if (blockIdx.x < first + n) {
        seq = s, q0 = (blockIdx.x - first) * kAttnQueries;
        break;
      }
      first += n;
    }
    tile_seq = seq, tile_q0 = q0;
  }
  __syncthreads();
  const int64_t s = tile_seq;
  if (s < 0) return;
  const int64_t h = blockIdx.y;
  const int lane = threadIdx.x % 4, chunks = dim / 4;
  const int64_t t = cu_q[s] + tile_q0 + threadIdx.x / 4;
  const bool active = t < cu_q[s + 1];
  float4 qv[kAttnChunks / 4], ov[kAttnChunks / 4];
#pragma unroll
  for (int i = 0; i < kAttnChunks / 4; ++i) {
    const int c = 4 * i + lane;
    qv[i] = (active && c < chunks) ? load_bf16x4(q + (t * heads + h) * dim + 4 * c)
                                   : make_float4(0, 0, 0, 0);
    ov[i] = make_float4(0, 0, 0, 0);
  }
  float m = -INFINITY, l = 0.0f;
  const int64_t k_begin = cu_k[s], k_end = cu_k[s + 1];
  for (int64_t j0 = k_begin; j0 < k_end; j0 += kAttnKeys) {
    const int nk = static_cast<int>(k_end - j0 < kAttnKeys ? k_end - j0 : kAttnKeys);
    __syncthreads();  // the previous tile is consumed
    for (int i = threadIdx.x; i < kAttnKeys * chunks; i += blockDim.x) {
      const int j = i / chunks, c = i % chunks;
      const int64_t off = ((j0 + j) * heads + h) * dim + 4 * c;
      ks[j][c] = j < nk ? load_bf16x4(k + off) : make_float4(0, 0, 0, 0);
      vs[j][c] = j < nk ? load_bf16x4(v + off) : make_float4(0, 0, 0, 0);
    }
    __syncthreads();
    float p[kAttnKeys];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kAttnKeys; ++j) {
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kAttnChunks / 4; ++i) {
        const int c = 4 * i + lane;
        if (c < chunks) {
          const float4 kk = ks[j][c];
          dot = fmaf(qv[i].x, kk.x,
                     fmaf(qv[i].y, kk.y, fmaf(qv[i].z, kk.z, fmaf(qv[i].w, kk.w, dot))));
        }
      }
      dot += __shfl_xor_sync(0xffffffffu, dot, 1);
      dot += __shfl_xor_sync(0xffffffffu, dot, 2);
      p[j] = j < nk ? dot * scale : -INFINITY;
      tile_max = fmaxf(tile_max, p[j]);
    }
    const float m_new = fmaxf(m, tile_max);
    const float alpha = expf(m - m_new);  // 0 on the first tile (m = -inf)
    l *= alpha;
#pragma unroll
    for (int i = 0; i < kAttnChunks / 4; ++i)
      ov[i].x *= alpha, ov[i].y *= alpha, ov[i].z *= alpha, ov[i].w *= alpha;
#pragma unroll
    for (int j = 0; j < kAttnKeys; ++j) {
      const float pj = expf(p[j] - m_new);  // 0 past the last key
      l += pj;
#pragma unroll
      for (int i = 0; i < kAttnChunks / 4; ++i) {
        const int c = 4 * i + lane;
        if (c < chunks) {
          const float4 vv = vs[j][c];
          ov[i].x = fmaf(pj, vv.x, ov[i].x), ov[i].y = fmaf(pj, vv.y, ov[i].y);
          ov[i].z = fmaf(pj, vv.z, ov[i].z), ov[i].w = fmaf(pj, vv.w, ov[i].w);
        }
      }
    }
    m = m_new;
  }
  if (!active) return;
    // No keys: zeros, as the functor.
#pragma unroll
  for (int i = 0; i < kAttnChunks / 4; ++i) {
    const int c = 4 * i + lane;
    if (c >= chunks) continue;
    uint16_t* o = out + (t * heads + h) * dim + 4 * c;
    o[0] = num::float_to_bf16(l > 0.0f ? ov[i].x / l : 0.0f);
    o[1] = num::float_to_bf16(l > 0.0f ? ov[i].y / l : 0.0f);
    o[2] = num::float_to_bf16(l > 0.0f ? ov[i].z / l : 0.0f);
    o[3] = num::float_to_bf16(l > 0.0f ? ov[i].w / l : 0.0f);
  }
}

inline void attention_forward_cuda(const CudaExec& ex, const ResolvedShape& s,
                                   const void* const* in, void* const* out) {
  const auto& q = s.inputs[0];
  const int64_t tokens = q.dims[0], heads = q.dims[1], dim = q.dims[2],
                seqs = s.inputs[3].dims[0] - 1;
  if (dim > 4 * kAttnChunks || dim % 4 != 0 || seqs <= 0) {
    ops::attention_forward_reference(ex, s, in, out);
    return;
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  const dim3 grid(static_cast<unsigned>((tokens + kAttnQueries - 1) / kAttnQueries + seqs),
                  static_cast<unsigned>(heads));
  attention_forward_kernel<<<grid, kAttnQueries * 4, 0, ex.stream>>>(
      static_cast<const uint16_t*>(in[0]), static_cast<const uint16_t*>(in[1]),
      static_cast<const uint16_t*>(in[2]), static_cast<const int32_t*>(in[3]),
      static_cast<const int32_t*>(in[4]), static_cast<uint16_t*>(out[0]), seqs, heads,
      static_cast<int>(dim), scale);
}

}  // namespace atrex::problems::cuda
