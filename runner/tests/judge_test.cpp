// The judge's side of the runner (issue 14 items 3 and 4; docs/evaluation.md "The judge"):
// reading its channel, folding its verdict into a record, and holding claimed timing against
// its clock. Unit tests; the end-to-end attacks are SandboxTest.* (sandbox_test.cpp).
#include <gtest/gtest.h>

#include "atrex/common/wire/judge_messages.h"
#include "protocol/response_channel.h"
#include "shape_batch.h"
#include "timing_check.h"

namespace atrex::runner {
namespace {

TimingSummary claimed(double median_us, int n) {
  TimingSummary t;
  t.time_us_median = median_us;
  t.n = n;
  t.samples_us.assign(static_cast<size_t>(n), median_us);
  return t;
}

JudgeVerdict brackets(std::vector<double> us, std::vector<int> calls, double overhead_us = 0) {
  JudgeVerdict j;
  j.status = EvalStatus::kOk;
  j.claimed = EvalStatus::kOk;
  j.timed = true;
  j.post_timing_checks = 4;
  j.post_timing_sets = 2;
  j.seeds_passed = 5;
  j.bracket_us = std::move(us);
  j.bracket_calls = std::move(calls);
  j.bracket_overhead_us = overhead_us;
  return j;
}

TEST(TimingCrossCheck, HonestCallsPassWhateverTheirSize) {
  // A 5 ms cpu call, bracketed a little longer (pipe hops).
  EXPECT_TRUE(cross_check_timing(claimed(5000, 3), brackets({5040, 5100, 5030}, {1, 1, 1})).plausible);
  // A launch-bound 2 us GPU kernel: each bracket is mostly flush, events, sync and pipe hops.
  EXPECT_TRUE(
      cross_check_timing(claimed(2, 3), brackets({180, 240, 900}, {1, 1, 1}, 45)).plausible);
  // A multi-kernel candidate timed by its device span: host launches lengthen the bracket.
  EXPECT_TRUE(
      cross_check_timing(claimed(30, 3), brackets({260, 270, 255}, {1, 1, 1}, 40)).plausible);
  // A graph replay of 20 samples of a 3 us kernel with a 35 us flush each.
  EXPECT_TRUE(cross_check_timing(claimed(3, 40), brackets({950, 1000}, {20, 20}, 40)).plausible);
  // A loaded host (load 13 on 2 cores): every bracket 1.5 ms longer than the 431 us call, and
  // the judge's own ping-pong measured 1.6 ms of wake-ups.
  JudgeVerdict loaded = brackets({1902, 2050, 1990}, {1, 1, 1});
  loaded.bracket_latency_us = 1600;
  EXPECT_TRUE(cross_check_timing(claimed(431, 3), loaded).plausible);
  // A busy host: one bracket stalled for 20 ms; only the shortest counts.
  EXPECT_TRUE(
      cross_check_timing(claimed(300, 3), brackets({350, 20000, 20500}, {1, 1, 1})).plausible);
}

TEST(TimingCrossCheck, ClaimsFarUnderTheJudgesBracketsAreRefuted) {
  // A clock slowed 100x on a 15 ms call: 150 us claimed.
  auto slowed = cross_check_timing(claimed(150, 3), brackets({15040, 15100, 15030}, {1, 1, 1}));
  EXPECT_FALSE(slowed.plausible);
  EXPECT_NEAR(slowed.bound_us, 10030, 1);
  EXPECT_NE(slowed.why.find("timing refuted by the judge's clock"), std::string::npos) << slowed.why;
  // A forged median of 2.7 us for the same calls.
  EXPECT_FALSE(
      cross_check_timing(claimed(2.7, 3), brackets({15040, 15100, 15030}, {1, 1, 1})).plausible);
  // Graph batches: 20 samples of a 500 us kernel claimed at 5 us.
  EXPECT_FALSE(
      cross_check_timing(claimed(5, 40), brackets({10900, 11000}, {20, 20}, 40)).plausible);
  // The same 100x bend on the loaded host: the longer allowance still leaves it refuted.
  JudgeVerdict loaded = brackets({11700, 12100, 11900}, {1, 1, 1});
  loaded.bracket_latency_us = 1600;
  EXPECT_FALSE(cross_check_timing(claimed(100, 3), loaded).plausible);
  // The margin: a claim at half the bound passes, under it does not.
  EXPECT_TRUE(cross_check_timing(claimed(2500, 1), brackets({10000}, {1})).plausible);
  EXPECT_FALSE(cross_check_timing(claimed(2490, 1), brackets({10000}, {1})).plausible);
}

// Where the brackets hold the work (cpu), a relay may have emptied any bracket the judge did not
// check: only the checked ones bound the claim.
TEST(TimingCrossCheck, OnlyCheckedBracketsBoundWhereTheyHoldTheWork) {
  // A 55 ms call bent 10x; two brackets emptied by a relay (a round trip each), one checked.
  JudgeVerdict j = brackets({300, 56000, 280}, {1, 1, 1});
  EXPECT_TRUE(cross_check_timing(claimed(5500, 3), j).plausible) << "every bracket counts";
  j.brackets_hold_work = true;
  j.checked_brackets = {1};
  auto refuted = cross_check_timing(claimed(5500, 3), j);
  EXPECT_FALSE(refuted.plausible);
  EXPECT_NEAR(refuted.bound_us, 56000 - kCheckedBracketLatencyUs, 1);
  EXPECT_NE(refuted.why.find("checked brackets"), std::string::npos) << refuted.why;
  // The honest 55 ms claim against the same checked bracket passes.
  EXPECT_TRUE(cross_check_timing(claimed(55000, 3), j).plausible);
  // No checked bracket: nothing vouches for the claim.
  j.checked_brackets.clear();
  auto unchecked = cross_check_timing(claimed(55000, 3), j);
  EXPECT_FALSE(unchecked.plausible);
  EXPECT_NE(unchecked.why.find("none of its 3 brackets"), std::string::npos) << unchecked.why;
}

// The probe at timing_begin, a moment the candidate sees coming, counts only up to
// kStartLatencyFactor times the probe taken before the candidate's child was spawned (attack
// round 3: load made on cue once measured 152 ms and let a 100x bend of a 15 ms call through).
TEST(TimingCrossCheck, LatencyMeasuredOnCueIsCappedByTheOneBeforeTheCandidate) {
  // A 55 ms call bent 100x (550 us claimed), two brackets checked.
  JudgeVerdict cued = brackets({55300, 55400, 55350}, {1, 1, 1});
  cued.brackets_hold_work = true;
  cued.checked_brackets = {0, 2};
  cued.bracket_latency_us = 152000;
  EXPECT_TRUE(cross_check_timing(claimed(550, 3), cued).plausible)
      << "without the start probe the cued latency decides (the attack)";
  cued.start_latency_us = 90;
  auto refuted = cross_check_timing(claimed(550, 3), cued);
  EXPECT_FALSE(refuted.plausible);
  EXPECT_DOUBLE_EQ(refuted.latency_us, kCheckedBracketLatencyUs) << "4 x 90 us is under the floor";
  // The honest 55 ms call passes against the same brackets.
  EXPECT_TRUE(cross_check_timing(claimed(55000, 3), cued).plausible);
  // A host already loaded before the candidate (start probe 30 ms) keeps its measured allowance
  // up to 4x that.
  JudgeVerdict loaded = brackets({61000, 62000}, {1, 1});
  loaded.bracket_latency_us = 60000;
  loaded.start_latency_us = 30000;
  auto kept = cross_check_timing(claimed(900, 2), loaded);
  EXPECT_TRUE(kept.plausible) << kept.why;
  EXPECT_DOUBLE_EQ(kept.latency_us, 60000);
  loaded.start_latency_us = 10000;
  EXPECT_DOUBLE_EQ(cross_check_timing(claimed(900, 2), loaded).latency_us, 40000);
}

// The bracket's messages are typed once (common/wire/judge_messages.h) and read strictly: what the
// judge refuses here ends it with a tampering verdict.
TEST(JudgeMessages, BracketMessagesRoundTripAndAnythingElseIsRefused) {
  auto go = judge_call_go_from_json(to_json(JudgeCallGo{12345}), "go");
  ASSERT_TRUE(go) << go.error().message;
  EXPECT_EQ(go->splice, 12345);
  auto end = judge_call_end_from_json(to_json(JudgeCallEnd{7}), "call_end");
  ASSERT_TRUE(end) << end.error().message;
  EXPECT_EQ(end->calls, 7);
  EXPECT_EQ(to_json(JudgeCallEnd{1}), (Json{{"op", "call_end"}, {"calls", 1}}));
  auto answer = judge_call_end_reply_from_json(to_json(JudgeCallEndReply{true}), "answer");
  ASSERT_TRUE(answer && answer->check);
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {R"({"go":true})", "splice"},
           {R"({"go":false,"splice":1})", "not a go"},
           {R"({"go":true,"splice":-1})", "out of range"},
           {R"({"go":true,"splice":1,"extra":0})", "extra"},
       }) {
    auto bad = judge_call_go_from_json(Json::parse(text), "go");
    ASSERT_FALSE(bad) << text;
    EXPECT_NE(bad.error().message.find(why), std::string::npos) << bad.error().message;
  }
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {R"({"op":"call_end"})", "calls"},
           {R"({"op":"call_begin","calls":1})", "op"},
           {R"({"op":"call_end","calls":0})", "0 calls"},
           // The digest the child's done used to carry is no member of the protocol any more.
           {R"({"op":"call_end","calls":1,"outputs_sha256":""})", "outputs_sha256"},
           {R"({"op":"call_end","calls":1,"ok":true})", "ok"},
       }) {
    auto bad = judge_call_end_from_json(Json::parse(text), "call_end");
    ASSERT_FALSE(bad) << text;
    EXPECT_NE(bad.error().message.find(why), std::string::npos) << bad.error().message;
  }
}

