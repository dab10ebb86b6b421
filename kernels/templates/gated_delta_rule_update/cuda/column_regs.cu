// atrex-template: column_regs
// atrex-description: the recurrence with the fp32 state in registers: a block owns BV value columns of one head, each column split over DSPLIT adjacent lanes that hold dk / DSPLIT state rows (groups of 4 interleaved, read as float4); per token the two dots h^T k and h^T q come from one pass over the old state (o = decay h^T q + v' (k.q), so no second pass), combined over the DSPLIT lanes by shuffles, then one fused decay-and-rank-1 update; TC tokens of raw q, k, v and the per-token scalars (decay, beta, 1/||q||, 1/||k||, q.k, one warp per token) are staged in shared memory per chunk, so the token loop itself has no barrier and no global load
// atrex-param: BV = 32 | 16, 32
// atrex-param: DSPLIT = 4 | 4, 8
// atrex-param: TC = 32 | 16, 32
#ifndef BV
#define BV 32
#endif
#ifndef DSPLIT
#define DSPLIT 4
#endif
#ifndef TC
#define TC 32
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

constexpr int kMaxDk = 256;
constexpr int kThreads = BV * DSPLIT;
constexpr int kWarps = kThreads / 32;
static_assert(kThreads % 32 == 0 && kThreads <= 1024, "BV * DSPLIT");
static_assert(DSPLIT >= 1 && DSPLIT <= 32 && 128 / DSPLIT >= 4 && (DSPLIT & (DSPLIT - 1)) == 0, "DSPLIT");

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

// Shared staging of one chunk of TC tokens.
struct Chunk {
  alignas(16) float q[TC][kMaxDk];
  alignas(16) float k[TC][kMaxDk];
  float v[TC][BV];
  float decay[TC], beta[TC], iq[TC], ik[TC], qk[TC];
};

// Loads chunk [t0, t0 + n) of this (batch, head, column block) into c, then the per-token
// scalars (one warp per token).
// Rows dk..dpad-1 are zero, so the padded state rows stay zero and add nothing.
__device__ void stage(Chunk& c, const Params& p, int64_t bidx, int64_t head, int64_t qh, int64_t j0,
                      int64_t t0, int n, int dpad, float rate, float bias) {
  const int tid = threadIdx.x;
  for (int i = tid; i < n * dpad; i += kThreads) {
    const int r = i / dpad, d = i % dpad;
    const int64_t off = ((bidx * p.tokens + t0 + r) * p.hq + qh) * p.dk + d;
    c.q[r][d] = d < p.dk ? bf2f(__ldg(p.q + off)) : 0.f;
    c.k[r][d] = d < p.dk ? bf2f(__ldg(p.k + off)) : 0.f;
  }
  for (int i = tid; i < n * BV; i += kThreads) {
    const int r = i / BV, j = i % BV;
    c.v[r][j] = j0 + j < p.dv ? bf2f(__ldg(p.v + ((bidx * p.tokens + t0 + r) * p.hv + head) * p.dv + j0 + j)) : 0.f;
  }
  __syncthreads();
  const int warp = tid >> 5, lane = tid & 31;
  for (int r = warp; r < n; r += kWarps) {
    float sq = 0.f, sk = 0.f, qk = 0.f;
    for (int d = lane; d < p.dk; d += 32) {
      sq = fmaf(c.q[r][d], c.q[r][d], sq);
      sk = fmaf(c.k[r][d], c.k[r][d], sk);
      qk = fmaf(c.q[r][d], c.k[r][d], qk);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      sq += __shfl_xor_sync(0xffffffffu, sq, o);
      sk += __shfl_xor_sync(0xffffffffu, sk, o);
      qk += __shfl_xor_sync(0xffffffffu, qk, o);
    }
    if (lane == 0) {
      const int64_t row = (bidx * p.tokens + t0 + r) * p.hv + head;
      const float x = bf2f(p.a[row]) + bias;
      const float sp = x * p.sp_beta > p.sp_threshold ? x : log1pf(expf(x * p.sp_beta)) / p.sp_beta;
      c.decay[r] = expf(sp * rate);
      c.beta[r] = 1.0f / (1.0f + expf(-bf2f(p.b[row])));
      const float iq = p.l2 ? 1.0f / fmaxf(sqrtf(sq), 1e-6f) : 1.0f;
      const float ik = p.l2 ? 1.0f / fmaxf(sqrtf(sk), 1e-6f) : 1.0f;
      c.iq[r] = iq * p.scale;
      c.ik[r] = ik;
      c.qk[r] = qk * iq * ik * p.scale;
    }
  }
  __syncthreads();
}

