// The knowledge base: every embedded note parses, every suite operator has a family with notes,
// selection follows the family and the (measured) bottleneck.
#include <gtest/gtest.h>

#include "atrex/agent/knowledge_base.h"
#include "atrex/problems/operator.h"

namespace atrex::agent {
namespace {

TEST(KnowledgeBase, EmbeddedNotesParseAndCoverEverySuiteOperator) {
  auto kb = KnowledgeBase::embedded();
  ASSERT_TRUE(kb) << kb.error().message;
  EXPECT_GE(kb->notes().size(), 6u);
  size_t ops = 0;
  for (const auto& def : problems::native_operators()) {
    ++ops;
    const std::string& op = def.name;
    const std::string_view family = operator_family(op);
    EXPECT_FALSE(family.empty()) << op << " has no family";
    for (Backend b : {Backend::kCpu, Backend::kCuda}) {
      EXPECT_FALSE(kb->select(family, b, std::nullopt, 3).empty())
          << op << " (" << family << ") has no notes for " << backend_name(b);
    }
  }
  EXPECT_EQ(ops, 30u);
}

TEST(KnowledgeBase, SelectionPrefersTheFamilyThenTheMeasuredBottleneck) {
  auto kb = KnowledgeBase::embedded();
  ASSERT_TRUE(kb);
  auto gemm = kb->select("gemm", Backend::kCuda, std::nullopt, 2);
  ASSERT_FALSE(gemm.empty());
  EXPECT_EQ(gemm.front()->path, "gemm.md");
  auto norm = kb->select("norm", Backend::kCuda, std::nullopt, 3);
  ASSERT_GE(norm.size(), 2u);
  EXPECT_EQ(norm[0]->path, "memory_bound.md");
  EXPECT_EQ(norm[1]->path, "reductions.md");
  // A measured latency bottleneck brings the small-shapes note first among the general ones.
  auto latency = kb->select("norm", Backend::kCuda, Bottleneck::kLatency, 5);
  bool has_latency = false;
  for (const auto* n : latency) has_latency |= n->path == "latency.md";
  EXPECT_TRUE(has_latency);
  // CPU prompts get CPU notes, never CUDA ones.
  for (const auto* n : kb->select("norm", Backend::kCpu, std::nullopt, 5)) {
    EXPECT_TRUE(n->targets(Backend::kCpu)) << n->path;
  }
}

TEST(KnowledgeBase, BadHeaderNamesTheFileAndLine) {
  auto bad = KnowledgeBase::parse("x.md", "title: t\nfamilies: norm\nbottleneck: fast\n---\nbody");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("x.md: line 3"), std::string::npos) << bad.error().message;
  auto unterminated = KnowledgeBase::parse("y.md", "title: t\nfamilies: norm\n");
  ASSERT_FALSE(unterminated);
  EXPECT_NE(unterminated.error().message.find("---"), std::string::npos);
}

}  // namespace
}  // namespace atrex::agent
