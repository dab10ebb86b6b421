// Throwaway correctness harness for atrex templates: harness <op> <candidate.so>...
// Random bf16 inputs, NaN-poisoned outputs, reference row functors, per-shape max bf16-ulp error.
#include <dlfcn.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#ifdef GPU
#include <cuda_runtime.h>
#endif
#include "atrex/candidate.h"
#include "ops/activation_ops.h"
#include "ops/norm_ops.h"

using namespace atrex::problems::ops;
namespace num = atrex::num;

struct Shape { std::vector<int64_t> dims; };  // op-specific meaning
static int ulp_of(uint16_t a, uint16_t b) {
  auto mono = [](uint16_t h) { return (h & 0x8000) ? -int(h & 0x7fff) : int(h); };
  return std::abs(mono(a) - mono(b));
}
struct Buf {
  std::vector<uint16_t> host;
  std::vector<int64_t> shape;
  std::string name;
  void* dev = nullptr;   // base allocation
  uint16_t* data = nullptr;
};

static std::mt19937_64 rng(12345);
static void fill(Buf& b, double scale, double offset) {
  std::normal_distribution<double> nd(0, 1);
  for (auto& h : b.host) h = num::float_to_bf16(num::round_bf16(num::round_bf16((float)nd(rng)) * (float)scale) + (float)offset);
}
static void put(Buf& b, int off, bool is_out) {
  size_t bytes = (b.host.size() + 8) * 2;
#ifdef GPU
  cudaMalloc(&b.dev, bytes);
  b.data = (uint16_t*)b.dev + off;
  if (is_out) cudaMemset(b.dev, 0xff, bytes);
  else cudaMemcpy(b.data, b.host.data(), b.host.size() * 2, cudaMemcpyHostToDevice);
#else
  b.dev = malloc(bytes);
  b.data = (uint16_t*)b.dev + off;
  if (is_out) memset(b.dev, 0xff, bytes);
  else memcpy(b.data, b.host.data(), b.host.size() * 2);
#endif
}
static std::vector<uint16_t> get(const Buf& b, size_t extra = 0) {
  std::vector<uint16_t> r(b.host.size() + extra);
#ifdef GPU
  cudaMemcpy(r.data(), b.data, r.size() * 2, cudaMemcpyDeviceToHost);
#else
  memcpy(r.data(), b.data, r.size() * 2);
#endif
  return r;
}
static void release(Buf& b) {
#ifdef GPU
  cudaFree(b.dev);
#else
  free(b.dev);
#endif
}
static DLTensor tensor(Buf& b) {
  DLTensor t{};
  t.data = b.data;
#ifdef GPU
  t.device = {kDLCUDA, 0};
#else
  t.device = {kDLCPU, 0};
#endif
  t.ndim = (int)b.shape.size();
  t.dtype = {kDLBfloat, 16, 1};
  t.shape = b.shape.data();
  return t;
}

