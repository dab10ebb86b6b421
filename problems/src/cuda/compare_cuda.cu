// The correctness gate's comparison on device memory (compare.h semantics). Two grid-stride
// passes: the reference's magnitude (for the low-signal rule), then the element-wise test.
// Sums and maxima are reduced per warp and combined with one atomic per warp; maxima of
// non-negative doubles are combined as unsigned integers (IEEE order is integer order there).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "atrex/problems/compare.h"
#include "atrex/problems/cuda_ops.h"
#include "atrex/problems/cuda_status.h"
#include "atrex/problems/numeric.h"

namespace atrex::problems::cuda {
namespace {

struct Stats {
  unsigned long long ref_max_bits;     // max |r| over finite r (double bits)
  unsigned long long ref_not_zero_ok;  // count of finite r an all-zero output would fail on
  unsigned long long max_abs_bits;
  unsigned long long max_rel_bits;
  unsigned long long bad_count;
};

__device__ double load(DType dtype, const void* data, int64_t i) {
  switch (dtype) {
    case DType::kBF16: return num::bf16_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::kF16: return num::fp16_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::kF32: return static_cast<const float*>(data)[i];
    case DType::kF64: return static_cast<const double*>(data)[i];
    case DType::kI32: return static_cast<const int32_t*>(data)[i];
    case DType::kI64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case DType::kFP8E4M3: return num::fp8e4m3_to_float(static_cast<const uint8_t*>(data)[i]);
    case DType::kU8:
    case DType::kBool: return static_cast<const uint8_t*>(data)[i];
  }
  return 0;
}

__device__ unsigned long long warp_max(unsigned long long v) {
  for (int o = 16; o > 0; o /= 2) v = max(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;
}
__device__ unsigned long long warp_sum(unsigned long long v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}
__device__ unsigned long long bits(double d) {
  return static_cast<unsigned long long>(__double_as_longlong(d));
}

__global__ void reference_pass(DType dtype, const void* ref, int64_t n, double atol, double rtol,
                               Stats* s) {
  unsigned long long mx = 0, not_ok = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const double r = load(dtype, ref, i);
    if (isfinite(r)) {
      const double a = fabs(r);
      mx = max(mx, bits(a));
      if (a > __dadd_rn(atol, __dmul_rn(rtol, a))) ++not_ok;
    }
  }
  mx = warp_max(mx);
  not_ok = warp_sum(not_ok);
  if ((threadIdx.x & 31) == 0) {
    atomicMax(&s->ref_max_bits, mx);
    atomicAdd(&s->ref_not_zero_ok, not_ok);
  }
}

__global__ void compare_pass(DType dtype, bool integer, const void* cand, const void* ref,
                             int64_t n, const double* abs_tol_p, double rtol, Stats* s) {
  const double abs_tol = *abs_tol_p;
  unsigned long long max_abs = 0, max_rel = 0, bad = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const double c = load(dtype, cand, i);
    const double r = load(dtype, ref, i);
    bool ok;
    if (integer) {
      ok = c == r;
    } else if (isnan(r)) {
      ok = isnan(c);
    } else if (isinf(r)) {
      ok = c == r;
    } else if (!isfinite(c)) {
      ok = false;
    } else {
      const double diff = fabs(c - r);
      max_abs = max(max_abs, bits(diff));
      if (r != 0) max_rel = max(max_rel, bits(diff / fabs(r)));
      ok = diff <= __dadd_rn(abs_tol, __dmul_rn(rtol, fabs(r)));
    }
    if (!ok) ++bad;
  }
  max_abs = warp_max(max_abs);
  max_rel = warp_max(max_rel);
  bad = warp_sum(bad);
  if ((threadIdx.x & 31) == 0) {
    atomicMax(&s->max_abs_bits, max_abs);
    atomicMax(&s->max_rel_bits, max_rel);
    atomicAdd(&s->bad_count, bad);
  }
}

// abs_tol = low-signal ? atol * ref_max : atol (compare.h), decided on the device so the two
// passes need no host round trip.
__global__ void choose_tolerance(bool integer, int64_t n, double atol, const Stats* s,
                                 double* abs_tol) {
  const double ref_max = __longlong_as_double(static_cast<long long>(s->ref_max_bits));
  const bool low_signal = !integer && n > 0 && is_low_signal(s->ref_not_zero_ok == 0, ref_max, atol);
  *abs_tol = low_signal ? atol * ref_max : atol;
}

// `words` 8-byte words compared as words (0 when a or b is not 8-byte aligned: a guard region
// right after an output of odd byte length), the rest byte by byte.
__global__ void first_difference_kernel(const uint8_t* a, const uint8_t* b, size_t bytes,
                                        size_t words, unsigned long long* first) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const auto* wa = reinterpret_cast<const unsigned long long*>(a);
  const auto* wb = reinterpret_cast<const unsigned long long*>(b);
  for (size_t w = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; w < words;
       w += stride) {
    if (wa[w] != wb[w]) {
      for (size_t k = 0; k < 8; ++k) {
        if (a[w * 8 + k] != b[w * 8 + k]) {
          atomicMin(first, static_cast<unsigned long long>(w * 8 + k));
          break;
        }
      }
    }
  }
  for (size_t i = words * 8 + static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < bytes;
       i += stride) {
    if (a[i] != b[i]) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

unsigned grid_for(int64_t n, int threads) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads, 4096)));
}

