// Model-shaped traces: Hugging Face module scopes, a synthetic two-rank gzip trace and the two
// traces recorded on the H200 (testing/data/traces/README.md).
#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "atrex/ingest/ingest.h"
#include "atrex/problems/suite.h"
#include "trace_util.h"

namespace atrex::ingest {
namespace {

namespace fs = std::filesystem;
using testing::run;
using testing::TraceBuilder;
using testing::write;

TEST(Ingest, HuggingFaceModulesMapByScopeSdpaSplitsPrefillFromDecode) {
  auto dir = testing::temp_dir("t");
  TraceBuilder b;
  int64_t corr = 1, ext = 1;
  auto launch = [&](const std::string& op, double ts, Json dims, const std::string& kernel, double dur) {
    Json types = Json::array();
    for (size_t i = 0; i < dims.size(); ++i) types.push_back("c10::BFloat16");
    b.op(op, 1, ts, 4, ext, dims, types).runtime("cudaLaunchKernel", 1, ts + 1, corr, ext)
        .kernel(kernel, 0, ts + 10, dur, corr);
    ++corr;
    ++ext;
  };
  b.module("LlamaRMSNorm_0", 1, 0, 30);
  launch("aten::pow", 1, Json::parse("[[2, 16, 64], []]"), "vectorized_elementwise_kernel", 2);
  launch("aten::mean", 10, Json::parse("[[2, 16, 64]]"), "reduce_kernel", 3);
  b.module("LlamaMLP_0", 1, 40, 40);
  launch("aten::linear", 41, Json::parse("[[2, 16, 64], [172, 64]]"), "nvjet_tst_128x64", 9);
  launch("aten::silu", 50, Json::parse("[[2, 16, 172]]"), "vectorized_elementwise_kernel", 4);
  launch("aten::mul", 60, Json::parse("[[2, 16, 172], [2, 16, 172]]"), "vectorized_elementwise_kernel", 4);
  launch("aten::scaled_dot_product_attention", 100,
         Json::parse("[[2, 8, 16, 8], [2, 2, 16, 8], [2, 2, 16, 8]]"), "flash_fwd_kernel", 20);
  launch("aten::scaled_dot_product_attention", 200,
         Json::parse("[[2, 8, 1, 8], [2, 2, 17, 8], [2, 2, 17, 8]]"), "flash_fwd_kernel", 5);
  auto r = run({write(dir, "hf.json", b)});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_DOUBLE_EQ(r->families.at("rms_norm").gpu_us, 5);
  EXPECT_EQ(r->families.at("rms_norm").shapes.begin()->second.input_kwargs,
            Json::parse(R"({"token_count": 32, "hidden_size": 64})"));
  EXPECT_DOUBLE_EQ(r->families.at("silu_and_mul").gpu_us, 8);
  EXPECT_EQ(r->families.at("silu_and_mul").shapes.begin()->second.input_kwargs["shape"],
            Json::parse("[32, 344]"));
  EXPECT_DOUBLE_EQ(r->families.at("dense_gemm").gpu_us, 9);
  EXPECT_EQ(r->families.at("attention_forward").shapes.begin()->second.input_kwargs,
            Json::parse(R"({"num_heads": 8, "head_dim": 8, "seq_lens": [16, 16]})"));
  const auto& dec = r->families.at("paged_attention_decode").shapes.begin()->second.input_kwargs;
  EXPECT_EQ(dec["num_seqs"], 2);
  EXPECT_EQ(dec["ctx_len"], 17);
  EXPECT_EQ(dec["num_kv_heads"], 2);
  EXPECT_DOUBLE_EQ(r->mapped_us, r->gpu_us);
}

TEST(Ingest, ASyntheticTwoRankGzipTraceMapsEveryKernelToItsOwnRank) {
  auto dir = testing::temp_dir("t");
  SyntheticTrace spec;
  spec.target_bytes = 400000;
  spec.ranks = 2;
  spec.gzip = true;
  auto bytes = write_synthetic_trace(dir / "syn.json.gz", spec);
  ASSERT_TRUE(bytes) << bytes.error().message;
  auto r = run({dir / "syn.json.gz"});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->traces[0].truncated);
  EXPECT_EQ(r->traces[0].ambiguous_joins, r->kernels);  // every id is used by both ranks
  EXPECT_EQ(r->traces[0].unlaunched_kernels, 0);
  EXPECT_NEAR(r->mapped_us, r->gpu_us, 1e-6);
  const auto& norm = r->families.at("rms_norm");
  EXPECT_DOUBLE_EQ(norm.no_shape_us, 0);
  std::set<int64_t> tokens;
  for (const auto& [k, s] : norm.shapes) tokens.insert(s.input_kwargs["token_count"].get<int64_t>());
  EXPECT_EQ(tokens, (std::set<int64_t>{64, 2048}));
  EXPECT_GT(norm.phase_us[kPrefill], 0);
  EXPECT_GT(norm.phase_us[kDecode], 0);
  EXPECT_DOUBLE_EQ(norm.phase_us[kUnknownPhase], 0);
}

// The traces recorded on the H200 (testing/data/traces/README.md): the models' operators map.
TEST(IngestRecorded, TheLlamaAndQwenMoeTracesMapTheirOperatorsWithShapes) {
  const fs::path dir = ATREX_TEST_TRACE_DIR;
  auto r = run({dir / "llama-dense.pt.trace.json.gz", dir / "qwen-moe.pt.trace.json.gz"});
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->traces.size(), 2u);
  // GPU activities: the manifest's kernels plus memsets (3; 23) and memcpys (0; 61).
  EXPECT_EQ(r->traces[0].kernels, 549 + 3);
  EXPECT_EQ(r->traces[1].kernels, 1121 + 23 + 61);
  for (const auto& t : r->traces) {
    EXPECT_FALSE(t.truncated) << t.path;
    EXPECT_GT(t.graph_kernels, 0) << t.path;  // the CUDA-graph replays of layer 0's MLP
    EXPECT_EQ(t.unlaunched_kernels, 0) << t.path;
    EXPECT_GT(t.phase_us[kPrefill], 0) << t.path;
    EXPECT_GT(t.phase_us[kDecode], 0) << t.path;
  }
  EXPECT_GT(r->mapped_us / r->gpu_us, 0.99) << coverage_markdown(*r);
  auto has_shape = [&](const std::string& fam, const Json& input) {
    auto it = r->families.find(fam);
    if (it == r->families.end()) return false;
    for (const auto& [k, s] : it->second.shapes) {
      if (s.input_kwargs == input) return true;
    }
    return false;
  };
  // Prefill: 4 x 512 tokens; decode: 4 tokens against a 513..516-token cache.
  EXPECT_TRUE(has_shape("rms_norm", {{"token_count", 2048}, {"hidden_size", 1024}}));
  EXPECT_TRUE(has_shape("rms_norm", {{"token_count", 4}, {"hidden_size", 1024}}));
  EXPECT_TRUE(has_shape("silu_and_mul", {{"shape", {2048, 5632}}}));
  EXPECT_TRUE(has_shape("attention_forward",
                        {{"num_heads", 16}, {"head_dim", 64}, {"seq_lens", {512, 512, 512, 512}}}));
  EXPECT_TRUE(has_shape("paged_attention_decode",
                        {{"num_seqs", 4}, {"ctx_len", 513}, {"num_query_heads", 16},
                         {"num_kv_heads", 4}, {"head_size", 64}, {"block_size", 16}, {"dtype", "bf16"}}));
  EXPECT_TRUE(has_shape("fused_moe", {{"token_count", 2048}, {"hidden_size", 1024},
                                      {"intermediate_size", 512}, {"num_experts", 16}, {"top_k", 4}}));
  EXPECT_TRUE(has_shape("moe_topk_gating_softmax", {{"token_count", 2048}, {"num_experts", 16}}));
  EXPECT_TRUE(r->families.count("fused_qkv_rope"));
  EXPECT_GT(r->families.at("dense_gemm").gpu_us, 0);
  std::set<std::string> suite;
  for (const auto& op : r->suite) suite.insert(op.name);
  for (const char* op : {"rms_norm", "silu_and_mul", "attention_forward", "fused_moe",
                         "moe_topk_gating_softmax"}) {
    EXPECT_TRUE(suite.count(op)) << op << "\n" << coverage_markdown(*r);
  }
  auto out = testing::temp_dir("suite");
  ASSERT_TRUE(write_suite(*r, out));
  auto loaded = problems::Suite::load(out);
  ASSERT_TRUE(loaded) << loaded.error().message;
  EXPECT_EQ(loaded->operators().size(), r->suite.size());
}

}  // namespace
}  // namespace atrex::ingest
