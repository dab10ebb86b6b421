// The synthetic trace of `atrex bench ingest` (ingest.h).
#include <zlib.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "atrex/ingest/ingest.h"

namespace atrex::ingest {
namespace {

struct Op {
  const char* op;
  const char* kernel;
  double kernel_us;
};

class Writer {
 public:
  explicit Writer(gzFile f) : f_(f) {}
  bool put(const std::string& s) {
    bytes_ += s.size();
    return gzwrite(f_, s.data(), static_cast<unsigned>(s.size())) == static_cast<int>(s.size());
  }
  uint64_t bytes() const { return bytes_; }

 private:
  gzFile f_;
  uint64_t bytes_ = 0;
};

}  // namespace

Result<uint64_t> write_synthetic_trace(const std::filesystem::path& path, const SyntheticTrace& spec) {
  if (spec.ranks < 1 || spec.steps < 1) return invalid_input("synthetic trace: ranks and steps must be >= 1");
  gzFile f = gzopen(path.c_str(), spec.gzip ? "wb6" : "wT");
  if (f == nullptr) return io_error(fmt::format("{}: cannot create: {}", path.string(), std::strerror(errno)));
  Writer w(f);
  const Op ops[] = {{"_C::rms_norm", "void vllm::rms_norm_kernel<c10::BFloat16, 8>", 3.1},
                    {"aten::mm", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 41.0},
                    {"vllm::unified_attention_with_output", "kernel_unified_attention_2d", 22.5},
                    {"_C::silu_and_mul", "void vllm::act_and_mul_kernel<c10::BFloat16>", 4.2},
                    {"aten::add_", "void at::native::vectorized_elementwise_kernel<4>", 1.7}};
  constexpr uint64_t kBytesPerOp = 757;  // measured: one op's three events, as written below
  const uint64_t per_layer = kBytesPerOp * std::size(ops);
  const uint64_t layers = std::max<uint64_t>(
      1, spec.target_bytes / (per_layer * static_cast<uint64_t>(spec.steps) * static_cast<uint64_t>(spec.ranks)));
  bool ok = w.put("{\"schemaVersion\": 1, \"traceEvents\": [\n");
  bool first = true;
  auto event = [&](const std::string& e) {
    ok = ok && w.put(first ? e : ",\n" + e);
    first = false;
  };
  for (int r = 0; r < spec.ranks && ok; ++r) {
    const int pid = 1000 + r;
    double t = 1000.0 + 300.0 * r;
    int64_t corr = 1, ext = 1;
    for (int s = 0; s < spec.steps && ok; ++s) {
      const bool prefill = s % 2 == 0;
      const int64_t tokens = prefill ? 2048 : 64;
      const double step_start = t;
      std::vector<std::string> gpu;
      for (uint64_t l = 0; l < layers && ok; ++l) {
        for (const Op& op : ops) {
          const std::string dims =
              op.op == std::string("aten::mm")
                  ? fmt::format("[[{}, 4096], [4096, 4096]]", tokens)
                  : fmt::format("[[{}, 4096], [{}, 4096], [4096], []]", tokens, tokens);
          event(fmt::format(
              "{{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"{}\", \"pid\": {}, \"tid\": {}, "
              "\"ts\": {:.3f}, \"dur\": 9.0, \"args\": {{\"External id\": {}, \"Input Dims\": {}, "
              "\"Input type\": [\"c10::BFloat16\", \"c10::BFloat16\", \"c10::BFloat16\", "
              "\"Scalar\"], \"Concrete Inputs\": [\"\", \"\", \"\", \"1e-06\"]}}}}",
              op.op, pid, pid, t, ext, dims));
          event(fmt::format(
              "{{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": "
              "{}, \"tid\": {}, \"ts\": {:.3f}, \"dur\": 4.0, \"args\": {{\"External id\": {}, "
              "\"cbid\": 211, \"correlation\": {}}}}}",
              pid, pid, t + 2, ext, corr));
          gpu.push_back(fmt::format(
              "{{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"{}\", \"pid\": {}, \"tid\": 7, "
              "\"ts\": {:.3f}, \"dur\": {:.3f}, \"args\": {{\"External id\": {}, \"device\": {}, "
              "\"stream\": 7, \"correlation\": {}, \"grid\": [132, 1, 1], \"block\": [256, 1, 1]}}}}",
              op.kernel, r, t + 20, op.kernel_us, ext, r, corr));
          t += 10;
          ++corr;
          ++ext;
        }
      }
      event(fmt::format(
          "{{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"{}\", \"pid\": {}, \"tid\": "
          "{}, \"ts\": {:.3f}, \"dur\": {:.3f}, \"args\": {{\"External id\": {}}}}}",
          prefill ? "prefill" : "decode", pid, pid, step_start - 1, t - step_start + 2, ext++));
      for (const auto& g : gpu) event(g);
      t += 50;
    }
  }
  ok = ok && w.put("\n]}\n");
  const int rc = gzclose(f);
  if (!ok || rc != Z_OK) return io_error(fmt::format("{}: write failed", path.string()));
  return w.bytes();
}

}  // namespace atrex::ingest