// Device scratch for the reductions, allocated once per process.
struct Scratch {
  Stats* stats = nullptr;
  double* abs_tol = nullptr;
  unsigned long long* first = nullptr;
  Status init() {
    if (first) return ok();
    if (!stats) ATREX_TRY(cuda_status(cudaMalloc(&stats, sizeof(Stats)), "comparison scratch"));
    if (!abs_tol)
      ATREX_TRY(cuda_status(cudaMalloc(&abs_tol, sizeof(double)), "comparison scratch"));
    return cuda_status(cudaMalloc(&first, sizeof(unsigned long long)), "comparison scratch");
  }
};
Scratch& scratch() {
  static Scratch s;
  return s;
}

}  // namespace

Status compare_output(const TensorDesc& desc, const void* candidate, const void* reference,
                      double atol, double rtol, void* stream, CompareResult& result) {
  result = CompareResult{};
  const int64_t n = desc.numel();
  if (n == 0) return ok();
  auto st = static_cast<cudaStream_t>(stream);
  Scratch& sc = scratch();
  ATREX_TRY(sc.init());
  ATREX_TRY(cuda_status(cudaMemsetAsync(sc.stats, 0, sizeof(Stats), st)));
  const bool integer = is_integer_dtype(desc.dtype);
  constexpr int kThreads = 256;
  reference_pass<<<grid_for(n, kThreads), kThreads, 0, st>>>(desc.dtype, reference, n, atol, rtol,
                                                             sc.stats);
  choose_tolerance<<<1, 1, 0, st>>>(integer, n, atol, sc.stats, sc.abs_tol);
  compare_pass<<<grid_for(n, kThreads), kThreads, 0, st>>>(
      desc.dtype, integer, candidate, reference, n, sc.abs_tol, rtol, sc.stats);
  // A launch that failed (configuration, no kernel image) would leave zeroed figures: a pass.
  ATREX_TRY(cuda_last_launch("comparison kernels"));
  Stats host{};
  ATREX_TRY(cuda_status(cudaMemcpyAsync(&host, sc.stats, sizeof host, cudaMemcpyDeviceToHost, st)));
  ATREX_TRY(cuda_status(cudaStreamSynchronize(st)));
  auto as_double = [](unsigned long long b) {
    double d;
    static_assert(sizeof d == sizeof b);
    std::memcpy(&d, &b, sizeof d);
    return d;
  };
  result.low_signal =
      !integer && is_low_signal(host.ref_not_zero_ok == 0, as_double(host.ref_max_bits), atol);
  result.max_abs_error = as_double(host.max_abs_bits);
  result.max_rel_error = as_double(host.max_rel_bits);
  result.bad_count = static_cast<int64_t>(host.bad_count);
  result.pass = host.bad_count == 0;
  return ok();
}

Result<int64_t> first_difference(const void* a, const void* b, size_t bytes, void* stream) {
  if (bytes == 0) return int64_t{-1};
  auto st = static_cast<cudaStream_t>(stream);
  Scratch& sc = scratch();
  ATREX_TRY(sc.init());
  const unsigned long long none = ~0ull;
  ATREX_TRY(cuda_status(cudaMemcpyAsync(sc.first, &none, sizeof none, cudaMemcpyHostToDevice, st)));
  constexpr int kThreads = 256;
  const bool aligned =
      (reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) % 8 == 0;
  const size_t words = aligned ? bytes / 8 : 0;
  first_difference_kernel<<<grid_for(static_cast<int64_t>(aligned ? words + 1 : bytes), kThreads),
                            kThreads, 0, st>>>(static_cast<const uint8_t*>(a),
                                               static_cast<const uint8_t*>(b), bytes, words,
                                               sc.first);
  ATREX_TRY(cuda_last_launch("first-difference kernel"));
  unsigned long long first = none;
  ATREX_TRY(
      cuda_status(cudaMemcpyAsync(&first, sc.first, sizeof first, cudaMemcpyDeviceToHost, st)));
  ATREX_TRY(cuda_status(cudaStreamSynchronize(st)));
  return first != none ? static_cast<int64_t>(first) : int64_t{-1};
}

}  // namespace atrex::problems::cuda
