// The evaluation child's dump mode (`atrex problems dump`, deploy/gpu/xcheck.py) through the real
// atrex-eval-cpu: the dumped inputs are those the gate would give a candidate, the dumped outputs
// are the reference's on them, in-place outputs start from their input, and a bad item does not
// stop the others.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "atrex/common/json_io.h"
#include "atrex/problems/operator.h"
#include "atrex/common/process/subprocess.h"

namespace atrex::runner {
namespace {
namespace fs = std::filesystem;

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

class DumpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto suite = problems::Suite::load(ATREX_TEST_SUITE_DIR);
    ASSERT_TRUE(suite) << suite.error().message;
    suite_ = std::make_unique<problems::Suite>(std::move(*suite));
    dir_ = fs::temp_directory_path() / ("atrex_dump_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Json item(const std::string& op, const std::string& shape_id, uint64_t seed) {
    const problems::Shape* s = suite_->find(op)->find_shape(shape_id);
    return Json{{"operator", op},
                {"shape_id", shape_id},
                {"params", s->params},
                {"init_kwargs", s->init_kwargs},
                {"input_kwargs", s->input_kwargs},
                {"seed", seed},
                {"backend", "cpu"},
                {"out_dir", (dir_ / op / shape_id).string()},
                {"atol", 1e-2},
                {"rtol", 5e-2}};
  }

  // Runs atrex-eval-cpu on a dump request; returns the response.
  Json dump(const Json& items) {
    const fs::path req = dir_ / "request.json", resp = dir_ / "response.json";
    EXPECT_TRUE(write_text_file_atomic(
        req, Json{{"schema", "atrex.child-request/1"}, {"mode", "dump"}, {"items", items}}.dump()));
    SubprocessOptions o;
    o.argv = {(fs::path(ATREX_TEST_BIN_DIR) / "atrex-eval-cpu").string(), "--request", req.string(),
              "--response", resp.string()};
    auto r = run_subprocess(o);
    EXPECT_TRUE(r && r->ok()) << (r ? r->describe() + ": " + r->output_tail : r.error().message);
    auto j = read_json_file(resp);
    EXPECT_TRUE(j) << j.error().message;
    return j ? *j : Json::object();
  }

  std::unique_ptr<problems::Suite> suite_;
  fs::path dir_;
};

TEST_F(DumpTest, InputsAreTheGeneratedOnesAndOutputsTheReferenceOnThem) {
  const Json resp = dump(Json::array({item("rms_norm", "15", 77)}));
  ASSERT_EQ(resp["items"][0]["status"], "ok") << resp.dump();
  const fs::path folder = dir_ / "rms_norm" / "15";
  auto manifest = read_json_file(folder / "manifest.json");
  ASSERT_TRUE(manifest);
  EXPECT_EQ((*manifest)["schema"], "atrex.dump/1");
  EXPECT_EQ((*manifest)["seed"], 77);
  EXPECT_DOUBLE_EQ((*manifest)["params"]["eps"].get<double>(), 1e-6);  // a default filled in
  EXPECT_DOUBLE_EQ((*manifest)["atol"].get<double>(), 1e-2);

  const auto* def = problems::find_native_operator("rms_norm");
  problems::Shape shape = *suite_->find("rms_norm")->find_shape("15");
  auto r = problems::resolve_shape(*def, shape);
  ASSERT_TRUE(r);
  std::vector<std::vector<uint8_t>> in, out;
  for (size_t i = 0; i < r->inputs.size(); ++i) {
    in.emplace_back(r->inputs[i].bytes());
    problems::generate_input_cpu(*r, i, 77, in.back().data());
  }
  for (const auto& d : r->outputs) out.emplace_back(d.bytes());
  std::vector<const void*> ip;
  std::vector<void*> op;
  for (auto& b : in) ip.push_back(b.data());
  for (auto& b : out) op.push_back(b.data());
  def->reference_cpu(*r, ip, op);

  const Json& tensors = (*manifest)["tensors"];
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(tensors[0]["file"], "input.x.bin");
  EXPECT_EQ(tensors[0]["dims"], Json::array({3, 128}));
  EXPECT_EQ(tensors[2]["role"], "output");
  EXPECT_EQ(tensors[2]["compare"], "allclose");
  EXPECT_EQ(read_bytes(folder / "input.x.bin"), in[0]);
  EXPECT_EQ(read_bytes(folder / "input.weight.bin"), in[1]);
  EXPECT_EQ(read_bytes(folder / "output.out.bin"), out[0]);
}

TEST_F(DumpTest, InPlaceOutputsStartFromTheirInputNotPoison) {
  const Json resp = dump(Json::array({item("reshape_and_cache", "0", 5)}));
  ASSERT_EQ(resp["items"][0]["status"], "ok") << resp.dump();
  const fs::path folder = dir_ / "reshape_and_cache" / "0";
  auto manifest = read_json_file(folder / "manifest.json");
  ASSERT_TRUE(manifest);
  const Json& out = (*manifest)["tensors"][5];
  EXPECT_EQ(out["name"], "key_cache");
  EXPECT_EQ(out["initial_from"], "key_cache");
  // slot_mapping = arange(T): the first T rows are the key rows, the rest keep the zeros of the
  // input cache (poison would be 0xFF).
  const auto key = read_bytes(folder / "input.key.bin");
  const auto cache = read_bytes(folder / "output.key_cache.bin");
  ASSERT_GT(cache.size(), key.size());
  EXPECT_EQ(0, std::memcmp(cache.data(), key.data(), key.size()));
  for (size_t i = key.size(); i < cache.size(); ++i) ASSERT_EQ(cache[i], 0) << "byte " << i;
}

TEST_F(DumpTest, BadItemIsReportedAndTheRestStillDumped) {
  Json bad = item("rms_norm", "15", 1);
  bad["operator"] = "no_such_operator";
  const Json resp = dump(Json::array({bad, item("l2_norm", "0", 1)}));
  ASSERT_EQ(resp["items"].size(), 2u);
  EXPECT_EQ(resp["items"][0]["status"], "rejected");
  EXPECT_NE(resp["items"][0]["error"].get<std::string>().find("no_such_operator"),
            std::string::npos);
  EXPECT_EQ(resp["items"][1]["status"], "ok");
  EXPECT_TRUE(fs::exists(dir_ / "l2_norm" / "0" / "manifest.json"));
}

}  // namespace
}  // namespace atrex::runner
