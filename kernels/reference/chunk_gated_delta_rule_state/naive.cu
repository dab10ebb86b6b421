// chunk_gated_delta_rule_state reference re-expressed as a cuda candidate (atrex candidate ABI
// v1): one thread per state column (batch, v head, j); columns evolve independently. The
// column (fp32) and its chunk accumulator live in local memory (key_dim <= 256).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

constexpr int64_t kMaxKeyDim = 256;

__device__ float ld(const unsigned short* p, int64_t i) {
  return __bfloat162float(__ushort_as_bfloat16(p[i]));
}
__device__ float rbf(float f) { return __bfloat162float(__float2bfloat16_rn(f)); }
__device__ unsigned short st(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

__global__ void state_kernel(const unsigned short* k, const unsigned short* w,
                             const unsigned short* u, const float* g, const int* idx,
                             unsigned short* h_out, unsigned short* v_new, float* fin,
                             int64_t batch, int64_t tokens, int64_t hk, int64_t hv, int64_t dk,
                             int64_t dv, int64_t cs, int64_t chunks, int64_t slots) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= batch * hv * dv) return;
  const int64_t j = i % dv, head = (i / dv) % hv, b = i / (dv * hv);
  if (idx[b] < 0 || idx[b] >= slots) return;
  const int64_t per = hv / hk > 1 ? hv / hk : 1;
  const int64_t kh = head / per < hk - 1 ? head / per : hk - 1;
  float* state = fin + (idx[b] * hv + head) * dk * dv + j;  // starts as initial_state
  float col[kMaxKeyDim], acc[kMaxKeyDim];
  for (int64_t d = 0; d < dk; ++d) col[d] = state[d * dv];
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t start = c * cs, end = start + cs < tokens ? start + cs : tokens;
    unsigned short* hc = h_out + ((b * chunks + c) * hv + head) * dk * dv + j;
    for (int64_t d = 0; d < dk; ++d) {
      hc[d * dv] = st(col[d]);
      acc[d] = 0;
    }
    const float g_last = g[(b * tokens + end - 1) * hv + head];
    for (int64_t t = start; t < end; ++t) {
      const int64_t row = (b * tokens + t) * hv + head;
      float dot = 0;
      for (int64_t d = 0; d < dk; ++d) dot += ld(w, row * dk + d) * rbf(col[d]);
      const float vt = ld(u, row * dv + j) - dot;
      v_new[row * dv + j] = st(vt);
      const float gd = g_last - g[row];
      const float vs = rbf(vt * (gd <= 0.0f ? expf(gd) : 0.0f));
      const unsigned short* krow = k + ((b * tokens + t) * hk + kh) * dk;
      for (int64_t d = 0; d < dk; ++d) acc[d] += ld(krow, d) * vs;
    }
    const float decay = expf(g_last);
    for (int64_t d = 0; d < dk; ++d) col[d] = col[d] * decay + acc[d];
  }
  for (int64_t d = 0; d < dk; ++d) state[d * dv] = col[d];
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* k = atrex_input(launch, "k");
  const DLTensor* w = atrex_input(launch, "w");
  const DLTensor* u = atrex_input(launch, "u");
  const DLTensor* g = atrex_input(launch, "g");
  const DLTensor* idx = atrex_input(launch, "initial_state_indices");
  const DLTensor* h_out = atrex_output(launch, "h");
  const DLTensor* v_out = atrex_output(launch, "v_new");
  const DLTensor* fin = atrex_output(launch, "final_state");
  if (!k || !w || !u || !g || !idx || !h_out || !v_out || !fin) return 1;
  const int64_t batch = k->shape[0], tokens = k->shape[1], hk = k->shape[2], dk = k->shape[3];
  const int64_t hv = u->shape[2], dv = u->shape[3], chunks = h_out->shape[1], slots = fin->shape[0];
  if (dk > kMaxKeyDim) return 2;
  const int64_t cs = atrex_param_int(launch, "chunk_size", 64);
  const int64_t n = batch * hv * dv;
  state_kernel<<<static_cast<unsigned>((n + 127) / 128), 128, 0,
                 static_cast<cudaStream_t>(launch->stream)>>>(
      static_cast<const unsigned short*>(k->data), static_cast<const unsigned short*>(w->data),
      static_cast<const unsigned short*>(u->data), static_cast<const float*>(g->data),
      static_cast<const int*>(idx->data), static_cast<unsigned short*>(h_out->data),
      static_cast<unsigned short*>(v_out->data), static_cast<float*>(fin->data), batch, tokens, hk,
      hv, dk, dv, cs, chunks, slots);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