// Every other message of the pipe is typed in the same header: each round-trips, and the judge's
// read refuses an unknown op, a missing or extra member, a kind or variant out of range.
TEST(JudgeMessages, EveryChildMessageRoundTripsAndIsReadStrictly) {
  const SetKey key{0xabcdef, SetKind::kEdgeCase, 3};
  const std::vector<Json> sent = {
      to_json(JudgePrepare{"15", key}),
      to_json(JudgeCheck{"15", key, "re-check of timed call 3: ", true}),
      judge_inputs_published(),
      to_json(JudgeTimingBegin{"15"}),
      to_json(JudgeCallBegin{}),
      to_json(JudgeCallEnd{1}),
      to_json(JudgeTimingEnd{}),
      to_json(JudgeShapeEnd{"15", EvalStatus::kOk})};
  for (size_t i = 0; i < sent.size(); ++i) {
    auto m = judge_message_from_json(sent[i], "message");
    ASSERT_TRUE(m) << sent[i].dump() << ": " << m.error().message;
    EXPECT_EQ(m->index(), i) << sent[i].dump();
  }
  auto check = judge_message_from_json(sent[1], "message");
  const auto& c = std::get<JudgeCheck>(*check);
  EXPECT_EQ(c.key, key);
  EXPECT_EQ(c.context, "re-check of timed call 3: ");
  EXPECT_TRUE(c.inputs);
  EXPECT_EQ(std::get<JudgeShapeEnd>(*judge_message_from_json(sent[7], "m")).status, EvalStatus::kOk);
  EXPECT_EQ(sent[0], Json::parse(R"({"op":"prepare","shape_id":"15","seed":11259375,)"
                                 R"("kind":"edge_case","variant":3})"));
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {R"({"op":"replay"})", "unknown op \"replay\""},
           {R"({"shape_id":"15"})", "op"},
           {R"({"op":"prepare","shape_id":"15","seed":1,"kind":"usual"})", "variant"},
           {R"({"op":"prepare","shape_id":"15","seed":1,"kind":"cached","variant":-1})",
            "usual, range_probe or edge_case"},
           {R"({"op":"prepare","shape_id":"15","seed":1,"kind":"usual","variant":-2})", "variant"},
           {R"({"op":"check","shape_id":"15","seed":1,"kind":"usual","variant":1099511627776,)"
            R"("context":"","inputs":false})",
            "variant"},
           {R"({"op":"check","shape_id":"15","seed":1,"kind":"usual","variant":-1,"context":""})",
            "inputs"},
           {R"({"op":"check","shape_id":"15","seed":1,"kind":"usual","variant":-1,"context":"",)"
            R"("inputs":"yes"})",
            "inputs"},
           {R"({"op":"timing_end","shape_id":"15"})", "shape_id"},
           {R"({"op":"inputs","bytes":10})", "bytes"},
           {R"({"op":"shape_end","shape_id":"15","status":"great"})", "status"},
           {R"({"op":"call_end","calls":0})", "0 calls"},
       }) {
    auto bad = judge_message_from_json(Json::parse(text), "message");
    ASSERT_FALSE(bad) << text;
    EXPECT_NE(bad.error().message.find(why), std::string::npos) << text << ": "
                                                               << bad.error().message;
  }
}

