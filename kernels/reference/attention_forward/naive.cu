// Reference re-expressed as a cuda candidate: attention_forward.
// q, k, v [T, H, d] bf16 packed by cu_seqlens_q / cu_seqlens_k [S + 1] int32; for each sequence
// and head, out = bf16(softmax(q k^T / sqrt(d)) v) over that sequence's keys (no mask), fp32.
// Head dims up to 128 (multiples of 4): flash attention in fp32 on CUDA cores, 64 queries x 4
// threads per block, 32-key shared-memory tiles, online softmax. Other dims: one thread per
// (head, token), token fastest so a warp reads the same key rows.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

constexpr int kMaxDim = 256;
constexpr int kQueries = 64;  // per block, 4 threads each
constexpr int kKeys = 32;     // per shared-memory tile
constexpr int kChunks = 32;   // float4 chunks of head dim 128

__device__ inline float4 load4(const __nv_bfloat16* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const __nv_bfloat162 a = *reinterpret_cast<const __nv_bfloat162*>(&u.x),
                       b = *reinterpret_cast<const __nv_bfloat162*>(&u.y);
  return make_float4(__low2float(a), __high2float(a), __low2float(b), __high2float(b));
}

// Grid: x = an upper bound of the query tiles (ceil(T / 64) + S), y = head.
__global__ void __launch_bounds__(256)
    flash_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                 const int32_t* cu_q, const int32_t* cu_k, __nv_bfloat16* out, int64_t seqs,
                 int64_t heads, int dim, float scale) {
  __shared__ float4 ks[kKeys][kChunks];
  __shared__ float4 vs[kKeys][kChunks];
  __shared__ long long tile_seq, tile_q0;
  if (threadIdx.x == 0) {
    long long first = 0, seq = -1, q0 = 0;
    for (int64_t s = 0; s < seqs; ++s) {
      const long long n = (cu_q[s + 1] - cu_q[s] + kQueries - 1) / kQueries;
      if (blockIdx.x < first + n) {
        seq = s, q0 = (blockIdx.x - first) * kQueries;
        break;
      }
      first += n;
    }
    tile_seq = seq, tile_q0 = q0;
  }
  __syncthreads();
  const int64_t s = tile_seq, h = blockIdx.y;
  if (s < 0) return;
  const int lane = threadIdx.x % 4, chunks = dim / 4;
  const int64_t t = cu_q[s] + tile_q0 + threadIdx.x / 4;
  const bool active = t < cu_q[s + 1];
  float4 qv[kChunks / 4], ov[kChunks / 4];
#pragma unroll
  for (int i = 0; i < kChunks / 4; ++i) {
    const int c = 4 * i + lane;
    qv[i] =
        (active && c < chunks) ? load4(q + (t * heads + h) * dim + 4 * c) : make_float4(0, 0, 0, 0);
    ov[i] = make_float4(0, 0, 0, 0);
  }
  float m = -INFINITY, l = 0.0f;
  const int64_t kb = cu_k[s], ke = cu_k[s + 1];
  for (int64_t j0 = kb; j0 < ke; j0 += kKeys) {
    const int nk = static_cast<int>(ke - j0 < kKeys ? ke - j0 : kKeys);
    __syncthreads();
    for (int i = threadIdx.x; i < kKeys * chunks; i += blockDim.x) {
      const int j = i / chunks, c = i % chunks;
      const int64_t off = ((j0 + j) * heads + h) * dim + 4 * c;
      ks[j][c] = j < nk ? load4(k + off) : make_float4(0, 0, 0, 0);
      vs[j][c] = j < nk ? load4(v + off) : make_float4(0, 0, 0, 0);
    }
    __syncthreads();
    float p[kKeys];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kChunks / 4; ++i) {
        if (4 * i + lane < chunks) {
          const float4 kk = ks[j][4 * i + lane];
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
    const float alpha = expf(m - m_new);
    l *= alpha;
#pragma unroll
    for (int i = 0; i < kChunks / 4; ++i)
      ov[i].x *= alpha, ov[i].y *= alpha, ov[i].z *= alpha, ov[i].w *= alpha;
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      const float pj = expf(p[j] - m_new);
      l += pj;
#pragma unroll
      for (int i = 0; i < kChunks / 4; ++i) {
        if (4 * i + lane < chunks) {
          const float4 vv = vs[j][4 * i + lane];
          ov[i].x = fmaf(pj, vv.x, ov[i].x), ov[i].y = fmaf(pj, vv.y, ov[i].y);
          ov[i].z = fmaf(pj, vv.z, ov[i].z), ov[i].w = fmaf(pj, vv.w, ov[i].w);
        }
      }
    }
    m = m_new;
  }
  if (!active) return;
#pragma unroll
  for (int i = 0; i < kChunks / 4; ++i) {
    const int c = 4 * i + lane;
    if (c >= chunks) continue;
    __nv_bfloat16* o = out + (t * heads + h) * dim + 4 * c;
    o[0] = __float2bfloat16_rn(l > 0.0f ? ov[i].x / l : 0.0f);
    o[1] = __float2bfloat16_rn(l > 0.0f ? ov[i].y / l : 0.0f);
    o[2] = __float2bfloat16_rn(l > 0.0f ? ov[i].z / l : 0.0f);
    o[3] = __float2bfloat16_rn(l > 0.0f ? ov[i].w / l : 0.0f);
  }
}

