// atrex-template: warp_columns
// atrex-description: barrier-free and without shared memory: each warp owns COLS value columns of one head on its own, its 32 lanes splitting the key dim (lane l holds state rows l, l + 32, ... of every owned column in registers); per token the lanes read q and k straight from global memory (one coalesced row each) with the next token's q, k, v, a and b prefetched into registers a step ahead, the norms, q.k and the 2 * COLS state dots are warp butterflies, then the fused decay-and-rank-1 update; WARPS warps per block
// atrex-param: COLS = 8 | 4, 8
// atrex-param: WARPS = 4 | 2, 4
#ifndef COLS
#define COLS 8
#endif
#ifndef WARPS
#define WARPS 4
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <cmath>

#include "atrex/candidate_util.h"

namespace {

using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::kF32;
using atrex::cand::kI32;

constexpr int kMaxRows = 8;  // dk <= 256: at most 8 state rows per lane
static_assert(COLS >= 1 && COLS <= 16, "COLS");
static_assert(WARPS >= 1 && WARPS <= 16, "WARPS");

struct Params {
  const float* a_log;
  const uint16_t *a, *dt_bias, *q, *k, *v, *b;
  const int32_t* idx;
  uint16_t* out;
  float* state;  // final_state, holding initial_state on entry
  int64_t tokens, hq, hv, dk, dv, slots, per;
  float scale, sp_beta, sp_threshold;
  bool l2;
};

__device__ __forceinline__ float bf2f(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One token's inputs as this lane sees them.
template <int R>
struct TokenIn {
  float q[R], k[R], v[COLS];
  float a, b;
};

template <int R>
__device__ __forceinline__ void fetch(TokenIn<R>& in, const Params& p, int64_t bidx, int64_t t,
                                      int64_t head, int64_t qh, int64_t c0, int lane) {
  const int64_t qoff = ((bidx * p.tokens + t) * p.hq + qh) * p.dk;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int64_t d = i * 32 + lane;
    in.q[i] = d < p.dk ? bf2f(__ldg(p.q + qoff + d)) : 0.f;
    in.k[i] = d < p.dk ? bf2f(__ldg(p.k + qoff + d)) : 0.f;
  }
  const int64_t row = (bidx * p.tokens + t) * p.hv + head;
#pragma unroll
  for (int c = 0; c < COLS; ++c)
    in.v[c] = c0 + c < p.dv ? bf2f(__ldg(p.v + row * p.dv + c0 + c)) : 0.f;
  in.a = bf2f(__ldg(p.a + row));
  in.b = bf2f(__ldg(p.b + row));
}

// grid (ceil(dv / (COLS * WARPS)), hv, batch); warp w owns columns c0 .. c0 + COLS - 1.
template <int R>
__global__ void __launch_bounds__(WARPS * 32) warp_kernel(Params p) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t bidx = blockIdx.z, head = blockIdx.y;
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * WARPS + warp) * COLS;
  if (c0 >= p.dv) return;
  const int64_t qh = head / p.per < p.hq - 1 ? head / p.per : p.hq - 1;
  const int slot = p.idx[bidx];
  if (slot < 0 || slot >= p.slots) return;  // not a slot: nothing to advance
  float* h = p.state + (static_cast<int64_t>(slot) * p.hv + head) * p.dk * p.dv;
  float st[R][COLS];
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int c = 0; c < COLS; ++c) {
      const int64_t d = i * 32 + lane;
      st[i][c] = (d < p.dk && c0 + c < p.dv) ? h[d * p.dv + c0 + c] : 0.f;
    }
  const float rate = -expf(p.a_log[head]);
  const float bias = bf2f(p.dt_bias[head]);
  TokenIn<R> cur;
  fetch(cur, p, bidx, 0, head, qh, c0, lane);
  TokenIn<R> nxt = cur;
  for (int64_t t = 0; t < p.tokens; ++t) {
    if (t + 1 < p.tokens) fetch(nxt, p, bidx, t + 1, head, qh, c0, lane);
    float sq = 0.f, sk = 0.f, qk = 0.f;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      sq = fmaf(cur.q[i], cur.q[i], sq);
      sk = fmaf(cur.k[i], cur.k[i], sk);
      qk = fmaf(cur.q[i], cur.k[i], qk);
    }
    float hk[COLS], hq[COLS];
#pragma unroll
    for (int c = 0; c < COLS; ++c) {
      hk[c] = 0.f;
      hq[c] = 0.f;
#pragma unroll
      for (int i = 0; i < R; ++i) {
        hk[c] = fmaf(st[i][c], cur.k[i], hk[c]);
        hq[c] = fmaf(st[i][c], cur.q[i], hq[c]);
      }
    }
    sq = warp_sum(sq);
    sk = warp_sum(sk);
    qk = warp_sum(qk);
#pragma unroll
    for (int c = 0; c < COLS; ++c) {
      hk[c] = warp_sum(hk[c]);
      hq[c] = warp_sum(hq[c]);
    }
    const float x = cur.a + bias;
    const float sp = x * p.sp_beta > p.sp_threshold ? x : log1pf(expf(x * p.sp_beta)) / p.sp_beta;
    const float decay = expf(sp * rate);
    const float beta = 1.0f / (1.0f + expf(-cur.b));
    const float iq = (p.l2 ? 1.0f / fmaxf(sqrtf(sq), 1e-6f) : 1.0f) * p.scale;
    const float ik = p.l2 ? 1.0f / fmaxf(sqrtf(sk), 1e-6f) : 1.0f;
    const float qkn = qk * iq * ik;
    const int64_t orow = ((bidx * p.tokens + t) * p.hv + head) * p.dv;