// Runs one op/shape/offset on one candidate; returns max ulp (or -1 on failure).
static int run_case(AtrexCandidateRunFn fn, AtrexCandidateErrorFn errfn, const std::string& op, const std::vector<int64_t>& d, int off, std::string& why) {
  std::vector<Buf> in, out;
  std::vector<AtrexParam> params;
  std::vector<std::string> pnames;
  auto mk = [](std::string n, std::vector<int64_t> s) { Buf b; b.name = n; b.shape = s; int64_t k = 1; for (auto v : s) k *= v; b.host.resize(k); return b; };
  auto ip = [&](const char* n, int64_t v) { AtrexParam p{}; p.name = n; p.kind = ATREX_PARAM_INT; p.int_value = v; params.push_back(p); };
  auto fp = [&](const char* n, double v) { AtrexParam p{}; p.name = n; p.kind = ATREX_PARAM_FLOAT; p.float_value = v; params.push_back(p); };
  int64_t T = d[0], H = d.size() > 1 ? d[1] : 0;
  if (op == "rms_norm") {
    in = {mk("x", {T, H}), mk("weight", {H})}; fill(in[0], 0.02, 0); fill(in[1], 0.02, 1.0);
    out = {mk("out", {T, H})}; ip("token_count", T); ip("hidden_size", H); fp("eps", 1e-6);
  } else if (op == "fused_add_rms_norm") {
    in = {mk("x", {T, H}), mk("residual", {T, H}), mk("weight", {H})}; fill(in[0], 0.02, 0); fill(in[1], 1, 0); fill(in[2], 0.02, 1.0);
    out = {mk("out", {T, H}), mk("residual", {T, H})}; ip("token_count", T); ip("hidden_size", H); fp("eps", 1e-6);
  } else if (op == "l2_norm") {
    in = {mk("x", {T, H})}; fill(in[0], 1, 0);
    out = {mk("out", {T, H})}; ip("num_tokens", T); ip("hidden_size", H); fp("eps", 1e-6);
  } else if (op == "silu_and_mul") {
    in = {mk("x", {T, H})}; fill(in[0], 2, 0);  // wider than randn so the exp tails get exercised
    out = {mk("out", {T, H / 2})};
    static int64_t lst[2]; lst[0] = T; lst[1] = H;
    AtrexParam p{}; p.name = "shape"; p.kind = ATREX_PARAM_INT_LIST; p.int_list = lst; p.int_list_length = 2; params.push_back(p);
  } else if (op == "moe_sum_reduce") {
    int64_t K = d[1]; H = d[2];
    in = {mk("expert_outputs", {T, K, H})}; fill(in[0], 0.02, 0);
    out = {mk("out", {T, H})}; ip("token_count", T); ip("top_k", K); ip("hidden_size", H); fp("routed_scaling_factor", d.size() > 3 ? 2.5 : 1.0);
    if (d.size() > 3) params.pop_back(), fp("routed_scaling_factor", 2.5);
  }
  for (auto& b : in) put(b, off, false);
  for (auto& b : out) put(b, off, true);
  std::vector<AtrexNamedTensor> tin, tout;
  for (auto& b : in) tin.push_back({b.name.c_str(), tensor(b)});
  for (auto& b : out) tout.push_back({b.name.c_str(), tensor(b)});
  AtrexLaunch L{};
  L.abi_version = ATREX_CANDIDATE_ABI_VERSION; L.operator_name = op.c_str(); L.shape_id = "t";
  L.inputs = tin.data(); L.num_inputs = (int)tin.size(); L.outputs = tout.data(); L.num_outputs = (int)tout.size();
  L.params = params.data(); L.num_params = (int)params.size();
#ifdef GPU
  cudaStream_t st; cudaStreamCreate(&st); L.stream = st;
#endif
  int rc = fn(&L);
#ifdef GPU
  cudaError_t e = cudaStreamSynchronize(st);
  cudaStreamDestroy(st);
  if (e != cudaSuccess) { why = std::string("cuda: ") + cudaGetErrorString(e); return -1; }
#endif
  if (rc != 0) { why = std::string("rc!=0: ") + (errfn ? errfn() : ""); return -1; }
  // reference
  std::vector<std::vector<uint16_t>> ref;
  for (auto& b : out) ref.push_back(std::vector<uint16_t>(b.host.size(), 0));
  if (op == "rms_norm") { RmsNormRow f{in[0].host.data(), in[1].host.data(), ref[0].data(), H, 1e-6f}; for (int64_t r = 0; r < T; ++r) f(r); }
  else if (op == "fused_add_rms_norm") { FusedAddRmsNormRow f{in[0].host.data(), in[1].host.data(), in[2].host.data(), ref[0].data(), ref[1].data(), H, 1e-6f}; for (int64_t r = 0; r < T; ++r) f(r); }
  else if (op == "l2_norm") { L2NormRow f{in[0].host.data(), ref[0].data(), H, 1e-6f}; for (int64_t r = 0; r < T; ++r) f(r); }
  else if (op == "silu_and_mul") { SiluAndMulRow f{in[0].host.data(), ref[0].data(), H, H / 2}; for (int64_t r = 0; r < T; ++r) f(r); }
  else { float sc = d.size() > 3 ? 2.5f : 1.0f; MoeSumReduceRow f{in[0].host.data(), ref[0].data(), d[1], d[2], sc}; for (int64_t r = 0; r < T; ++r) f(r); }
  int worst = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    auto got = get(out[i], 4);
    for (size_t j = 0; j < ref[i].size(); ++j) {
      uint16_t a = got[j], b = ref[i][j];
      float fa = num::bf16_to_float(a), fb = num::bf16_to_float(b);
      if (std::isnan(fa) != std::isnan(fb)) { why = "NaN at " + out[i].name + "[" + std::to_string(j) + "]"; worst = -1; break; }
      if (std::fabs(fa - fb) > 1e-2 + 5e-2 * std::fabs(fb)) { why = "tolerance at " + out[i].name + "[" + std::to_string(j) + "]"; worst = -1; break; }
      int u = ulp_of(a, b); if (u > worst) worst = u;
    }
    if (worst < 0) break;
    for (int j = 0; j < 4; ++j) if (got[ref[i].size() + j] != 0xffff) { why = "wrote past end of " + out[i].name; worst = -1; }
  }
  for (auto& b : in) { if (get(b) != b.host) { why = "input " + b.name + " modified"; worst = -1; } }
  for (auto& b : in) release(b);
  for (auto& b : out) release(b);
  return worst;
}