__global__ void attention_forward_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k,
                                         const __nv_bfloat16* v, const int32_t* cu_q,
                                         const int32_t* cu_k, __nv_bfloat16* out, int64_t tokens,
                                         int64_t seqs, int64_t heads, int64_t dim, float scale) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= tokens * heads) return;
  const int64_t h = idx / tokens, t = idx % tokens;
  if (t < cu_q[0] || t >= cu_q[seqs]) return;
  int64_t lo = 0, hi = seqs - 1;  // last sequence starting at or before t
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (cu_q[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int64_t k0 = cu_k[lo], nk = cu_k[lo + 1] - cu_k[lo];
  const __nv_bfloat16* qr = q + (t * heads + h) * dim;
  float mx = -INFINITY;
  for (int64_t j = 0; j < nk; ++j) {
    const __nv_bfloat16* kr = k + ((k0 + j) * heads + h) * dim;
    float dot = 0;
    for (int64_t i = 0; i < dim; ++i) dot += __bfloat162float(qr[i]) * __bfloat162float(kr[i]);
    mx = fmaxf(mx, dot * scale);
  }
  float acc[kMaxDim];
  for (int64_t i = 0; i < dim; ++i) acc[i] = 0;
  float sum = 0;
  for (int64_t j = 0; j < nk; ++j) {
    const __nv_bfloat16* kr = k + ((k0 + j) * heads + h) * dim;
    const __nv_bfloat16* vr = v + ((k0 + j) * heads + h) * dim;
    float dot = 0;
    for (int64_t i = 0; i < dim; ++i) dot += __bfloat162float(qr[i]) * __bfloat162float(kr[i]);
    const float p = expf(dot * scale - mx);
    sum += p;
    for (int64_t i = 0; i < dim; ++i) acc[i] += p * __bfloat162float(vr[i]);
  }
  for (int64_t i = 0; i < dim; ++i)
    out[(t * heads + h) * dim + i] = __float2bfloat16_rn(nk ? acc[i] / sum : 0.0f);
}

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* q = atrex_input(launch, "q");
  const DLTensor* k = atrex_input(launch, "k");
  const DLTensor* v = atrex_input(launch, "v");
  const DLTensor* cu_q = atrex_input(launch, "cu_seqlens_q");
  const DLTensor* cu_k = atrex_input(launch, "cu_seqlens_k");
  const DLTensor* out = atrex_output(launch, "out");
  if (!q || !k || !v || !cu_q || !cu_k || !out || q->ndim != 3 || q->shape[2] > kMaxDim) return 1;
  const int64_t tokens = q->shape[0], heads = q->shape[1], dim = q->shape[2];
  const int64_t n = tokens * heads;
  const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(dim)));
  const int64_t seqs = cu_q->shape[0] - 1;
  if (dim <= 4 * kChunks && dim % 4 == 0 && seqs > 0) {
    const dim3 grid(static_cast<unsigned>((tokens + kQueries - 1) / kQueries + seqs),
                    static_cast<unsigned>(heads));
    flash_kernel<<<grid, kQueries * 4, 0, static_cast<cudaStream_t>(launch->stream)>>>(
        static_cast<const __nv_bfloat16*>(q->data), static_cast<const __nv_bfloat16*>(k->data),
        static_cast<const __nv_bfloat16*>(v->data), static_cast<const int32_t*>(cu_q->data),
        static_cast<const int32_t*>(cu_k->data), static_cast<__nv_bfloat16*>(out->data), seqs,
        heads, static_cast<int>(dim), scale);
    return cudaGetLastError() == cudaSuccess ? 0 : 2;
  }
  attention_forward_kernel<<<static_cast<unsigned>((n + 127) / 128), 128, 0,
                             static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const __nv_bfloat16*>(q->data), static_cast<const __nv_bfloat16*>(k->data),
      static_cast<const __nv_bfloat16*>(v->data), static_cast<const int32_t*>(cu_q->data),
      static_cast<const int32_t*>(cu_k->data), static_cast<__nv_bfloat16*>(out->data), tokens,
      cu_q->shape[0] - 1, heads, dim, scale);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
