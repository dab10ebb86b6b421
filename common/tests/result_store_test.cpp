#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "atrex/common/result_store.h"

namespace atrex {
namespace {

TEST(ResultStore, FirstWriteWinsSoDuplicatesAreNotDoubleCounted) {
  MemoryResultStore store;
  auto first = store.put("t1/0", Json{{"s_j", 0.5}});
  auto second = store.put("t1/0", Json{{"s_j", 0.9}});
  ASSERT_TRUE(first && second);
  EXPECT_TRUE(*first);
  EXPECT_FALSE(*second);
  EXPECT_EQ((*store.get("t1/0"))->at("s_j"), 0.5);
  EXPECT_EQ(store.entries()->size(), 1u);
}

TEST(ResultStore, WaitReturnsRecordWrittenByAnotherThread) {
  MemoryResultStore store;
  std::thread writer([&] { (void)store.put("k", Json{{"v", 1}}); });
  auto got = store.wait("k", std::chrono::milliseconds(5000));
  writer.join();
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ((**got)["v"], 1);
}

TEST(ResultStore, JsonlLogSurvivesReopenAndTornLastLine) {
  auto dir = std::filesystem::temp_directory_path() / ("atrex_rs_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto path = dir / "results.jsonl";
  {
    auto store = MemoryResultStore::open_jsonl(path);
    ASSERT_TRUE(store);
    ASSERT_TRUE(*(*store)->put("a", Json{{"v", 1}}));
    ASSERT_TRUE(*(*store)->put("b", Json{{"v", 2}}));
  }
  {  // a process killed mid-write leaves a torn line
    std::ofstream out(path, std::ios::app);
    out << "{\"key\": \"c\", \"rec";
  }
  auto store = MemoryResultStore::open_jsonl(path);
  ASSERT_TRUE(store) << store.error().message;
  EXPECT_EQ((*store)->entries()->size(), 2u);
  EXPECT_FALSE(*(*store)->put("a", Json{{"v", 9}}));
  std::filesystem::remove_all(dir);
}

TEST(ResultStore, MalformedLineInTheMiddleIsAnErrorNamingFileAndLine) {
  auto dir = std::filesystem::temp_directory_path() / ("atrex_rs2_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = dir / "results.jsonl";
  {
    std::ofstream out(path);
    out << "{\"key\": \"a\", \"record\": {}}\nnot json\n{\"key\": \"b\", \"record\": {}}\n";
  }
  auto store = MemoryResultStore::open_jsonl(path);
  ASSERT_FALSE(store);
  EXPECT_NE(store.error().message.find("results.jsonl:2"), std::string::npos)
      << store.error().message;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace atrex
