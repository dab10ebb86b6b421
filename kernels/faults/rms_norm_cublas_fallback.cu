// FALLBACK (GPU): correct, but most of its GPU time is a cuBLAS GEMM (loaded with dlopen, on a
// scratch matrix): target-DSL attribution must report a share of its own kernels well below 0.9
// (the paper's "correctness illusion": a library does the heavy lifting).
#include <cublas_v2.h>
#include <dlfcn.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "atrex/candidate.h"

namespace {

constexpr int kThreads = 256;

__global__ void rms_norm_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* out,
                                int64_t hidden, float eps) {
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * hidden;
  float ss = 0.f;
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    const float v = __bfloat162float(xr[h]);
    ss += v * v;
  }
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = ss;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = rsqrtf(partial[0] / static_cast<float>(hidden) + eps);
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    out[row * hidden + h] =
        __float2bfloat16_rn(__bfloat162float(xr[h]) * inv * __bfloat162float(w[h]));
  }
}

}  // namespace

using CreateFn = cublasStatus_t (*)(cublasHandle_t*);
using SetStreamFn = cublasStatus_t (*)(cublasHandle_t, cudaStream_t);
using SgemmFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                   int, const float*, const float*, int, const float*, int,
                                   const float*, float*, int);
cublasHandle_t g_handle = nullptr;
SetStreamFn g_set_stream = nullptr;
SgemmFn g_sgemm = nullptr;
float* g_scratch = nullptr;
constexpr int kN = 1024;

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  auto stream = static_cast<cudaStream_t>(launch->stream);
  if (!g_handle) {
    void* lib = dlopen("libcublas.so.13", RTLD_NOW);
    if (!lib) lib = dlopen("libcublas.so", RTLD_NOW);
    if (!lib) return 4;
    auto create = reinterpret_cast<CreateFn>(dlsym(lib, "cublasCreate_v2"));
    g_set_stream = reinterpret_cast<SetStreamFn>(dlsym(lib, "cublasSetStream_v2"));
    g_sgemm = reinterpret_cast<SgemmFn>(dlsym(lib, "cublasSgemm_v2"));
    if (!create || !g_set_stream || !g_sgemm || create(&g_handle) != CUBLAS_STATUS_SUCCESS)
      return 5;
    if (cudaMalloc(&g_scratch, 3ull * kN * kN * sizeof(float)) != cudaSuccess) return 6;
    cudaMemset(g_scratch, 0, 3ull * kN * kN * sizeof(float));
  }
  g_set_stream(g_handle, stream);
  const float one = 1.f, zero = 0.f;
  g_sgemm(g_handle, CUBLAS_OP_N, CUBLAS_OP_N, kN, kN, kN, &one, g_scratch, kN, g_scratch + kN * kN,
          kN, &zero, g_scratch + 2 * kN * kN, kN);
  rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(x->data), static_cast<const __nv_bfloat16*>(w->data),
      static_cast<__nv_bfloat16*>(out->data), hidden, eps);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
