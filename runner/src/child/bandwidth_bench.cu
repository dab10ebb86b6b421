// Memory-bandwidth ceilings for `atrex-cuda-bench --measure` and the timer calibration's copy
// kernel (bandwidth_bench.h).
#include "bandwidth_bench.h"

#include <algorithm>
#include <string>

#include "atrex/problems/cuda_status.h"

namespace atrex::runner {
namespace {

using Json = nlohmann::json;

Status check(cudaError_t e, const char* where) { return problems::cuda::cuda_status(e, where); }

__global__ void copy_kernel(const int4* __restrict__ src, int4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

// Read-only stream: each thread folds its 16-byte loads into one word and stores it only when
// it equals a sentinel the memset data never folds to, so the loads stay and the traffic is
// reads.
__global__ void read_kernel(const int4* __restrict__ src, size_t n, int* sink) {
  int acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int4 v = src[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x5eed1e55) *sink = acc;
}

__global__ void write_kernel(int4* __restrict__ dst, size_t n) {
  const int4 v = make_int4(1, 2, 3, 4);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = v;
  }
}

std::string fmt_variant(int threads, int waves) {
  return std::to_string(threads) + " threads x " + std::to_string(waves) + " waves";
}

}  // namespace

Status launch_copy(const int4* src, int4* dst, size_t n, unsigned blocks, int threads,
                   cudaStream_t stream) {
  copy_kernel<<<blocks, threads, 0, stream>>>(src, dst, n);
  return check(cudaGetLastError(), "copy_kernel");
}

// Best rate in bytes/s of `traffic_bytes` moved per call of `launch`, over `rounds` rounds of
// 5 back-to-back calls (round 0 warms up), timed with events.
template <typename Launch>
Result<double> best_rate(double traffic_bytes, int rounds, Launch launch) {
  cudaEvent_t s, e;
  ATREX_TRY(check(cudaEventCreate(&s), "event"));
  ATREX_TRY(check(cudaEventCreate(&e), "event"));
  double best = 0;
  Status st = ok();
  for (int r = 0; r < rounds + 1 && st; ++r) {
    st = check(cudaEventRecord(s), "record");
    for (int i = 0; i < 5 && st; ++i) st = launch();
    if (st) st = check(cudaEventRecord(e), "record");
    if (st) st = check(cudaEventSynchronize(e), "sync");
    float ms = 0;
    if (st) st = check(cudaEventElapsedTime(&ms, s, e), "elapsed");
    if (st && r > 0) best = std::max(best, 5.0 * traffic_bytes / (ms * 1e-3));
  }
  cudaEventDestroy(s);
  cudaEventDestroy(e);
  if (!st) return tl::unexpected(st.error());
  return best;
}

// Device-to-device copy bandwidth in bytes/s (read + write) of cudaMemcpyAsync, best of `rounds`.
Result<double> copy_bandwidth(size_t bytes, int rounds) {
  void *a = nullptr, *b = nullptr;
  ATREX_TRY(check(cudaMalloc(&a, bytes), "cudaMalloc"));
  ATREX_TRY(check(cudaMalloc(&b, bytes), "cudaMalloc"));
  ATREX_TRY(check(cudaMemset(a, 1, bytes), "cudaMemset"));
  auto rate = best_rate(2.0 * static_cast<double>(bytes), rounds, [&] {
    return check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice), "copy");
  });
  cudaFree(a);
  cudaFree(b);
  return rate;
}

// The memory ceiling of the roofline (issue 14 item 4: honest kernels must stay under the
// measured profile). One figure cannot be it: cudaMemcpy, a read+write kernel, a read-only
// stream and a write-only stream reach different rates (H200, 2026-11-30: memcpy 4.24 TB/s,
// read+write kernels ~4.27, while the 2 GiB memcpy alone gave 4.16). Every variant over 1 and
// 2 GiB buffers (far past the L2), grid sizes of 1 to 8 waves of the SMs and block sizes 256 to
// 1024; the ceiling is the best of all. Returns {"variants": [...], "best_bytes_per_s", "best"}.
Result<Json> memory_ceiling(int sm_count, int rounds) {
  Json variants = Json::array();
  double best = 0;
  std::string best_name;
  auto note = [&](const std::string& name, size_t bytes, double rate) {
    variants.push_back(Json{{"variant", name}, {"bytes", bytes}, {"bytes_per_s", rate}});
    if (rate > best) {
      best = rate;
      best_name = name;
    }
  };
  for (size_t bytes : {size_t{1} << 30, size_t{2} << 30}) {
    ATREX_ASSIGN_OR_RETURN(double memcpy_rate, copy_bandwidth(bytes, rounds));
    note("cudaMemcpy", bytes, memcpy_rate);
    int4 *a = nullptr, *b = nullptr;
    int* sink = nullptr;
    ATREX_TRY(check(cudaMalloc(&a, bytes), "cudaMalloc"));
    ATREX_TRY(check(cudaMalloc(&b, bytes), "cudaMalloc"));
    ATREX_TRY(check(cudaMalloc(&sink, sizeof(int)), "cudaMalloc"));
    ATREX_TRY(check(cudaMemset(a, 1, bytes), "cudaMemset"));
    const size_t n = bytes / sizeof(int4);
    for (int threads : {256, 512, 1024}) {
      int per_sm = 0;
      ATREX_TRY(check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, copy_kernel, threads,
                                                                     0),
                      "occupancy"));
      for (int waves : {1, 2, 4, 8}) {
        const unsigned blocks = static_cast<unsigned>(sm_count *
                                                      std::max(per_sm, 1) * waves);
        const std::string tag = fmt_variant(threads, waves);
        ATREX_ASSIGN_OR_RETURN(double copy, best_rate(2.0 * bytes, rounds, [&] {
          copy_kernel<<<blocks, threads>>>(a, b, n);
          return check(cudaGetLastError(), "copy_kernel");
        }));
        note("copy_kernel " + tag, bytes, copy);
        ATREX_ASSIGN_OR_RETURN(double read, best_rate(1.0 * bytes, rounds, [&] {
          read_kernel<<<blocks, threads>>>(a, n, sink);
          return check(cudaGetLastError(), "read_kernel");
        }));
        note("read_kernel " + tag, bytes, read);
        ATREX_ASSIGN_OR_RETURN(double write, best_rate(1.0 * bytes, rounds, [&] {
          write_kernel<<<blocks, threads>>>(b, n);
          return check(cudaGetLastError(), "write_kernel");
        }));
        note("write_kernel " + tag, bytes, write);
      }
    }
    cudaFree(a);
    cudaFree(b);
    cudaFree(sink);
  }
  return Json{{"variants", std::move(variants)}, {"best_bytes_per_s", best}, {"best", best_name}};
}

}  // namespace atrex::runner
