// atrex-template: head_group
// atrex-description: one thread block per (sequence, run of HEADS query heads), one launch; the latent rows of a KEY_TILE-key tile are staged once in shared memory (coalesced 16-byte loads, rows padded against bank conflicts) and serve every head of the run as keys (whole row) and values (first kv_lora_rank elements); scores by one thread per (key, head), a warp per head for the online softmax, values by one thread per (head, pair of dims) with fp32 accumulators in shared memory
// atrex-param: BLOCK_THREADS = 256 | 128, 256, 512
// atrex-param: HEADS = 8 | 2, 4, 8, 16, 32
// atrex-param: KEY_TILE = 32 | 16, 32, 64
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 256
#endif
#ifndef HEADS
#define HEADS 8
#endif
#ifndef KEY_TILE
#define KEY_TILE 32
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "atrex/candidate_util.h"

static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS >= 32 && BLOCK_THREADS <= 1024,
              "BLOCK_THREADS");
static_assert(HEADS >= 1 && HEADS <= 64, "HEADS");
static_assert(KEY_TILE >= 1 && KEY_TILE <= 256, "KEY_TILE");

namespace {

using atrex::cand::Tensors;
using atrex::cand::aligned;
using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::kI32;

constexpr int kWarps = BLOCK_THREADS / 32;

__device__ __forceinline__ void unpack8(const uint4& w, float (&f)[8]) {
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    f[2 * e] = __uint_as_float(u[e] << 16);
    f[2 * e + 1] = __uint_as_float(u[e] & 0xffff0000u);
  }
}

struct Args {
  const uint16_t* q;   // [B, H, dk]
  const uint16_t* kv;  // [rows, 1, dk]
  const int32_t* lens;
  uint16_t* out;  // [B, H, dv]
  int batch, heads, dk, dv;
  float scale;
};

// Shared memory: the tile's rows (bf16, stride dk + 8 elements: 16-byte aligned, and 8
// consecutive rows' 16-byte words fall in distinct banks), the run's q rows (bf16, same stride),
// accumulators [HEADS, dv] fp32, probabilities [HEADS, KEY_TILE], running max/sum/rescale.
struct Smem {
  uint16_t *rows, *q;
  float *acc, *p, *m, *l, *alpha;
  int stride;
  __device__ Smem(char* s, int dk, int dv) {
    stride = dk + 8;
    rows = reinterpret_cast<uint16_t*>(s);
    q = rows + KEY_TILE * stride;
    acc = reinterpret_cast<float*>(q + HEADS * stride);
    p = acc + HEADS * dv;
    m = p + HEADS * KEY_TILE;
    l = m + HEADS;
    alpha = l + HEADS;
  }
};
size_t smem_bytes(int dk, int dv) {
  return size_t(KEY_TILE + HEADS) * (dk + 8) * 2 +
         (size_t(HEADS) * dv + HEADS * KEY_TILE + 3 * HEADS) * 4;
}