// The judge's answer to a check: pass and error, or its stop (never a go).
TEST(JudgeMessages, TheCheckReplyIsAPassOrAStop) {
  auto pass = judge_check_reply_from_json(to_json(JudgeCheckReply{true, ""}), "reply");
  ASSERT_TRUE(pass && pass->pass);
  auto stop = judge_check_reply_from_json(judge_stop("tampering: x"), "reply");
  ASSERT_TRUE(stop) << stop.error().message;
  EXPECT_FALSE(stop->pass);
  EXPECT_EQ(stop->error, "tampering: x");
  for (const char* text : {R"({"pass":true})", R"({"pass":"yes","error":""})",
                           R"({"pass":false,"error":"","go":true})", R"({"go":true})",
                           R"({"pass":true,"error":"","extra":1})"}) {
    EXPECT_FALSE(judge_check_reply_from_json(Json::parse(text), "reply")) << text;
  }
}

ChildShapeResponse child_line(EvalStatus status, int n = 3) {
  ChildShapeResponse c;
  c.shape_id = "15";
  c.status = status;
  c.input_rotation = "on";
  if (status == EvalStatus::kOk) c.timing = claimed(5000, n);
  return c;
}

TEST(JudgeRecord, OkNeedsTheJudgesOkAndTakesItsFigures) {
  JudgeVerdict j = brackets({5040, 5100, 5030}, {1, 1, 1});
  j.max_abs_error = 0.007;
  j.range_probe = "x scaled by 2^11";
  EvalRecord r;
  const ChildShapeResponse c = child_line(EvalStatus::kOk);
  apply_child_response(r, c);
  EXPECT_EQ(judge_record(r, c, &j), "");
  EXPECT_EQ(r.status, EvalStatus::kOk);
  EXPECT_EQ(r.max_abs_error, 0.007);
  EXPECT_EQ(r.seeds_passed, 5);
  EXPECT_EQ(r.range_probe, "x scaled by 2^11");
}

