// The judge's side of a timed call's bracket on cpu, where the bracket holds the work
// (docs/evaluation.md "The judge"; common/wire/judge_messages.h), driven message by message against
// the real judge process (judge_process.h): the go names a splice, a check of the call must name
// the go's splice, and the judge reads the outputs in the shared memfd's arena
// (protocol/shared_layout.h) when the done reaches it, so that outputs finished after the done
// fail the check, whether it read them whole (small outputs) or at lines it drew (large ones).
// The end-to-end attacks are SandboxTest.RelayThat*,
// SandboxTest.OutputsFinishedAfterTheCallReturnsAreCaught and AttackRound3.ARaceWithThe*.
#include <gtest/gtest.h>

#include <cstring>

#include "atrex/problems/host_run.h"
#include "atrex/problems/suite.h"
#include "judge_process.h"
#include "atrex/common/wire/judge_messages.h"

namespace atrex::runner {
namespace {

class JudgeBracket : public ::testing::Test {
 protected:
  // rms_norm shape `id` with seed kSeed: 15 (3 x 128, outputs read whole at the done) or 0
  // (2500 x 1024 bf16: 5 MB of outputs, read at lines the judge draws).
  void load(const std::string& id) {
    auto suite = problems::Suite::load(ATREX_TEST_SUITE_DIR);
    ASSERT_TRUE(suite) << suite.error().message;
    const problems::Shape* shape = nullptr;
    for (const auto& s : suite->find("rms_norm")->shapes)
      if (s.id == id) shape = &s;
    ASSERT_NE(shape, nullptr);
    auto resolved = problems::resolve_shape(*problems::find_native_operator("rms_norm"), *shape);
    ASSERT_TRUE(resolved) << resolved.error().message;
    resolved_ = std::move(*resolved);
    auto run = problems::run_reference_host(resolved_, kSeed);
    ASSERT_TRUE(run) << run.error().message;
    run_ = std::move(*run);
    id_ = id;
    task_.operator_name = "rms_norm";
    task_.nonce = "judge-nonce";
    task_.seccomp = false;
    task_.timing.min_iterations = 1;  // the judge re-checks the first timed call
    ChildShape item;
    item.shape_id = id;
    item.params = shape->params;
    item.seeds = {kSeed};
    task_.shapes = {item};
  }

  // timing_begin, call_begin: the judge's go, read strictly.
  JudgeCallGo open_bracket(JudgeProcess& judge) {
    judge.send(Json{{"op", "timing_begin"}, {"shape_id", id_}});
    EXPECT_EQ(judge.reply(), (Json{{"go", true}}));
    judge.send(Json{{"op", "call_begin"}});
    auto go = judge_call_go_from_json(judge.reply(), "the judge's go");
    EXPECT_TRUE(go) << go.error().message;
    return go ? *go : JudgeCallGo{};
  }
  // The done, and the judge's answer (min_iterations 1: it re-checks this call).
  void done(JudgeProcess& judge) {
    judge.send(to_json(JudgeCallEnd{1}));
    auto answer = judge_call_end_reply_from_json(judge.reply(), "answer");
    ASSERT_TRUE(answer) << answer.error().message;
    ASSERT_TRUE(answer->check) << "min_iterations 1: the first timed call is re-checked";
  }
  Json recheck(int64_t splice) const {
    // The shape's first check: it carries the inputs (judge.cpp inputs_due_).
    return Json{{"op", "check"},        {"shape_id", id_},          {"seed", kSeed},
                {"kind", "usual"},      {"variant", splice},        {"context", "re-check: "},
                {"inputs", true}};
  }
  // The outputs with `every`-th line of 64 bytes (from line `first`) still 0xFF: what the
  // harness poisons before a timed call, left where the work is unfinished at the done.
  std::vector<std::vector<uint8_t>> unfinished(size_t every, size_t first = 0) const {
    auto out = run_.outputs;
    for (auto& b : out)
      for (size_t at = first * 64; at < b.size(); at += every * 64)
        std::memset(b.data() + at, 0xFF, std::min<size_t>(64, b.size() - at));
    return out;
  }
  // The re-check's answer after the arena held `at_done` when the done reached the judge and
  // the child published the finished outputs.
  Json recheck_after(const std::vector<std::vector<uint8_t>>& at_done) {
    JudgeProcess judge(task_);
    const JudgeCallGo go = open_bracket(judge);
    judge.write_arena(resolved_, at_done);
    done(judge);
    judge.publish(run_);
    judge.send(recheck(go.splice));
    return judge.reply();
  }