static std::vector<std::vector<int64_t>> shapes_for(const std::string& op) {
  if (op == "silu_and_mul") return {{3, 14}, {1, 1536}, {5, 1536}, {7, 8192}, {4, 3}, {2, 15}, {6, 18}, {33, 4096}, {2, 2}, {1, 2}, {3, 1}, {9, 1000}, {5, 1004}, {257, 2048}};
  if (op == "moe_sum_reduce") return {{3, 8, 2048}, {5, 8, 6}, {1, 8, 2048}, {4, 3, 7}, {2, 1, 16}, {7, 5, 1004}, {37, 8, 2048}, {3, 8, 2048, 1}, {9, 2, 130}, {2, 8, 1}};
  return {{1, 5120}, {3, 128}, {7, 1280}, {5, 7}, {4, 130}, {33, 2048}, {2, 8192}, {17, 7168}, {1, 1}, {9, 1000}, {5, 1004}, {257, 2048}, {3, 3}, {65, 128}, {2, 12000}};
}

#ifdef GPU
// bench op so dims...: average time of one call over 50 calls (after warm-up), on fresh random inputs.
static int bench(const std::string& op, const char* so, std::vector<int64_t> d) {
  void* h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!h) { printf("dlopen fail %s\n", dlerror()); return 1; }
  auto fn = (AtrexCandidateRunFn)dlsym(h, ATREX_CANDIDATE_ENTRY_POINT);
  std::vector<Buf> in, out; std::vector<AtrexParam> params;
  auto mk = [](std::string n, std::vector<int64_t> s) { Buf b; b.name = n; b.shape = s; int64_t k = 1; for (auto v : s) k *= v; b.host.resize(k); return b; };
  int64_t T = d[0], H = d.size() > 1 ? d[1] : 0;
  if (op == "rms_norm") { in = {mk("x", {T, H}), mk("weight", {H})}; out = {mk("out", {T, H})}; }
  else if (op == "fused_add_rms_norm") { in = {mk("x", {T, H}), mk("residual", {T, H}), mk("weight", {H})}; out = {mk("out", {T, H}), mk("residual", {T, H})}; }
  else if (op == "l2_norm") { in = {mk("x", {T, H})}; out = {mk("out", {T, H})}; }
  else if (op == "silu_and_mul") { in = {mk("x", {T, H})}; out = {mk("out", {T, H / 2})}; }
  else { in = {mk("expert_outputs", {T, d[1], d[2]})}; out = {mk("out", {T, d[2]})}; }
  double bytes = 0;
  for (auto& b : in) { fill(b, 0.5, 0); put(b, 0, false); bytes += b.host.size() * 2.0; }
  for (auto& b : out) { put(b, 0, true); bytes += b.host.size() * 2.0; }
  std::vector<AtrexNamedTensor> tin, tout;
  for (auto& b : in) tin.push_back({b.name.c_str(), tensor(b)});
  for (auto& b : out) tout.push_back({b.name.c_str(), tensor(b)});
  AtrexLaunch L{}; L.abi_version = 1; L.operator_name = op.c_str(); L.shape_id = "b";
  L.inputs = tin.data(); L.num_inputs = (int)tin.size(); L.outputs = tout.data(); L.num_outputs = (int)tout.size();
  cudaStream_t st; cudaStreamCreate(&st); L.stream = st;
  void* flush; cudaMalloc(&flush, 256 << 20);  // L2 flush between calls
  for (int i = 0; i < 3; ++i) fn(&L);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  float total = 0;
  for (int i = 0; i < 50; ++i) {
    cudaMemsetAsync(flush, i, 256 << 20, st);
    cudaEventRecord(e0, st); fn(&L); cudaEventRecord(e1, st); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1); total += ms;
  }
  double us = total / 50 * 1000;
  std::string sh; for (auto v : d) sh += std::to_string(v) + "x"; sh.pop_back();
  printf("BENCH %s %s %s %.2f us %.0f GB/s %s\n", op.c_str(), so, sh.c_str(), us, bytes / us / 1e3, cudaGetErrorString(cudaGetLastError()));
  for (auto& b : in) release(b);
  for (auto& b : out) release(b);
  cudaFree(flush); cudaStreamDestroy(st);
  return 0;
}
#endif

