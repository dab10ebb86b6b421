// atrex-template: persistent_rows
// atrex-description: a persistent grid (CTAS_PER_SM resident blocks per SM) of ROW_THREADS-lane groups, each walking rows with a stride; the next row's x and z packs (one 2*VEC-byte pack of each per lane, the rest re-read) are loaded before the current row is reduced and written, so loads stay in flight across rows
// atrex-param: ROW_THREADS = 16 | 4, 8, 16
// atrex-param: CTAS_PER_SM = 4 | 2, 4
// atrex-param: VEC = 8 | 4, 8
#ifndef ROW_THREADS
#define ROW_THREADS 16
#endif
#ifndef CTAS_PER_SM
#define CTAS_PER_SM 4
#endif
#ifndef VEC
#define VEC 8
#endif
#define BLOCK_THREADS 256

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <cstring>

#include "atrex/candidate_util.h"

static_assert(ROW_THREADS >= 1 && ROW_THREADS <= 32 && (ROW_THREADS & (ROW_THREADS - 1)) == 0,
              "ROW_THREADS");
static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "VEC");

namespace {

using atrex::cand::fail;
using atrex::cand::kBF16;
using atrex::cand::aligned;

// V consecutive bf16 values (as bits), aligned like the word that moves them.
template <int V>
struct alignas(2 * V) Pack {
  uint16_t h[V];
};

// The machine word that moves V bf16 values in one access (V = 8: a 16-byte load/store).
template <int V>
struct Word;
template <>
struct Word<8> {
  using T = uint4;
};
template <>
struct Word<4> {
  using T = uint2;
};
template <>
struct Word<2> {
  using T = unsigned;
};
template <>
struct Word<1> {
  using T = unsigned short;
};

// Read-only-cache load of an input.
template <int V>
__device__ __forceinline__ Pack<V> load(const uint16_t* p) {
  const typename Word<V>::T u = __ldg(reinterpret_cast<const typename Word<V>::T*>(p));
  Pack<V> r;
  memcpy(&r, &u, sizeof r);
  return r;
}
template <int V>
__device__ __forceinline__ void store(uint16_t* p, const Pack<V>& v) {
  typename Word<V>::T u;
  memcpy(&u, &v, sizeof u);
  *reinterpret_cast<typename Word<V>::T*>(p) = u;
}
__device__ __forceinline__ float bf2f(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
// Round-to-nearest-even; pairs go through one packed cvt.rn.bf16x2.f32.
template <int V>
__device__ __forceinline__ Pack<V> to_bf16(const float (&f)[V]) {
  Pack<V> o;
  if constexpr (V == 1)
    o.h[0] = __bfloat16_as_ushort(__float2bfloat16_rn(f[0]));
  else {
#pragma unroll
    for (int e = 0; e < V; e += 2) {
      const __nv_bfloat162 b = __floats2bfloat162_rn(f[e], f[e + 1]);
      memcpy(&o.h[e], &b, 4);
    }
  }
  return o;
}

struct Mode {
  bool norm_before_gate;
  bool sigmoid;
};

__device__ __forceinline__ float act(float v, bool sigmoid) {
  const float e = expf(-v);
  return sigmoid ? 1.0f / (1.0f + e) : v / (1.0f + e);
}

// The value whose squares are summed (x, or x * act(z) when gating first) and the gate factor
// applied after the norm (act(z), or 1).
template <int V>
__device__ __forceinline__ void prepare(const Pack<V>& x, const Pack<V>& z, Mode m, float (&in)[V],
                                        float (&gate)[V], float& ss) {
#pragma unroll
  for (int e = 0; e < V; ++e) {
    const float a = act(bf2f(z.h[e]), m.sigmoid);
    const float v = bf2f(x.h[e]);
    in[e] = m.norm_before_gate ? v : v * a;
    gate[e] = m.norm_before_gate ? a : 1.0f;
    ss = fmaf(in[e], in[e], ss);
  }
}
// out = ((in * rstd) * w) * gate, the reference's order.
template <int V>
__device__ __forceinline__ Pack<V> finish(const float (&in)[V], const float (&gate)[V],
                                          const Pack<V>& w, float rstd, bool gated_after) {
  float f[V];
#pragma unroll
  for (int e = 0; e < V; ++e) {
    const float o = (in[e] * rstd) * bf2f(w.h[e]);
    f[e] = gated_after ? o * gate[e] : o;
  }
  return to_bf16<V>(f);
}

constexpr int kRowsPerBlock = BLOCK_THREADS / ROW_THREADS;

// hidden % V == 0 and all row bases 2V-byte aligned (checked by the host). Every group runs the
// same number of loop trips (rows beyond the end are inactive but keep their lanes for the
// shuffle); pack `lane` of the next row is prefetched into registers.
template <int V>
__global__ void __launch_bounds__(BLOCK_THREADS)
    gated_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,
                 const uint16_t* __restrict__ z, uint16_t* __restrict__ out, int64_t rows,
                 int hidden, float eps, Mode m) {
  const int lane = static_cast<int>(threadIdx.x) % ROW_THREADS;
  const int64_t groups = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / ROW_THREADS;
  const int64_t trips = (rows + groups - 1) / groups;
  const int nvec = hidden / V;
  const bool has0 = lane < nvec;
  Pack<V> nx{}, nz{};
  if (first < rows && has0) {
    nx = load<V>(x + first * hidden + lane * V);
    nz = load<V>(z + first * hidden + lane * V);
  }
  for (int64_t k = 0; k < trips; ++k) {
    const int64_t row = first + k * groups;
    const bool active = row < rows;
    const int64_t base = (active ? row : 0) * hidden;
    const Pack<V> cx = nx, cz = nz;
    const int64_t next = row + groups;
    if (next < rows && has0) {
      nx = load<V>(x + next * hidden + lane * V);
      nz = load<V>(z + next * hidden + lane * V);
    }
    float in[V], gate[V];
    float ss = 0.f;
    if (active && has0) prepare(cx, cz, m, in, gate, ss);
    for (int i = ROW_THREADS + lane; active && i < nvec; i += ROW_THREADS) {
      float a[V], g[V];
      prepare(load<V>(x + base + i * V), load<V>(z + base + i * V), m, a, g, ss);
    }
#pragma unroll
    for (int o = ROW_THREADS / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (!active) continue;
    const float rstd = 1.0f / sqrtf(ss / static_cast<float>(hidden) + eps);
    if (has0) store<V>(out + base + lane * V, finish(in, gate, load<V>(w + lane * V), rstd, m.norm_before_gate));
    for (int i = ROW_THREADS + lane; i < nvec; i += ROW_THREADS) {
      float a[V], g[V], unused = 0.f;
      prepare(load<V>(x + base + i * V), load<V>(z + base + i * V), m, a, g, unused);
      store<V>(out + base + i * V, finish(a, g, load<V>(w + i * V), rstd, m.norm_before_gate));
    }
  }
}

template <int V>
void launch_v(const uint16_t* x, const uint16_t* w, const uint16_t* z, uint16_t* out, int64_t rows,
              int hidden, float eps, Mode m, cudaStream_t s) {
  int sms = 0, dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const int64_t resident = static_cast<int64_t>(sms > 0 ? sms : 132) * CTAS_PER_SM;
  if (blocks > resident) blocks = resident;
  gated_kernel<V><<<static_cast<unsigned>(blocks), BLOCK_THREADS, 0, s>>>(x, w, z, out, rows, hidden, eps, m);
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

// x, z [rows, H], weight [H] (bf16) -> out [rows, H] bf16.
ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  atrex::cand::Tensors ts(launch, "gated_rms_norm");
  const DLTensor* x = ts.input("x", kBF16, 2);
  const DLTensor* w = ts.input("weight", kBF16, 1);
  const DLTensor* z = ts.input("z", kBF16, 2);
  const DLTensor* o = ts.output("out", kBF16, 2);
  ts.same_dims(x, z);
  ts.same_dims(x, o);
  if (!ts.ok()) return ts.failed();
  if (w->shape[0] != x->shape[1]) return fail("gated_rms_norm: weight must be [hidden_size]");
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  if (rows > 0x7fffffff || hidden > 0x7fffffff) return fail("gated_rms_norm: too large");
  const AtrexParam* a = atrex_param(launch, "activation");
  const char* act_name = a && a->string_value ? a->string_value : "silu";
  const bool sigmoid = std::strcmp(act_name, "sigmoid") == 0;
  if (!sigmoid && std::strcmp(act_name, "silu") != 0 && std::strcmp(act_name, "swish") != 0)
    return fail("gated_rms_norm: activation \"%s\" is not silu, swish or sigmoid", act_name);
  if (rows == 0 || hidden == 0) return 0;
  const Mode m{atrex_param_int(launch, "norm_before_gate", 1) != 0, sigmoid};
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const auto* xp = static_cast<const uint16_t*>(x->data);
  const auto* wp = static_cast<const uint16_t*>(w->data);
  const auto* zp = static_cast<const uint16_t*>(z->data);
  auto* op = static_cast<uint16_t*>(o->data);
  int v = VEC;
  while (v > 1 && !(hidden % v == 0 && aligned(xp, 2 * v) && aligned(wp, 2 * v) && aligned(zp, 2 * v) &&
                    aligned(op, 2 * v)))
    v /= 2;
  cudaStream_t s = static_cast<cudaStream_t>(launch->stream);
  const int h = static_cast<int>(hidden);
  if (VEC >= 8 && v == 8)
    launch_v<(VEC >= 8 ? 8 : 1)>(xp, wp, zp, op, rows, h, eps, m, s);
  else if (VEC >= 4 && v == 4)
    launch_v<(VEC >= 4 ? 4 : 1)>(xp, wp, zp, op, rows, h, eps, m, s);
  else if (v == 2)
    launch_v<2>(xp, wp, zp, op, rows, h, eps, m, s);
  else
    launch_v<1>(xp, wp, zp, op, rows, h, eps, m, s);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : fail(cudaGetErrorString(err));
}
