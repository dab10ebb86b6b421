// atrex-template: row_smem
// atrex-description: 2D grid of (channel, token tile) blocks: the tile plus its width-1 halo (initial state at the row start) staged in shared memory with coalesced loads, then each thread convolves TOKENS_PER_THREAD tokens strided by the block size (coalesced 2-byte stores)
// atrex-param: BLOCK_THREADS = 128 | 32, 64, 128
// atrex-param: TOKENS_PER_THREAD = 4 | 1, 2, 4
#ifndef BLOCK_THREADS
#define BLOCK_THREADS 128
#endif
#ifndef TOKENS_PER_THREAD
#define TOKENS_PER_THREAD 4
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <cstring>

#include "atrex/candidate_util.h"

static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS <= 1024, "BLOCK_THREADS");
static_assert(TOKENS_PER_THREAD >= 1 && TOKENS_PER_THREAD <= 16, "TOKENS_PER_THREAD");

namespace {

using atrex::cand::fail;
using atrex::cand::kBF16;

constexpr int kMaxWidth = 8;
constexpr int kTile = BLOCK_THREADS * TOKENS_PER_THREAD;

__device__ __forceinline__ float bf2f(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
__device__ __forceinline__ uint16_t f2bf(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

// Block (d, tile): tokens [tile * kTile, +kTile) of channel d.
__global__ void __launch_bounds__(BLOCK_THREADS)
    conv_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,
                const uint16_t* __restrict__ bias, const uint16_t* __restrict__ state,
                uint16_t* __restrict__ out, int64_t tokens, int width, bool silu) {
  __shared__ float win[kTile + kMaxWidth - 1];
  __shared__ float taps[kMaxWidth + 1];
  const int64_t d = blockIdx.x;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int halo = width - 1;
  const uint16_t* xr = x + d * tokens;
  // win[k] = row value at t0 - halo + k (the initial state before the row starts).
  for (int k = threadIdx.x; k < kTile + halo; k += BLOCK_THREADS) {
    const int64_t t = t0 - halo + k;
    float v = 0.f;
    if (t < 0)
      v = bf2f(__ldg(state + d * halo + halo + t));
    else if (t < tokens)
      v = bf2f(__ldg(xr + t));
    win[k] = v;
  }
  if (threadIdx.x < width) taps[threadIdx.x] = bf2f(__ldg(w + d * width + threadIdx.x));
  if (threadIdx.x == 0) taps[kMaxWidth] = bf2f(__ldg(bias + d));
  __syncthreads();
  uint16_t* orow = out + d * tokens;
#pragma unroll
  for (int k = 0; k < TOKENS_PER_THREAD; ++k) {
    const int local = k * BLOCK_THREADS + static_cast<int>(threadIdx.x);
    const int64_t t = t0 + local;
    if (t >= tokens) break;
    float acc = taps[kMaxWidth];
    for (int j = 0; j < width; ++j) acc = fmaf(taps[j], win[local + j], acc);
    const float conv = bf2f(f2bf(acc));
    orow[t] = f2bf(silu ? conv / (1.0f + expf(-conv)) : conv);
  }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// x [dim, T], weight [dim, width], bias [dim], initial_state [1, dim, width - 1] (bf16) ->
// out [dim, T] bf16.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "causal_conv1d");
  const DLTensor* x = ts.input("x", kBF16, 2);
  const DLTensor* w = ts.input("weight", kBF16, 2);
  const DLTensor* b = ts.input("bias", kBF16, 1);
  const DLTensor* st = ts.input("initial_state", kBF16, 3);
  const DLTensor* o = ts.output("out", kBF16, 2);
  ts.same_dims(x, o);
  if (!ts.ok()) return ts.failed();
  const int64_t dim = x->shape[0], tokens = x->shape[1], width = w->shape[1];
  if (w->shape[0] != dim || b->shape[0] != dim || st->shape[0] != 1 || st->shape[1] != dim ||
      st->shape[2] != width - 1)
    return fail("causal_conv1d: weight [dim, width], bias [dim], initial_state [1, dim, width - 1] expected");
  if (width < 1 || width > kMaxWidth)
    return fail("causal_conv1d: width %lld not in [1, %d]", static_cast<long long>(width), kMaxWidth);
  if (dim > 0x7fffffff || (tokens + kTile - 1) / kTile > 65535)
    return fail("causal_conv1d: too large for this template (at most 65535 token tiles)");
  if (dim == 0 || tokens == 0) return 0;
  const AtrexParam* act = atrex_param(launch, "activation");
  const bool silu = !act || std::strcmp(act->string_value, "none") != 0;
  const dim3 grid(static_cast<unsigned>(dim), static_cast<unsigned>((tokens + kTile - 1) / kTile));
  conv_kernel<<<grid, BLOCK_THREADS, 0, static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const uint16_t*>(x->data), static_cast<const uint16_t*>(w->data),
      static_cast<const uint16_t*>(b->data), static_cast<const uint16_t*>(st->data),
      static_cast<uint16_t*>(o->data), tokens, static_cast<int>(width), silu);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail(cudaGetErrorString(err));
}
