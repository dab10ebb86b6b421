// Timing the candidate cannot bend (issue 14 item 4; docs/evaluation.md "The judge"): the
// child's claimed timed samples held against the judge's clock. The judge brackets every timed
// call (a graph replay: its batch) from its go to the child's done; a bracket can only be longer
// than the call it holds, never shorter, whatever the candidate does to the child's clock or
// to the child's report. So the shortest bracket, less the latency of the two pipe hops and the
// harness's own per-sample cost (the judge's calibration), bounds the true time of a call from
// below. A claimed median under half that bound cannot be a measurement of these calls.
// That holds only while the child waits for the go before the call and says done after it; the
// candidate runs in the child and can relay the judge's pipes, so where the backend lets the
// bracket hold the work (JudgeVerdict::brackets_hold_work: cpu) only the brackets the judge
// checked count (JudgeVerdict::checked_brackets).
#pragma once

#include <string>

#include "atrex/common/wire/eval_record.h"
#include "atrex/common/wire/child_protocol.h"

namespace atrex::runner {

// The pipe hops of a bracket (the judge's go reaching the child, the child's done reaching the
// judge), allowed per bracket: at least this, or the judge's measured wake-up latency when that
// is longer (a loaded host), so that wake-ups do not make an honest call look slow (only the
// shortest bracket counts, and latency only lengthens a bracket).
// 5 ms: on the loaded 2-core development VM honest brackets of a 3 us call came out 1.4-1.6 ms
// long, and in the attack round of the second session (load ~18) 2.6 ms without the sandbox and
// 8 ms in it, while the judge's echo measured far less. Part of it was bwrap --new-session (two
// scheduling autogroups: now gone, sandbox.h SandboxView::new_session); the rest, seen without
// any sandbox too, is the wake-up of a process that has just burnt CPU (the flush before each
// call): the scheduler does not let it preempt a busy CPU at once, and the judge's ping between
// two idle threads never sees that. 1 ms was tried and refuted honest 3 us calls under that
// load. The fix is a calibration on the same path (brackets of no call after the same flush,
// interleaved with the timed ones), not a lower constant (docs/evaluation.md "The floor").
inline constexpr double kBracketLatencyUs = 5000;
// The same allowance where only the brackets the judge checked count (JudgeVerdict::
// brackets_hold_work: cpu). The shortest of every bracket hides a stall in some of them; the
// shortest of two or three checked ones does not: on the loaded development VM (tests at nice 10
// next to other builds) both checked brackets of honest calls held 10-15 ms more than the call
// and the digest of its outputs the child then took (rms_norm shape 0: 2.1 ms claimed, 20 ms
// brackets), even with the child
// spinning for the go. 20 ms: bends on cpu calls shorter than ~25 ms go unrefuted.
inline constexpr double kCheckedBracketLatencyUs = 20000;
// The judge's latency probe at timing_begin counts up to this many times its probe at start
// (JudgeVerdict::start_latency_us, taken before the candidate's child was spawned). A candidate
// knows when timing_begin comes and can load the host just then (attack round 3: 256 spinning
// threads, parked at the first call, once made the probe 152 ms and let a 100x bend through);
// it cannot load the host before it is loaded. 4x leaves room for load that grows by itself
// between the two probes; above the floors only (kBracketLatencyUs, kCheckedBracketLatencyUs).
inline constexpr double kStartLatencyFactor = 4;
// How far under the outside bound a claimed median may be before it is refused: 2x.
inline constexpr double kClaimedTimeFactor = 2;

struct TimingCrossCheck {
  bool plausible = true;
  double bound_us = 0;    // the judge's lower bound on one call (microseconds)
  double claimed_us = 0;  // the child's median
  double shortest_bracket_us = 0;  // per call, of the shortest bracket (diagnostics)
  double latency_us = 0;           // the allowance used per bracket
  std::string why;        // when not plausible: the record's error
};

// `claimed`: the child's timing; `judge`: the judge's brackets and calibration. A claim whose
// sample count differs from the judge's brackets is tampering, not a timing verdict: the caller
// checks that first (timed_calls()).
TimingCrossCheck cross_check_timing(const TimingSummary& claimed, const JudgeVerdict& judge);
// The number of timed samples the judge's brackets hold.
int timed_calls(const JudgeVerdict& judge);

}  // namespace atrex::runner
