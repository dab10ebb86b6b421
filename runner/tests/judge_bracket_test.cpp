// The judge's side of a timed call's bracket on cpu, where the bracket holds the work
// (docs/evaluation.md "The judge"; protocol/judge_messages.h), driven message by message against
// the real judge process (judge_process.h): the go names a splice, a done without the outputs'
// digest is tampering, a check of the call must name the go's splice, and outputs that are not
// the ones whose digest came with the done fail the check. The end-to-end attacks are
// SandboxTest.RelayThat* and SandboxTest.OutputsFinishedAfterTheCallReturnsAreCaught.
#include <gtest/gtest.h>

#include "atrex/common/hash.h"
#include "atrex/problems/host_run.h"
#include "atrex/problems/suite.h"
#include "judge_process.h"
#include "protocol/judge_messages.h"

namespace atrex::runner {
namespace {

class JudgeBracket : public ::testing::Test {
 protected:
  void SetUp() override {
    auto suite = problems::Suite::load(ATREX_TEST_SUITE_DIR);
    ASSERT_TRUE(suite) << suite.error().message;
    const problems::Shape* shape = nullptr;
    for (const auto& s : suite->find("rms_norm")->shapes)
      if (s.id == "15") shape = &s;
    ASSERT_NE(shape, nullptr);
    auto resolved = problems::resolve_shape(*problems::find_native_operator("rms_norm"), *shape);
    ASSERT_TRUE(resolved) << resolved.error().message;
    auto run = problems::run_reference_host(*resolved, kSeed);
    ASSERT_TRUE(run) << run.error().message;
    run_ = std::move(*run);
    task_.operator_name = "rms_norm";
    task_.nonce = "judge-nonce";
    task_.seccomp = false;
    task_.timing.min_iterations = 1;  // the judge re-checks the first timed call
    ChildShape item;
    item.shape_id = "15";
    item.params = shape->params;
    item.seeds = {kSeed};
    task_.shapes = {item};
  }

  // timing_begin, call_begin: the judge's go, read strictly.
  JudgeCallGo open_bracket(JudgeProcess& judge) {
    judge.send(Json{{"op", "timing_begin"}, {"shape_id", "15"}});
    EXPECT_EQ(judge.reply(), (Json{{"go", true}}));
    judge.send(Json{{"op", "call_begin"}});
    auto go = judge_call_go_from_json(judge.reply(), "the judge's go");
    EXPECT_TRUE(go) << go.error().message;
    return go ? *go : JudgeCallGo{};
  }
  std::string outputs_sha256() const {
    std::vector<std::pair<const void*, size_t>> b;
    for (const auto& o : run_.outputs) b.emplace_back(o.data(), o.size());
    return sha256_hex_of_buffers(b);
  }
  Json recheck(int64_t splice) const {
    return Json{{"op", "check"},      {"shape_id", "15"}, {"seed", kSeed},
                {"kind", "usual"},    {"variant", splice}, {"context", "re-check: "}};
  }

  static constexpr uint64_t kSeed = 21;
  problems::HostRun run_;
  ChildTaskRequest task_;
};

TEST_F(JudgeBracket, ADoneWithoutTheOutputsDigestIsTampering) {
  JudgeProcess judge(task_);
  (void)open_bracket(judge);
  judge.send(to_json(JudgeCallEnd{1, ""}));
  (void)judge.reply();
  const JudgeVerdict v = judge.verdict();
  EXPECT_EQ(v.status, EvalStatus::kRejected);
  EXPECT_NE(v.tampering.find("without the digest of its outputs"), std::string::npos)
      << v.tampering;
}

TEST_F(JudgeBracket, ACheckNamingAnotherSpliceThanTheGoIsTampering) {
  JudgeProcess judge(task_);
  const JudgeCallGo go = open_bracket(judge);
  judge.send(to_json(JudgeCallEnd{1, outputs_sha256()}));
  auto answer = judge_call_end_reply_from_json(judge.reply(), "answer");
  ASSERT_TRUE(answer) << answer.error().message;
  ASSERT_TRUE(answer->check) << "min_iterations 1: the first timed call is re-checked";
  judge.publish(run_);
  judge.send(recheck(go.splice + 1));  // what a relay's forged go would have named
  (void)judge.reply();
  const JudgeVerdict v = judge.verdict();
  EXPECT_NE(v.tampering.find("where the judge's last go named " + std::to_string(go.splice)),
            std::string::npos)
      << v.tampering;
}

TEST_F(JudgeBracket, OutputsThatAreNotTheOnesTheDoneHashedFailTheCheck) {
  JudgeProcess judge(task_);
  const JudgeCallGo go = open_bracket(judge);
  // The done's digest is of other bytes than the outputs published for the re-check: a done sent
  // before the work, or outputs a thread finished after the call returned.
  judge.send(to_json(JudgeCallEnd{1, sha256_hex_of_buffers({{"early", 5}})}));
  auto answer = judge_call_end_reply_from_json(judge.reply(), "answer");
  ASSERT_TRUE(answer && answer->check);
  judge.publish(run_);
  judge.send(recheck(go.splice));
  const Json r = judge.reply();
  EXPECT_EQ(r.value("pass", true), false) << r.dump();
  EXPECT_NE(r.value("error", std::string()).find("SHA-256 differs"), std::string::npos) << r.dump();
}

TEST_F(JudgeBracket, AnOpTheProtocolHasNotIsTampering) {
  JudgeProcess judge(task_);
  judge.send(Json{{"op", "verdict"}, {"shape_id", "15"}, {"status", "ok"}});
  (void)judge.reply();
  const JudgeVerdict v = judge.verdict();
  EXPECT_EQ(v.status, EvalStatus::kRejected);
  EXPECT_NE(v.tampering.find("op \"verdict\""), std::string::npos) << v.tampering;
}

}  // namespace
}  // namespace atrex::runner
