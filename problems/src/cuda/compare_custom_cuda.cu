// Device passes of the operators' own fp8 output comparisons (compare_custom_cuda.h): one
// grid-stride pass per comparison with warp reductions, as in compare_cuda.cu.
//
// Exactness: each kernel evaluates the host function's double expressions in the same order,
// with __dadd_rn/__dmul_rn where the host computes a + b * c (nvcc would contract that to an
// FMA; the host compiler targets plain x86-64 and does not). Maxima skip NaN, as the host's
// std::max(acc, NaN) keeps acc, and are combined as unsigned integers (non-negative doubles).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "atrex/problems/cuda_status.h"
#include "atrex/problems/numeric.h"
#include "compare_custom_cuda.h"

namespace atrex::problems::cuda {
namespace {

struct Stats {
  unsigned long long max_abs_bits;
  unsigned long long max_rel_bits;
  unsigned long long bad_count;
};

__device__ void fold_max(unsigned long long& acc, double v) {
  if (!isnan(v)) acc = max(acc, static_cast<unsigned long long>(__double_as_longlong(v)));
}

// Combines every thread's figures: per warp by shuffles, then one atomic per warp.
__device__ void reduce_into(Stats* s, unsigned long long max_abs, unsigned long long max_rel,
                            unsigned long long bad) {
  for (int o = 16; o > 0; o /= 2) {
    max_abs = max(max_abs, __shfl_down_sync(0xffffffffu, max_abs, o));
    max_rel = max(max_rel, __shfl_down_sync(0xffffffffu, max_rel, o));
    bad += __shfl_down_sync(0xffffffffu, bad, o);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicMax(&s->max_abs_bits, max_abs);
    atomicMax(&s->max_rel_bits, max_rel);
    atomicAdd(&s->bad_count, bad);
  }
}

// ops::fp8e4m3_step: 2^-9 below 2^-6, else 2^(e-4) where frexp gives a = m * 2^e.
__device__ double fp8e4m3_step(double q) {
  const double a = fabs(q);
  if (a < 0.015625) return 0.001953125;
  int e = 0;
  frexp(a, &e);
  return ldexp(1.0, e - 4);
}

// ops::compare_dequantised, element by element: q fp8 [n], scales fp32, one per `per_scale`
// consecutive elements.
__global__ void dequantised_pass(const uint8_t* qc, const float* sc, const uint8_t* qr,
                                 const float* sr, int64_t n, int64_t per_scale, double rtol,
                                 Stats* s) {
  unsigned long long max_abs = 0, max_rel = 0, bad = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t si = i / per_scale;
    const double vc = num::fp8e4m3_to_float(qc[i]), vr = num::fp8e4m3_to_float(qr[i]);
    const double dc = __dmul_rn(vc, sc[si]), dr = __dmul_rn(vr, sr[si]);
    bool ok;
    if (isnan(dr)) {
      ok = isnan(dc);
    } else if (!isfinite(dc)) {
      ok = false;
    } else {
      const double diff = fabs(__dsub_rn(dc, dr));
      fold_max(max_abs, diff);
      if (dr != 0) fold_max(max_rel, diff / fabs(dr));
      const double tol =
          __dadd_rn(__dmul_rn(fp8e4m3_step(vr), fabsf(sr[si])), __dmul_rn(rtol, fabs(dr)));
      ok = diff <= tol;
    }
    if (!ok) ++bad;
  }
  reduce_into(s, max_abs, max_rel, bad);
}

// ops::fp8_step(mag) = 2^(floor(log2(mag)) - 3) for mag >= 2^-6. mag is an fp8 e4m3 magnitude
// (<= 448, mantissa 1.000 to 1.875), so log2(mag) lies in [k, k + 0.91] for k = ilogb(mag): the
// host's floor(log2) is ilogb exactly, whatever the last-bit accuracy of either log2.
__device__ double fp8_step(double mag) {
  if (mag < 0.015625) return 0.001953125;
  return ldexp(1.0, ilogb(mag) - 3);
}

// ops::compare_fp8_output, element by element.
__global__ void fp8_output_pass(const uint8_t* cb, const uint8_t* rb, int64_t n, double atol,
                                double rtol, Stats* s) {
  unsigned long long max_abs = 0, max_rel = 0, bad = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const uint8_t c = cb[i], x = rb[i];
    const bool c_nan = (c & 0x7f) == 0x7f, x_nan = (x & 0x7f) == 0x7f;
    bool ok;
    if (x_nan || c_nan) {
      const bool same_sign = (c & 0x80) == (x & 0x80);
      ok = same_sign &&
           ((c_nan && x_nan) || (x_nan && (c & 0x7f) == 0x7e) || (c_nan && (x & 0x7f) == 0x7e));
    } else {
      const double cv = num::fp8e4m3_to_float(c), xv = num::fp8e4m3_to_float(x),
                   diff = fabs(__dsub_rn(cv, xv));
      fold_max(max_abs, diff);
      if (xv != 0) fold_max(max_rel, diff / fabs(xv));
      const double tol =
          __dadd_rn(__dadd_rn(atol, __dmul_rn(rtol, fabs(xv))), fp8_step(fmax(fabs(cv), fabs(xv))));
      ok = !(diff > tol);
    }
    if (!ok) ++bad;
  }
  reduce_into(s, max_abs, max_rel, bad);
}