// grid (ceil(dv / BV), hv, batch); thread (j, s): column j0 + j, state rows s, s + DSPLIT, ...
template <int SL>
__global__ void __launch_bounds__(kThreads)
    recurrent_kernel(Params p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Chunk& c = *reinterpret_cast<Chunk*>(smem_raw);
  const int64_t bidx = blockIdx.z, head = blockIdx.y, j0 = static_cast<int64_t>(blockIdx.x) * BV;
  const int s = threadIdx.x % DSPLIT, j = threadIdx.x / DSPLIT;
  const int64_t col = j0 + j;
  const bool live = col < p.dv;
  const int64_t qh = head / p.per < p.hq - 1 ? head / p.per : p.hq - 1;
  const int slot = p.idx[bidx];
  if (slot < 0 || slot >= p.slots) return;  // not a slot: nothing to advance (the host cannot see device indices)
  float* h = p.state + (static_cast<int64_t>(slot) * p.hv + head) * p.dk * p.dv;
  // State row of register i: groups of 4 consecutive rows interleaved over the DSPLIT lanes, so
  // each lane reads its k and q values as float4s and the DSPLIT lanes' reads are contiguous.
  auto row_of = [s](int i) { return ((i >> 2) * DSPLIT + s) * 4 + (i & 3); };
  float st[SL];
#pragma unroll
  for (int i = 0; i < SL; ++i) st[i] = (live && row_of(i) < p.dk) ? h[row_of(i) * p.dv + col] : 0.f;
  const float rate = -expf(p.a_log[head]);
  const float bias = bf2f(p.dt_bias[head]);
  for (int64_t t0 = 0; t0 < p.tokens; t0 += TC) {
    const int n = static_cast<int>(p.tokens - t0 < TC ? p.tokens - t0 : TC);
    stage(c, p, bidx, head, qh, j0, t0, n, SL * DSPLIT, rate, bias);
    for (int r = 0; r < n; ++r) {
      // Partial h_old^T k and h_old^T q over this lane's rows (two accumulators each).
      float hk0 = 0.f, hk1 = 0.f, hq0 = 0.f, hq1 = 0.f;
#pragma unroll
      for (int i4 = 0; i4 < SL / 4; ++i4) {
        const int d = (i4 * DSPLIT + s) * 4;
        const float4 kk = *reinterpret_cast<const float4*>(&c.k[r][d]);
        const float4 qq = *reinterpret_cast<const float4*>(&c.q[r][d]);
        hk0 = fmaf(st[4 * i4], kk.x, hk0);
        hk1 = fmaf(st[4 * i4 + 1], kk.y, hk1);
        hk0 = fmaf(st[4 * i4 + 2], kk.z, hk0);
        hk1 = fmaf(st[4 * i4 + 3], kk.w, hk1);
        hq0 = fmaf(st[4 * i4], qq.x, hq0);
        hq1 = fmaf(st[4 * i4 + 1], qq.y, hq1);
        hq0 = fmaf(st[4 * i4 + 2], qq.z, hq0);
        hq1 = fmaf(st[4 * i4 + 3], qq.w, hq1);
      }
      float hk = hk0 + hk1, hq = hq0 + hq1;
#pragma unroll
      for (int o = DSPLIT / 2; o > 0; o >>= 1) {
        hk += __shfl_xor_sync(0xffffffffu, hk, o);
        hq += __shfl_xor_sync(0xffffffffu, hq, o);
      }
      const float decay = c.decay[r], ik = c.ik[r];
      // v' = (v - decay h_old^T k_n) beta; h = decay h_old + k_n v'^T;
      // o = h^T q_n scale = decay h_old^T q_n scale + v' (k_n . q_n) scale.
      const float vp = (c.v[r][j] - decay * hk * ik) * c.beta[r];
      const float o = decay * hq * c.iq[r] + vp * c.qk[r];
      const float kv = vp * ik;
#pragma unroll
      for (int i4 = 0; i4 < SL / 4; ++i4) {
        const float4 kk = *reinterpret_cast<const float4*>(&c.k[r][(i4 * DSPLIT + s) * 4]);
        st[4 * i4] = fmaf(decay, st[4 * i4], kk.x * kv);
        st[4 * i4 + 1] = fmaf(decay, st[4 * i4 + 1], kk.y * kv);
        st[4 * i4 + 2] = fmaf(decay, st[4 * i4 + 2], kk.z * kv);
        st[4 * i4 + 3] = fmaf(decay, st[4 * i4 + 3], kk.w * kv);
      }
      if (s == 0 && live)
        p.out[((bidx * p.tokens + t0 + r) * p.hv + head) * p.dv + col] =
            __bfloat16_as_ushort(__float2bfloat16_rn(o));
    }
    __syncthreads();  // the chunk buffer is refilled next
  }
#pragma unroll
  for (int i = 0; i < SL; ++i)
    if (live && row_of(i) < p.dk) h[row_of(i) * p.dv + col] = st[i];
}

// One instantiation per state-row count, each with its own opt-in to the shared memory it needs.
template <int SL>
int launch_sl(const Params& p, dim3 grid, cudaStream_t s) {
  static bool attr_set = false;
  const int bytes = static_cast<int>(sizeof(Chunk));
  if (!attr_set) {
    const cudaError_t e = cudaFuncSetAttribute(recurrent_kernel<SL>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e != cudaSuccess) return fail("gated_delta_rule_update: %s", cudaGetErrorString(e));
    attr_set = true;
  }
  recurrent_kernel<SL><<<grid, kThreads, bytes, s>>>(p);
  return 0;
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
  if (p.dk > kMaxDk || p.dk < 1) return fail("gated_delta_rule_update: key_dim %lld > %d", (long long)p.dk, kMaxDk);
  if (fin->shape[1] != p.hv || fin->shape[2] != p.dk || fin->shape[3] != p.dv)
    return fail("gated_delta_rule_update: final_state must be [S, Hv, dk, dv]");
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
  const dim3 grid(static_cast<unsigned>((p.dv + BV - 1) / BV), static_cast<unsigned>(p.hv),
                  static_cast<unsigned>(batch));
  const int64_t sl = (p.dk + DSPLIT - 1) / DSPLIT;
  const int rc = sl <= 128 / DSPLIT ? launch_sl<128 / DSPLIT>(p, grid, s) : launch_sl<kMaxDk / DSPLIT>(p, grid, s);
  if (rc) return rc;
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail("gated_delta_rule_update: %s", cudaGetErrorString(err));
}
