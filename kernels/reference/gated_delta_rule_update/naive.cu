// gated_delta_rule_update reference re-expressed as a cuda candidate (atrex candidate ABI v1):
// one block per (batch, v head), one thread per state column j (value_dim <= 1024, key_dim
// <= 256); per token the block normalises q and k into shared memory, then every thread
// advances its fp32 column (kept in local memory) and writes out[j].
#include <cmath>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

constexpr int64_t kMaxKeyDim = 256;

__device__ float ld(const unsigned short* p, int64_t i) {
  return __bfloat162float(__ushort_as_bfloat16(p[i]));
}

struct Params {
  int64_t tokens, hq, hv, dk, dv, slots;
  float scale, sp_beta, sp_threshold;
  bool l2;
};

__global__ void update_kernel(const float* a_log, const unsigned short* a, const unsigned short* dt,
                              const unsigned short* q, const unsigned short* k,
                              const unsigned short* v, const unsigned short* bg, const int* idx,
                              unsigned short* out, float* fin, Params p) {
  __shared__ float qn[kMaxKeyDim], kn[kMaxKeyDim], norms[2];
  const int64_t head = blockIdx.x % p.hv, b = blockIdx.x / p.hv, j = threadIdx.x;
  if (idx[b] < 0 || idx[b] >= p.slots) return;  // uniform over the block
  const int64_t per = p.hv / p.hq > 1 ? p.hv / p.hq : 1;
  const int64_t qh = head / per < p.hq - 1 ? head / per : p.hq - 1;
  float* state = fin + (idx[b] * p.hv + head) * p.dk * p.dv + j;  // starts as initial_state
  float h[kMaxKeyDim];
  for (int64_t d = 0; d < p.dk; ++d) h[d] = state[d * p.dv];
  const float rate = -expf(a_log[head]);
  const float bias = ld(dt, head);
  for (int64_t t = 0; t < p.tokens; ++t) {
    const int64_t row = (b * p.tokens + t) * p.hv + head;
    const int64_t qk_row = ((b * p.tokens + t) * p.hq + qh) * p.dk;
    __syncthreads();  // the previous token's qn/kn are no longer read
    for (int64_t d = j; d < p.dk; d += blockDim.x) {
      qn[d] = ld(q, qk_row + d);
      kn[d] = ld(k, qk_row + d);
    }
    __syncthreads();
    if (j < 2) {  // two threads compute the two norms
      const float* x = j == 0 ? qn : kn;
      float ss = 0;
      for (int64_t d = 0; d < p.dk; ++d) ss += x[d] * x[d];
      norms[j] = p.l2 ? fmaxf(sqrtf(ss), 1e-6f) : 1.0f;
    }
    __syncthreads();
    const float x = ld(a, row) + bias;
    const float sp = x * p.sp_beta > p.sp_threshold ? x : log1pf(expf(x * p.sp_beta)) / p.sp_beta;
    const float decay = expf(sp * rate);
    const float beta = 1.0f / (1.0f + expf(-ld(bg, row)));
    float hk = 0;
    for (int64_t d = 0; d < p.dk; ++d) {
      h[d] *= decay;
      hk += h[d] * (kn[d] / norms[1]);
    }
    const float vn = (ld(v, row * p.dv + j) - hk) * beta;
    float o = 0;
    for (int64_t d = 0; d < p.dk; ++d) {
      h[d] += (kn[d] / norms[1]) * vn;
      o += h[d] * ((qn[d] / norms[0]) * p.scale);
    }
    out[row * p.dv + j] = __bfloat16_as_ushort(__float2bfloat16_rn(o));
  }
  for (int64_t d = 0; d < p.dk; ++d) state[d * p.dv] = h[d];
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* a_log = atrex_input(launch, "A_log");
  const DLTensor* a = atrex_input(launch, "a");
  const DLTensor* dt = atrex_input(launch, "dt_bias");
  const DLTensor* q = atrex_input(launch, "q");
  const DLTensor* k = atrex_input(launch, "k");
  const DLTensor* v = atrex_input(launch, "v");
  const DLTensor* bg = atrex_input(launch, "b");
  const DLTensor* idx = atrex_input(launch, "initial_state_indices");
  const DLTensor* out = atrex_output(launch, "out");
  const DLTensor* fin = atrex_output(launch, "final_state");
  if (!a_log || !a || !dt || !q || !k || !v || !bg || !idx || !out || !fin) return 1;
  Params p{q->shape[1],   q->shape[2], v->shape[2], q->shape[3], v->shape[3],
           fin->shape[0], 0,           0,           0,           true};
  if (p.dk > kMaxKeyDim || p.dv > 1024) return 2;
  p.scale = static_cast<float>(
      atrex_param_float(launch, "scale", 1.0 / std::sqrt(static_cast<double>(p.dk))));
  p.sp_beta = static_cast<float>(atrex_param_float(launch, "softplus_beta", 1.0));
  p.sp_threshold = static_cast<float>(atrex_param_float(launch, "softplus_threshold", 20.0));
  p.l2 = atrex_param_int(launch, "use_qk_l2norm", 1) != 0;
  const int64_t blocks = q->shape[0] * p.hv;
  update_kernel<<<static_cast<unsigned>(blocks), static_cast<unsigned>(p.dv), 0,
                  static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const float*>(a_log->data), static_cast<const unsigned short*>(a->data),
      static_cast<const unsigned short*>(dt->data), static_cast<const unsigned short*>(q->data),
      static_cast<const unsigned short*>(k->data), static_cast<const unsigned short*>(v->data),
      static_cast<const unsigned short*>(bg->data), static_cast<const int*>(idx->data),
      static_cast<unsigned short*>(out->data), static_cast<float*>(fin->data), p);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
