// The streaming trace reader: what it keeps, and the broken files of issue 18's "Must show".
#include <gtest/gtest.h>

#include "atrex/ingest/trace.h"
#include "byte_source.h"
#include "trace_util.h"

namespace atrex::ingest {
namespace {

using testing::TraceBuilder;

TraceBuilder small_trace() {
  TraceBuilder b;
  b.annotation("prefill", 10, 100, 100)
      .op("_C::rms_norm", 10, 110, 20, 5, Json::parse("[[4,8],[4,8],[8],[]]"),
          Json::parse(R"(["c10::BFloat16","c10::BFloat16","c10::BFloat16","Scalar"])"),
          Json::parse(R"(["","","","1e-06"])"))
      .runtime("cudaLaunchKernel", 10, 115, 77, 5)
      .kernel("rms_norm_kernel", 0, 140, 3.5, 77, 5);
  return b;
}

TEST(TraceReader, KeepsOpsRuntimeCallsAndKernelsWithTheirArgs) {
  auto dir = testing::temp_dir("t");
  testing::write_file(dir / "a.json", small_trace().text());
  TraceSet set;
  ASSERT_TRUE(read_trace(dir / "a.json", set));
  const TraceFile& f = set.files.at(0);
  EXPECT_FALSE(f.truncated);
  ASSERT_EQ(f.ranges.size(), 2u);
  ASSERT_EQ(f.runtime.size(), 1u);
  ASSERT_EQ(f.kernels.size(), 1u);
  const CpuRange* op = nullptr;
  for (const auto& r : f.ranges) {
    if (r.kind == RangeKind::kOp) op = &r;
  }
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(set.names.get(op->name), "_C::rms_norm");
  EXPECT_EQ(op->external_id, 5);
  ASSERT_GE(op->inputs, 0);
  const OpInputs& in = f.inputs[op->inputs];
  ASSERT_EQ(in.dims.size(), 4u);
  EXPECT_EQ(in.dims[1], (std::vector<int64_t>{4, 8}));
  EXPECT_TRUE(in.dims[3].empty());
  EXPECT_EQ(in.types[0], "c10::BFloat16");
  EXPECT_EQ(in.concrete[3], "1e-06");
  EXPECT_EQ(f.runtime[0].correlation, 77);
  EXPECT_EQ(f.kernels[0].correlation, 77);
  EXPECT_EQ(f.kernels[0].device, 0);
  EXPECT_DOUBLE_EQ(f.kernels[0].dur_us, 3.5);
}

TEST(TraceReader, ATruncatedFileKeepsTheEventsBeforeTheCutAndIsMarkedTruncated) {
  auto dir = testing::temp_dir("t");
  const std::string text = small_trace().text();
  // Cut inside the last event (the kernel): the three events before it survive.
  const size_t cut = text.rfind("rms_norm_kernel");
  testing::write_file(dir / "cut.json", text.substr(0, cut));
  TraceSet set;
  ASSERT_TRUE(read_trace(dir / "cut.json", set));
  const TraceFile& f = set.files.at(0);
  EXPECT_TRUE(f.truncated);
  EXPECT_NE(f.truncation.find("cut short"), std::string::npos) << f.truncation;
  EXPECT_EQ(f.ranges.size(), 2u);
  EXPECT_EQ(f.runtime.size(), 1u);
  EXPECT_EQ(f.kernels.size(), 0u);
}

TEST(TraceReader, AMissingFinalBraceIsTruncatedButEveryEventIsKept) {
  auto dir = testing::temp_dir("t");
  std::string text = small_trace().text();
  text = text.substr(0, text.rfind('}'));
  testing::write_file(dir / "nobrace.json", text);
  TraceSet set;
  ASSERT_TRUE(read_trace(dir / "nobrace.json", set));
  EXPECT_TRUE(set.files[0].truncated);
  EXPECT_EQ(set.files[0].kernels.size(), 1u);
}

TEST(TraceReader, GzipTracesReadLikePlainOnesAndACutGzipStreamIsTruncated) {
  auto dir = testing::temp_dir("t");
  TraceBuilder b = small_trace();
  for (int i = 0; i < 2000; ++i) b.kernel("k" + std::to_string(i % 7), 0, 200 + i, 1, 1000 + i);
  const std::string text = b.text();
  testing::write_gzip(dir / "a.json.gz", text);
  TraceSet set;
  ASSERT_TRUE(read_trace(dir / "a.json.gz", set));
  EXPECT_FALSE(set.files[0].truncated);
  EXPECT_EQ(set.files[0].kernels.size(), 2001u);
  EXPECT_EQ(set.files[0].bytes_read, text.size());
  // Half the compressed bytes: zlib stops, the reader keeps what was complete.
  auto gz = read_text_file(dir / "a.json.gz");
  ASSERT_TRUE(gz);
  testing::write_file(dir / "half.json.gz", gz->substr(0, gz->size() / 2));
  TraceSet cut;
  ASSERT_TRUE(read_trace(dir / "half.json.gz", cut));
  EXPECT_TRUE(cut.files[0].truncated);
  EXPECT_GT(cut.files[0].kernels.size(), 100u);
  EXPECT_LT(cut.files[0].kernels.size(), 2001u);
}

TEST(TraceReader, InvalidEscapesControlBytesAndBadUtf8InNamesAreRepaired) {
  auto dir = testing::temp_dir("t");
  std::string text = small_trace().text();
  // A Windows path-like escape, a raw tab, a lone surrogate and a stray continuation byte.
  const std::string bad = "rms_norm_kernel\\q<\t>\\ud800\x80";
  text.replace(text.find("rms_norm_kernel"), std::string("rms_norm_kernel").size(), bad);
  testing::write_file(dir / "bad.json", text);
  TraceSet set;
  ASSERT_TRUE(read_trace(dir / "bad.json", set));
  const TraceFile& f = set.files[0];
  EXPECT_FALSE(f.truncated) << f.truncation;
  ASSERT_EQ(f.kernels.size(), 1u);
  EXPECT_EQ(f.repairs, 4u);
  const std::string& name = set.names.get(f.kernels[0].name);
  EXPECT_EQ(name.rfind("rms_norm_kernel\\q<\t>", 0), 0u) << name;
}

TEST(StringRepair, OutputDoesNotDependOnHowTheInputIsChunked) {
  const std::string in = R"({"a":"x\qy\u12zz\u00e9\"ok","b":"\ud83d"})"
                         "\"\xC3\xA9\xE0\x80\xF0\x9F\x98\x80\"";
  detail::StringRepair whole;
  std::string expect;
  whole.feed(in.data(), in.size(), expect);
  whole.finish(expect);
  for (size_t split = 1; split < in.size(); ++split) {
    detail::StringRepair r;
    std::string out;
    r.feed(in.data(), split, out);
    r.feed(in.data() + split, in.size() - split, out);
    r.finish(out);
    EXPECT_EQ(out, expect) << "split at " << split;
    EXPECT_EQ(r.repairs(), whole.repairs());
  }
  EXPECT_TRUE(Json::accept(expect.substr(0, expect.find('}') + 1))) << expect;
}