TEST(JudgeRecord, EveryDisagreementWithTheJudgeIsTampering) {
  const ChildShapeResponse ok = child_line(EvalStatus::kOk);
  EvalRecord r;
  EXPECT_NE(judge_record(r, ok, nullptr).find("without a verdict of the judge"), std::string::npos);
  JudgeVerdict failed = brackets({5040, 5100, 5030}, {1, 1, 1});
  failed.status = EvalStatus::kWrongResult;
  failed.claimed = EvalStatus::kOk;
  failed.error = "out[0, 0]: got nan";
  EXPECT_NE(judge_record(r, ok, &failed).find("the judge: wrong_result: out[0, 0]"),
            std::string::npos);
  JudgeVerdict told = brackets({5040, 5100, 5030}, {1, 1, 1});
  told.claimed = EvalStatus::kWrongResult;  // the relay rewrote the child's line, not its message
  EXPECT_NE(judge_record(r, ok, &told).find("told the judge"), std::string::npos);
  JudgeVerdict incomplete = brackets({5040, 5100, 5030}, {1, 1, 1});
  incomplete.status = EvalStatus::kRejected;
  incomplete.error = "the judge saw no check of the range probe";
  EXPECT_NE(judge_record(r, ok, &incomplete).find("range probe"), std::string::npos);
  JudgeVerdict one_set = brackets({5040, 5100, 5030}, {1, 1, 1});
  one_set.post_timing_sets = 1;
  EXPECT_NE(judge_record(r, ok, &one_set).find("rotated input sets"), std::string::npos);
  const ChildShapeResponse fifty = child_line(EvalStatus::kOk, 50);
  JudgeVerdict three = brackets({5040, 5100, 5030}, {1, 1, 1});
  EXPECT_NE(judge_record(r, fifty, &three).find("50 timed samples"), std::string::npos);
  JudgeVerdict tampered = three;
  tampered.tampering = "a check of shape 15 on input set 0x1 that is not one of the shape's";
  EXPECT_NE(judge_record(r, child_line(EvalStatus::kWrongResult), &tampered).find("input set"),
            std::string::npos);
}