int main(int argc, char** argv) {
#ifdef GPU
  if (argc > 3 && std::string(argv[1]) == "bench") {
    std::vector<int64_t> d; for (int i = 4; i < argc; ++i) d.push_back(atoll(argv[i]));
    return bench(argv[2], argv[3], d);
  }
#endif
  if (argc < 3) { fprintf(stderr, "usage: harness op so...\n"); return 2; }
  std::string op = argv[1];
  int bad = 0;
  for (int a = 2; a < argc; ++a) {
    void* h = dlopen(argv[a], RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("FAIL %s dlopen: %s\n", argv[a], dlerror()); ++bad; continue; }
    auto fn = (AtrexCandidateRunFn)dlsym(h, ATREX_CANDIDATE_ENTRY_POINT);
    auto errfn = (AtrexCandidateErrorFn)dlsym(h, ATREX_CANDIDATE_ERROR_SYMBOL);
    if (!fn) { printf("FAIL %s no entry\n", argv[a]); ++bad; continue; }
    int worst = 0; std::string detail;
    for (auto& d : shapes_for(op)) {
      for (int off : {0, 1}) {
        std::string why;
        int u = run_case(fn, errfn, op, d, off, why);
        std::string sh; for (auto v : d) sh += std::to_string(v) + "x"; sh.pop_back();
        if (u < 0) { printf("FAIL %s shape %s off %d: %s\n", argv[a], sh.c_str(), off, why.c_str()); ++bad; worst = 99999; }
        else if (u > worst) { worst = u; detail = sh; }
      }
    }
    printf("%s %s max_ulp %d%s%s\n", worst >= 99999 ? "BAD" : "OK", argv[a], worst, detail.empty() ? "" : " at ", detail.c_str());
    fflush(stdout);
  }
  return bad ? 1 : 0;
}