#pragma unroll
    for (int c = 0; c < COLS; ++c) {
      // v' = (v - decay h_old^T k_n) beta; o = decay h_old^T q_n scale + v' (k_n . q_n) scale.
      const float vp = (cur.v[c] - decay * hk[c] * ik) * beta;
      const float kv = vp * ik;
#pragma unroll
      for (int i = 0; i < R; ++i) st[i][c] = fmaf(decay, st[i][c], cur.k[i] * kv);
      if (lane == c % 32 && c0 + c < p.dv)
        p.out[orow + c0 + c] = __bfloat16_as_ushort(__float2bfloat16_rn(decay * hq[c] * iq + vp * qkn));
    }
    cur = nxt;
  }
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int c = 0; c < COLS; ++c) {
      const int64_t d = i * 32 + lane;
      if (d < p.dk && c0 + c < p.dv) h[d * p.dv + c0 + c] = st[i][c];
    }
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// A_log [Hv] f32, a, b [B, T, Hv] bf16, dt_bias [Hv] bf16, q, k [B, T, Hq, dk] bf16,
// v [B, T, Hv, dv] bf16, initial_state_indices [B] i32 -> out [B, T, Hv, dv] bf16,
// final_state [S, Hv, dk, dv] f32 (holding initial_state on entry; the batch's slots advance).
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "gated_delta_rule_update");
  const DLTensor* a_log = ts.input("A_log", kF32, 1);
  const DLTensor* a = ts.input("a", kBF16, 3);
  const DLTensor* dt = ts.input("dt_bias", kBF16, 1);
  const DLTensor* q = ts.input("q", kBF16, 4);
  const DLTensor* k = ts.input("k", kBF16, 4);
  const DLTensor* v = ts.input("v", kBF16, 4);
  const DLTensor* bg = ts.input("b", kBF16, 3);
  const DLTensor* idx = ts.input("initial_state_indices", kI32, 1);
  const DLTensor* out = ts.output("out", kBF16, 4);
  const DLTensor* fin = ts.output("final_state", kF32, 4);
  ts.same_dims(q, k);
  ts.same_dims(v, out);
  if (!ts.ok()) return ts.failed();
  Params p{};
  const int64_t batch = q->shape[0];
  p.tokens = q->shape[1];
  p.hq = q->shape[2];
  p.dk = q->shape[3];
  p.hv = v->shape[2];
  p.dv = v->shape[3];
  p.slots = fin->shape[0];
  if (p.dk > 32 * kMaxRows || p.dk < 1)
    return fail("gated_delta_rule_update: key_dim %lld is not in 1..%d", (long long)p.dk, 32 * kMaxRows);
  if (fin->shape[1] != p.hv || fin->shape[2] != p.dk || fin->shape[3] != p.dv)
    return fail("gated_delta_rule_update: final_state must be [S, Hv, dk, dv]");
  if (p.hq < 1) return fail("gated_delta_rule_update: no q heads");
  if (batch == 0 || p.tokens == 0 || p.hv == 0 || p.dv == 0) return 0;
  if (batch > 65535 || p.hv > 65535) return fail("gated_delta_rule_update: too many heads or batches");
  p.per = p.hv / p.hq > 1 ? p.hv / p.hq : 1;
  p.a_log = static_cast<const float*>(a_log->data);
  p.a = static_cast<const uint16_t*>(a->data);
  p.dt_bias = static_cast<const uint16_t*>(dt->data);
  p.q = static_cast<const uint16_t*>(q->data);
  p.k = static_cast<const uint16_t*>(k->data);
  p.v = static_cast<const uint16_t*>(v->data);
  p.b = static_cast<const uint16_t*>(bg->data);
  p.idx = static_cast<const int32_t*>(idx->data);
  p.out = static_cast<uint16_t*>(out->data);
  p.state = static_cast<float*>(fin->data);
  p.scale = static_cast<float>(atrex_param_float(launch, "scale", 1.0 / std::sqrt(static_cast<double>(p.dk))));
  p.sp_beta = static_cast<float>(atrex_param_float(launch, "softplus_beta", 1.0));
  p.sp_threshold = static_cast<float>(atrex_param_float(launch, "softplus_threshold", 20.0));
  p.l2 = atrex_param_int(launch, "use_qk_l2norm", 1) != 0;
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  const dim3 grid(static_cast<unsigned>((p.dv + COLS * WARPS - 1) / (COLS * WARPS)),
                  static_cast<unsigned>(p.hv), static_cast<unsigned>(batch));
  if (p.dk <= 128)
    warp_kernel<4><<<grid, WARPS * 32, 0, s>>>(p);
  else
    warp_kernel<kMaxRows><<<grid, WARPS * 32, 0, s>>>(p);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("gated_delta_rule_update: %s", cudaGetErrorString(err));
}