__global__ void __launch_bounds__(BLOCK_THREADS) mla_decode_kernel(Args a) {
  extern __shared__ float4 smem_raw[];
  const Smem sm(reinterpret_cast<char*>(smem_raw), a.dk, a.dv);
  const int h0 = blockIdx.x * HEADS, b = blockIdx.y;
  const int hn = a.heads - h0 < HEADS ? a.heads - h0 : HEADS;
  int64_t start = 0;
  for (int i = 0; i < b; ++i) start += a.lens[i];
  const int64_t n = a.lens[b] > 0 ? a.lens[b] : 0;
  const int words = a.dk / 8;  // 16-byte words per row
  const uint4* qg = reinterpret_cast<const uint4*>(a.q + (int64_t(b) * a.heads + h0) * a.dk);
  for (int w = threadIdx.x; w < hn * words; w += BLOCK_THREADS) {
    const int h = w / words, c = w % words;
    *reinterpret_cast<uint4*>(sm.q + h * sm.stride + c * 8) = __ldg(qg + w);
  }
  for (int i = threadIdx.x; i < HEADS * a.dv; i += BLOCK_THREADS) sm.acc[i] = 0.f;
  for (int h = threadIdx.x; h < HEADS; h += BLOCK_THREADS) {
    sm.m[h] = -INFINITY;
    sm.l[h] = 0.f;
  }
  for (int64_t j0 = 0; j0 < n; j0 += KEY_TILE) {
    const int nt = static_cast<int>(n - j0 < KEY_TILE ? n - j0 : KEY_TILE);
    // Stage rows start + j0 .. + nt: one contiguous run of nt * dk elements.
    const uint4* src = reinterpret_cast<const uint4*>(a.kv + (start + j0) * a.dk);
    for (int w = threadIdx.x; w < nt * words; w += BLOCK_THREADS) {
      const int t = w / words, c = w % words;
      *reinterpret_cast<uint4*>(sm.rows + t * sm.stride + c * 8) = __ldcs(src + w);
    }
    __syncthreads();
    // Scores: item (head h, key t), keys fastest: a warp shares q (broadcast), rows conflict-free.
    for (int item = threadIdx.x; item < hn * nt; item += BLOCK_THREADS) {
      const int h = item / nt, t = item % nt;
      const uint4* qr = reinterpret_cast<const uint4*>(sm.q + h * sm.stride);
      const uint4* kr = reinterpret_cast<const uint4*>(sm.rows + t * sm.stride);
      float dot = 0.f;
      for (int c = 0; c < words; ++c) {
        float qf[8], kf[8];
        unpack8(qr[c], qf);
        unpack8(kr[c], kf);
#pragma unroll
        for (int e = 0; e < 8; ++e) dot = fmaf(qf[e], kf[e], dot);
      }
      sm.p[h * KEY_TILE + t] = dot * a.scale;
    }
    __syncthreads();
    // Online softmax, a warp per head.
    const int lane = threadIdx.x & 31;
    for (int h = threadIdx.x >> 5; h < hn; h += kWarps) {
      float* p = sm.p + h * KEY_TILE;
      float mx = -INFINITY;
      for (int t = lane; t < nt; t += 32) mx = fmaxf(mx, p[t]);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_new = fmaxf(sm.m[h], mx);
      float sum = 0.f;
      for (int t = lane; t < nt; t += 32) {
        const float e = expf(p[t] - m_new);
        p[t] = e;
        sum += e;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      if (lane == 0) {
        const float alpha = expf(sm.m[h] - m_new);  // 0 on the first tile (max -inf)
        sm.alpha[h] = alpha;
        sm.l[h] = sm.l[h] * alpha + sum;
        sm.m[h] = m_new;
      }
    }
    __syncthreads();
    // Values: item (head h, dims 2i, 2i + 1), dims fastest (consecutive 4-byte words of a row).
    const int pairs = a.dv / 2;
    for (int item = threadIdx.x; item < hn * pairs; item += BLOCK_THREADS) {
      const int h = item / pairs, i = (item % pairs) * 2;
      const float* p = sm.p + h * KEY_TILE;
      float2 acc = *reinterpret_cast<float2*>(sm.acc + h * a.dv + i);
      acc.x *= sm.alpha[h];
      acc.y *= sm.alpha[h];
      for (int t = 0; t < nt; ++t) {
        const uint32_t v2 = *reinterpret_cast<const uint32_t*>(sm.rows + t * sm.stride + i);
        acc.x = fmaf(p[t], __uint_as_float(v2 << 16), acc.x);
        acc.y = fmaf(p[t], __uint_as_float(v2 & 0xffff0000u), acc.y);
      }
      *reinterpret_cast<float2*>(sm.acc + h * a.dv + i) = acc;
    }
    __syncthreads();
  }
  uint16_t* out = a.out + (int64_t(b) * a.heads + h0) * a.dv;
  for (int i = threadIdx.x; i < hn * a.dv; i += BLOCK_THREADS) {
    const int h = i / a.dv;
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(n > 0 ? sm.acc[i] / sm.l[h] : 0.f));
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  Tensors ts(launch, "mla_decode_attention");
  const DLTensor* q = ts.input("q", kBF16, 3);           // [B, H, r + rope]
  const DLTensor* kv = ts.input("kv_cache", kBF16, 3);   // [sum(seq_lens), 1, r + rope]
  const DLTensor* lens = ts.input("seq_lens", kI32, 1);  // [B]
  const DLTensor* out = ts.output("out", kBF16, 3);      // [B, H, r]
  if (!ts.ok() || !ts.dim_is(kv, 2, q->shape[2]) || !ts.dim_is(kv, 1, 1) ||
      !ts.dim_is(lens, 0, q->shape[0]) || !ts.dim_is(out, 0, q->shape[0]) ||
      !ts.dim_is(out, 1, q->shape[1]))
    return ts.failed();
  const int64_t batch = q->shape[0], heads = q->shape[1], dk = q->shape[2], dv = out->shape[2];
  if (dk % 8 != 0 || dv % 2 != 0 || dv > dk || dk > 4096)
    return fail("mla_decode_attention: key dim %lld (multiple of 8 expected), value dim %lld",
                static_cast<long long>(dk), static_cast<long long>(dv));
  if (batch == 0 || heads == 0) return 0;
  if (batch > 65535) return fail("mla_decode_attention: batch %lld too large", (long long)batch);
  if (!aligned(q->data, 16) || !aligned(kv->data, 16))
    return fail("mla_decode_attention: q / kv_cache not 16-byte aligned");
  const Args a{static_cast<const uint16_t*>(q->data), static_cast<const uint16_t*>(kv->data),
               static_cast<const int32_t*>(lens->data), static_cast<uint16_t*>(out->data),
               static_cast<int>(batch), static_cast<int>(heads), static_cast<int>(dk),
               static_cast<int>(dv), static_cast<float>(1.0 / sqrt(static_cast<double>(dk)))};
  const size_t smem = smem_bytes(a.dk, a.dv);
  // Opt in once per kernel to more than 48 KiB of dynamic shared memory (the first call is never
  // under stream capture: it is a correctness call).
  static size_t opted_in = 48 * 1024;
  if (smem > opted_in) {
    const cudaError_t e = cudaFuncSetAttribute(
        mla_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess)
      return fail("mla_decode_attention: %zu bytes of shared memory: %s", smem,
                  cudaGetErrorString(e));
    opted_in = smem;
  }
  const dim3 grid(static_cast<unsigned>((heads + HEADS - 1) / HEADS), static_cast<unsigned>(batch));
  mla_decode_kernel<<<grid, BLOCK_THREADS, smem, static_cast<cudaStream_t>(launch->stream)>>>(a);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("mla_decode_attention: %s", cudaGetErrorString(err));
}