TEST(JudgeRecord, RefutedTimingIsRejectedNotScored) {
  ChildShapeResponse c = child_line(EvalStatus::kOk);
  c.timing = claimed(150, 3);
  JudgeVerdict j = brackets({15040, 15100, 15030}, {1, 1, 1});
  EvalRecord r;
  apply_child_response(r, c);
  EXPECT_EQ(judge_record(r, c, &j), "");
  EXPECT_EQ(r.status, EvalStatus::kRejected);
  EXPECT_NE(r.error.find("timing refuted"), std::string::npos) << r.error;
}

TEST(JudgeRecord, FailuresKeepTheChildsStatusAndTakeTheJudgesWords) {
  JudgeVerdict j;
  j.status = EvalStatus::kWrongResult;
  j.claimed = EvalStatus::kWrongResult;
  j.error = "the candidate modified its input x (element 3); inputs are read-only";
  ChildShapeResponse c = child_line(EvalStatus::kWrongResult);
  c.error = "rewritten by the candidate";
  EvalRecord r;
  apply_child_response(r, c);
  EXPECT_EQ(judge_record(r, c, &j), "");
  EXPECT_EQ(r.status, EvalStatus::kWrongResult);
  EXPECT_EQ(r.error, j.error);
  // The candidate's own failure (a non-zero return) stands without a judge's failure.
  JudgeVerdict none;
  none.status = EvalStatus::kRejected;
  none.claimed = EvalStatus::kWrongResult;
  ChildShapeResponse returned = child_line(EvalStatus::kWrongResult);
  returned.error = "the candidate returned 1";
  EvalRecord r2;
  apply_child_response(r2, returned);
  EXPECT_EQ(judge_record(r2, returned, &none), "");
  EXPECT_EQ(r2.status, EvalStatus::kWrongResult);
  EXPECT_EQ(r2.error, "the candidate returned 1");
}

std::string verdict_line(const std::string& nonce, const std::string& shape,
                         const std::string& tampering = "") {
  JudgeVerdict v;
  v.nonce = nonce;
  v.shape_id = shape;
  v.tampering = tampering;
  return to_json(v).dump() + "\n";
}

TEST(JudgeChannel, TakesVerdictsInOrderAndATamperingLineAnywhere) {
  JudgeChannel ch("j1", {"15", "5"});
  auto got = ch.feed(verdict_line("j1", "15") + verdict_line("j1", "5") +
                     verdict_line("j1", "", "an unfinished message to the judge"));
  ch.finish();
  EXPECT_FALSE(ch.broken()) << ch.why();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2].tampering, "an unfinished message to the judge");
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {verdict_line("child-nonce", "15"), "nonce"},
           {verdict_line("j1", "5"), "shape 5 where 15"},
           {"{}\n", "nonce"},
       }) {
    JudgeChannel bad("j1", {"15", "5"});
    EXPECT_TRUE(bad.feed(text).empty());
    EXPECT_TRUE(bad.broken()) << text;
    EXPECT_NE(bad.why().find(why), std::string::npos) << bad.why();
  }
}

// The judge's own failure travels in its verdict (judge_failed, read strictly): the runner gives
// the task back on it instead of charging the candidate (GatesTest.AJudgeThatFails...).
TEST(JudgeChannel, TheJudgesOwnFailureIsAFieldOfTheVerdictReadStrictly) {
  JudgeVerdict v;
  v.nonce = "j1";
  v.shape_id = "15";
  v.status = EvalStatus::kCrashed;
  v.error = "judge: allocating: out of memory";
  v.judge_failed = true;
  auto back = judge_verdict_from_json(to_json(v), "verdict");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_TRUE(back->judge_failed);
  Json missing = to_json(v);
  missing.erase("judge_failed");
  auto refused = judge_verdict_from_json(missing, "verdict");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("judge_failed"), std::string::npos)
      << refused.error().message;
  Json wrong = to_json(v);
  wrong["judge_failed"] = "yes";
  EXPECT_FALSE(judge_verdict_from_json(wrong, "verdict"));
}

}  // namespace
}  // namespace atrex::runner