unsigned grid_for(int64_t n, int threads) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads, 4096)));
}

// Device scratch for the reductions, allocated once per process.
Result<Stats*> scratch() {
  static Stats* stats = nullptr;
  if (!stats) ATREX_TRY(cuda_status(cudaMalloc(&stats, sizeof(Stats)), "comparison scratch"));
  return stats;
}

constexpr int kThreads = 256;

// Runs `launch(stats)` on `stream` over zeroed figures and reads them back.
template <class Launch>
Status run_pass(void* stream, CompareResult& result, const Launch& launch) {
  ATREX_ASSIGN_OR_RETURN(Stats * stats, scratch());
  auto st = static_cast<cudaStream_t>(stream);
  ATREX_TRY(cuda_status(cudaMemsetAsync(stats, 0, sizeof(Stats), st)));
  launch(stats, st);
  ATREX_TRY(cuda_last_launch("comparison kernel"));
  Stats host{};
  ATREX_TRY(cuda_status(cudaMemcpyAsync(&host, stats, sizeof host, cudaMemcpyDeviceToHost, st)));
  ATREX_TRY(cuda_status(cudaStreamSynchronize(st)));
  auto as_double = [](unsigned long long b) {
    double d;
    static_assert(sizeof d == sizeof b);
    std::memcpy(&d, &b, sizeof d);
    return d;
  };
  result.max_abs_error = as_double(host.max_abs_bits);
  result.max_rel_error = as_double(host.max_rel_bits);
  result.bad_count = static_cast<int64_t>(host.bad_count);
  result.pass = host.bad_count == 0;
  return ok();
}

}  // namespace

Status compare_fp8_dequantised(const TensorDesc& q, const TensorDesc& scale, const void* q_cand,
                               const void* scale_cand, const void* q_ref, const void* scale_ref,
                               double rtol, void* stream, CompareResult& result, bool& supported) {
  result = CompareResult{};
  supported = false;
  const int64_t n = q.numel(), scales = scale.numel();
  if (q.dtype != DType::kFP8E4M3 || scale.dtype != DType::kF32) return ok();
  if (n == 0) {
    supported = true;
    return ok();
  }
  if (scales <= 0 || n / scales == 0) return ok();
  supported = true;
  const int64_t per_scale = n / scales;
  return run_pass(stream, result, [&](Stats* s, cudaStream_t st) {
    dequantised_pass<<<grid_for(n, kThreads), kThreads, 0, st>>>(
        static_cast<const uint8_t*>(q_cand), static_cast<const float*>(scale_cand),
        static_cast<const uint8_t*>(q_ref), static_cast<const float*>(scale_ref), n, per_scale,
        rtol, s);
  });
}

Status compare_fp8_output(const TensorDesc& d, const void* cand, const void* ref, double atol,
                          double rtol, void* stream, CompareResult& result, bool& supported) {
  result = CompareResult{};
  supported = d.dtype == DType::kFP8E4M3;
  const int64_t n = d.numel();
  if (!supported || n == 0) return ok();
  return run_pass(stream, result, [&](Stats* s, cudaStream_t st) {
    fp8_output_pass<<<grid_for(n, kThreads), kThreads, 0, st>>>(
        static_cast<const uint8_t*>(cand), static_cast<const uint8_t*>(ref), n, atol, rtol, s);
  });
}

}  // namespace atrex::problems::cuda