TEST(TraceReader, EventsWithZeroTsAndDurAreKeptAndEventsWithoutTsAreCounted) {
  auto dir = testing::temp_dir("t");
  TraceBuilder b;
  b.runtime("cudaLaunchKernel", 1, 0, 5).kernel("zero", 0, 0, 0, 5);
  b.raw({{"ph", "X"}, {"cat", "kernel"}, {"name", "no_ts"}, {"pid", 0}, {"dur", 3}});
  testing::write_file(dir / "z.json", b.text());
  TraceSet set;
  ASSERT_TRUE(read_trace(dir / "z.json", set));
  EXPECT_EQ(set.files[0].kernels.size(), 1u);
  EXPECT_EQ(set.files[0].events_skipped, 1u);
  EXPECT_NE(set.files[0].first_skip_reason.find("no numeric \"ts\""), std::string::npos);
}

TEST(TraceReader, AFileThatIsNotATraceIsInvalidInputNamingTheFile) {
  auto dir = testing::temp_dir("t");
  testing::write_file(dir / "notes.txt", "hello, this is not JSON");
  testing::write_file(dir / "other.json", R"({"foo": [1, 2, 3]})");
  for (const char* name : {"notes.txt", "other.json"}) {
    TraceSet set;
    auto r = read_trace(dir / name, set);
    ASSERT_FALSE(r) << name;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidInput);
    EXPECT_NE(r.error().message.find(name), std::string::npos) << r.error().message;
  }
  TraceSet set;
  auto missing = read_trace(dir / "missing.json", set);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
}

TEST(TraceReader, AChromeTraceArrayRootIsAccepted) {
  auto dir = testing::temp_dir("t");
  testing::write_file(dir / "arr.json", small_trace().events.dump());
  TraceSet set;
  ASSERT_TRUE(read_trace(dir / "arr.json", set));
  EXPECT_EQ(set.files[0].kernels.size(), 1u);
}

}  // namespace
}  // namespace atrex::ingest