  static constexpr uint64_t kSeed = 21;
  static constexpr const char* kFinishedAfter = "not the ones the timed call had when its done";
  std::string id_;
  problems::ResolvedShape resolved_;
  problems::HostRun run_;
  ChildTaskRequest task_;
};

TEST_F(JudgeBracket, TheDigestADoneUsedToCarryIsTampering) {
  load("15");
  JudgeProcess judge(task_);
  (void)open_bracket(judge);
  judge.send(Json{{"op", "call_end"}, {"calls", 1}, {"outputs_sha256", std::string(64, '0')}});
  (void)judge.reply();
  const JudgeVerdict v = judge.verdict();
  EXPECT_EQ(v.status, EvalStatus::kRejected);
  EXPECT_NE(v.tampering.find("outputs_sha256"), std::string::npos) << v.tampering;
}

TEST_F(JudgeBracket, ACheckNamingAnotherSpliceThanTheGoIsTampering) {
  load("15");
  JudgeProcess judge(task_);
  const JudgeCallGo go = open_bracket(judge);
  judge.write_arena(resolved_, run_.outputs);
  done(judge);
  judge.publish(run_);
  judge.send(recheck(go.splice + 1));  // what a relay's forged go would have named
  (void)judge.reply();
  const JudgeVerdict v = judge.verdict();
  EXPECT_NE(v.tampering.find("where the judge's last go named " + std::to_string(go.splice)),
            std::string::npos)
      << v.tampering;
}

// Small outputs are read whole: one line unfinished at the done fails the check; the same
// outputs finished before the done pass it (the re-check then goes on to the reference, which
// these outputs of the unspliced inputs do not match: any failure but this one).
TEST_F(JudgeBracket, SmallOutputsFinishedAfterTheDoneFailTheCheck) {
  load("15");
  const Json late = recheck_after(unfinished(1000, 2));
  EXPECT_EQ(late.value("pass", true), false) << late.dump();
  EXPECT_NE(late.value("error", std::string()).find(kFinishedAfter), std::string::npos)
      << late.dump();
  EXPECT_NE(late.value("error", std::string()).find("(1 of the 12 lines"), std::string::npos)
      << late.dump();
  const Json in_time = recheck_after(run_.outputs);
  EXPECT_EQ(in_time.value("error", std::string()).find(kFinishedAfter), std::string::npos)
      << in_time.dump();
}

// Large outputs are read at 4096 lines the judge draws at the done: 2% of them unfinished
// (every 50th line, spread as a racing thread's unfinished rows would not be: the hardest case
// for the draw is any) is caught all but surely (1 - 0.98^4096).
TEST_F(JudgeBracket, LargeOutputsFinishedAfterTheDoneFailTheCheckAtTheLinesDrawn) {
  load("0");
  ASSERT_GT(run_.outputs[0].size(), size_t{1} << 20) << "a shape whose outputs are sampled";
  const Json late = recheck_after(unfinished(50));
  EXPECT_EQ(late.value("pass", true), false) << late.dump();
  EXPECT_NE(late.value("error", std::string()).find(kFinishedAfter), std::string::npos)
      << late.dump();
  EXPECT_NE(late.value("error", std::string()).find("of the 4096 lines"), std::string::npos)
      << late.dump();
  const Json in_time = recheck_after(run_.outputs);
  EXPECT_EQ(in_time.value("error", std::string()).find(kFinishedAfter), std::string::npos)
      << in_time.dump();
}

// The inputs travel with a shape's first check (and the first after its timed calls, and a
// re-checked timed call: judge.cpp inputs_due_); left out of the first, or carried by a later
// one, is tampering. At the other checks the judge asks for them after the check came, about
// one time in four (kInputCheckOdds): 40 such checks, where 2 to 24 requests cover all but
// 2e-4 of the draws. Asked, inputs that differ from the judge's draw fail the check, and
// another message than the inputs' is tampering.
TEST_F(JudgeBracket, TheInputsGoWhereTheJudgeSaysAndItAsksForThemAtRandom) {
  load("15");
  auto check = [&](bool inputs) {
    return Json{{"op", "check"}, {"shape_id", id_}, {"seed", kSeed}, {"kind", "usual"},
                {"variant", -1}, {"context", ""},   {"inputs", inputs}};
  };
  {
    JudgeProcess judge(task_);
    judge.publish(run_, true);
    judge.send(check(true));
    EXPECT_EQ(judge.reply().value("pass", false), true);
    int asked = 0;
    for (int i = 0; i < 40; ++i) {
      judge.publish(run_, false);
      judge.send(check(false));
      bool a = false;
      EXPECT_EQ(judge.check_answer(run_, &a).value("pass", false), true) << "check " << i;
      asked += a;
    }
    EXPECT_GE(asked, 2);
    EXPECT_LE(asked, 24);
    judge.send(Json{{"op", "shape_end"}, {"shape_id", id_}, {"status", "ok"}});
    const JudgeVerdict v = judge.verdict();
    EXPECT_TRUE(v.tampering.empty()) << v.tampering;
    EXPECT_EQ(v.checks, 41);
  }
  {
    // Inputs written by the candidate, published when the judge asks: the check fails.
    JudgeProcess judge(task_);
    judge.publish(run_, true);
    judge.send(check(true));
    EXPECT_EQ(judge.reply().value("pass", false), true);
    auto written = run_.inputs;
    written[0][7] ^= 0x40;
    Json failed;
    for (int i = 0; i < 200 && failed.is_null(); ++i) {
      judge.publish(run_, false);
      judge.send(check(false));
      bool a = false;
      const Json r = judge.check_answer(run_, &a, &written);
      if (a) {
        failed = r;
      } else {
        EXPECT_EQ(r.value("pass", false), true);
      }
    }
    ASSERT_FALSE(failed.is_null()) << "the judge never asked in 200 checks";
    EXPECT_EQ(failed.value("pass", true), false);
    EXPECT_NE(failed.value("error", std::string()).find("modified its input x"), std::string::npos)
        << failed.dump();
  }
  {
    // Asked, the child answers with something else.
    JudgeProcess judge(task_);
    judge.publish(run_, true);
    judge.send(check(true));
    EXPECT_EQ(judge.reply().value("pass", false), true);
    bool asked = false;
    for (int i = 0; i < 200 && !asked; ++i) {
      judge.publish(run_, false);
      judge.send(check(false));
      const Json r = judge.reply();
      asked = r == judge_inputs_request();
      if (!asked) {
        EXPECT_EQ(r.value("pass", false), true);
      }
    }
    ASSERT_TRUE(asked);
    judge.send(Json{{"op", "timing_end"}});
    (void)judge.reply();
    const JudgeVerdict v = judge.verdict();
    EXPECT_EQ(v.status, EvalStatus::kRejected);
    EXPECT_NE(v.tampering.find("asked for the inputs of shape 15 and got"), std::string::npos)
        << v.tampering;
  }
  {
    JudgeProcess judge(task_);
    judge.publish(run_, false);
    judge.send(check(false));
    (void)judge.reply();
    const JudgeVerdict v = judge.verdict();
    EXPECT_EQ(v.status, EvalStatus::kRejected);
    EXPECT_NE(v.tampering.find("without the candidate's inputs where the judge needs them"),
              std::string::npos)
        << v.tampering;
  }
  {
    JudgeProcess judge(task_);
    judge.publish(run_, true);
    judge.send(check(true));
    EXPECT_EQ(judge.reply().value("pass", false), true);
    judge.publish(run_, true);
    judge.send(check(true));
    (void)judge.reply();
    const JudgeVerdict v = judge.verdict();
    EXPECT_EQ(v.status, EvalStatus::kRejected);
    EXPECT_NE(v.tampering.find("with the candidate's inputs where the judge does not take them"),
              std::string::npos)
        << v.tampering;
  }
}

// A timed call the judge chose to re-check (drawn after the call) carries its inputs even after
// the shape's first check did: attack round 7 wrote its inputs in every timed call but the
// predictable last, unseen while only the first check and the first after timing carried them.
TEST_F(JudgeBracket, AReCheckedTimedCallCarriesItsInputs) {
  load("15");
  for (bool with_inputs : {false, true}) {
    JudgeProcess judge(task_);
    judge.publish(run_, true);
    judge.send(Json{{"op", "check"}, {"shape_id", id_}, {"seed", kSeed}, {"kind", "usual"},
                    {"variant", -1}, {"context", ""}, {"inputs", true}});
    EXPECT_EQ(judge.reply().value("pass", false), true);
    const JudgeCallGo go = open_bracket(judge);
    judge.write_arena(resolved_, run_.outputs);
    done(judge);
    judge.publish(run_, with_inputs);
    Json m = recheck(go.splice);
    m["inputs"] = with_inputs;
    judge.send(m);
    const Json r = judge.reply();
    if (with_inputs) {
      // Outputs of the unspliced inputs against the spliced set's reference: a failed
      // comparison, but no tampering.
      EXPECT_EQ(r.value("error", std::string()).find("inputs where the judge"), std::string::npos)
          << r.dump();
      continue;
    }
    const JudgeVerdict v = judge.verdict();
    EXPECT_EQ(v.status, EvalStatus::kRejected);
    EXPECT_NE(v.tampering.find("without the candidate's inputs where the judge needs them"),
              std::string::npos)
        << v.tampering;
  }
}

TEST_F(JudgeBracket, AnOpTheProtocolHasNotIsTampering) {
  load("15");
  JudgeProcess judge(task_);
  judge.send(Json{{"op", "verdict"}, {"shape_id", "15"}, {"status", "ok"}});
  (void)judge.reply();
  const JudgeVerdict v = judge.verdict();
  EXPECT_EQ(v.status, EvalStatus::kRejected);
  EXPECT_NE(v.tampering.find("op \"verdict\""), std::string::npos) << v.tampering;
}

}  // namespace
}  // namespace atrex::runner
