// ShapeRun (shape_run.h): the performance gate. Timed calls rotate over up to 8 input sets,
// spliced per call (the judge re-checks calls of its choosing), start from poisoned outputs and
// are timed by CUPTI spans, graph replay or events (docs/evaluation.md "Gate 3"); the outputs
// are re-checked after timing.
#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include <fmt/format.h>

#include "kernel_checks.h"
#include "atrex/common/wire/judge_messages.h"
#include "shape_run.h"

namespace atrex::runner::child {

// Set 0 is the last correctness seed's (in pristine_in_); sets 1.. are fresh draws of timing
// seeds into the buffers allocate() found room for.
std::optional<Failure> ShapeRun::prepare_rotation(ChildShapeResponse& resp) {
  ATREX_ASSERT(key_.kind == SetKind::kUsual && key_.variant < 0,
               "timing starts from a correctness seed's inputs");
  rotation_keys_.assign(1, key_);
  {
    auto phase = phases_.scope("inputs");
    for (size_t k = 1; k < rotation_in_.size(); ++k) {
      const SetKey key{timing_seed(item_.seeds.back(), static_cast<int>(k))};
      for (size_t i = 0; i < shape_.inputs.size(); ++i) {
        if (auto f = device_error(draw_input(dev_, shape_, i, key, rotation_in_[k][i]),
                                  "generating the timed calls' inputs"))
          return f;
      }
      rotation_keys_.push_back(key);
    }
    if (auto f = device_error(dev_.synchronize(), "generating the timed calls' inputs")) return f;
  }
  const size_t n = rotation_in_.size();
  const char* splice = dev_.brackets_hold_work()
                           ? "spliced per call at the judge's go (window-rotated inputs)"
                           : "spliced per call";
  resp.input_rotation =
      n >= 2 ? fmt::format("on: {} input sets, {}", n, splice)
             : fmt::format("off: no room for a second input set ({}); {}", rotation_error_, splice);
  return std::nullopt;
}

Status ShapeRun::prepare_timed_call(int64_t t) {
  const size_t k = static_cast<size_t>(t) % rotation_in_.size();
  reset_windows();
  for (size_t i = 0; i < work_in_.size(); ++i) {
    const size_t bytes = shape_.inputs[i].bytes();
    ATREX_TRY(dev_.copy(work_in_[i], rotation_in_[k][i], bytes));
    // The second copy a window (begin_timed_call) reads past the first one's end.
    if (windowed(i))
      ATREX_TRY(dev_.copy(static_cast<uint8_t*>(work_in_[i]) + bytes, rotation_in_[k][i], bytes));
  }
  const bool at_go = dev_.brackets_hold_work();
  if (!at_go) ATREX_TRY(splice_inputs(dev_, shape_, work_in_, t));
  for (size_t i = 0; i < out_.size(); ++i) ATREX_TRY(initialise_output(i, out_[i], work_in_));
  key_ = SetKey{rotation_keys_[k].seed, SetKind::kUsual, at_go ? -1 : t};
  current_pristine_ = &rotation_in_[k];
  return ok();
}

// Inside the judge's bracket: nothing the call needs is known before the go (the splice), and
// on cpu the judge reads the outputs in its arena when the done reaches it, before any step of
// the harness's touches them again (end_timed_call waits for its answer).
void ShapeRun::begin_timed_call() {
  const int64_t splice = judge_.call_begin();
  if (!dev_.brackets_hold_work() || splice < 0 || !hook_error_.empty()) return;
  // Windowed inputs: the launch points at the rotation the go names (no copy); the others are
  // spliced in place (apply_splice is the judge's side of the same).
  Status s = ok();
  for (size_t i = 0; s && i < shape_.inputs.size(); ++i) {
    if (!windowed(i)) {
      s = splice_input(dev_, shape_, i, work_in_[i], splice);
      continue;
    }
    const size_t es = problems::dtype_size(shape_.inputs[i].dtype);
    work_in_[i] = static_cast<uint8_t*>(work_base_[i]) + window_offset(shape_, i, splice) * es;
    launch_->set_input(i, work_in_[i]);
  }
  for (size_t o = 0; s && o < out_.size(); ++o) {
    const std::string& from = shape_.def->outputs[o].initial_from;
    for (size_t i = 0; s && !from.empty() && i < shape_.inputs.size(); ++i) {
      if (shape_.inputs[i].name == from) s = splice_input(dev_, shape_, i, out_[o], splice);
    }
  }
  if (!s) hook_error_ = "splicing a timed call's inputs: " + s.error().message;
  key_.variant = splice;
}

void ShapeRun::end_timed_call() { judge_.call_end(1); }

std::optional<Failure> ShapeRun::restore_rotation_set(int k) {
  const auto& set = rotation_in_[static_cast<size_t>(k)];
  reset_windows();
  for (size_t i = 0; i < work_in_.size(); ++i) {
    if (auto f = device_error(dev_.copy(work_in_[i], set[i], shape_.inputs[i].bytes()),
                              "copying inputs"))
      return f;
  }
  key_ = rotation_keys_[static_cast<size_t>(k)];
  current_pristine_ = &set;
  return std::nullopt;
}

std::optional<Failure> ShapeRun::recheck_timed_call(ChildShapeResponse& resp, int64_t t) {
  if (auto f = device_error(dev_.synchronize(), "before re-checking a timed call")) return f;
  inputs_due_ = true;  // a re-checked timed call's inputs go to the judge too (judge.cpp)
  const size_t n = rotation_in_.size();
  return check_outputs(resp, 0, 0,
                       fmt::format("re-check of timed call {} (input set {} of {}, spliced; chosen "
                                   "by the judge after the call): ",
                                   t, static_cast<size_t>(t) % n, n));
}

// Performance gate on the last seed's inputs: warm-up, then cache-flushed timed calls (graph
// replay where the call can be captured, else eager; CUPTI kernel spans where the backend can
// trace; request "timing_mode": auto|cupti|graph|eager) until min_iterations, min_time_s and the
// relative standard error target are all met, or max_iterations / max_timing_s is reached; then
// re-checks of the outputs and inputs, of a graph replay and of one more eager call.
std::optional<Failure> ShapeRun::measure(ChildShapeResponse& resp, double atol, double rtol) {
  const TimingLoop& loop = task_.timing;
  const int warmup = loop.warmup_iterations;
  const int min_it = loop.min_iterations, max_it = loop.max_iterations;
  const double min_time_us = loop.min_time_s * 1e6;
  const double target_rse = loop.target_rse;
  const TimingMode mode = loop.timing_mode;
  auto call = [&] { return entry_(launch_->launch()); };
  // Every timed call starts from poisoned outputs (in-place outputs from their input), set
  // outside the timed window: a candidate cannot skip work because its output already holds
  // the answer of the previous call; the last timed call's outputs are checked below.
  //
  // Timed calls rotate over up to kMaxRotationSets input sets of different content (fresh draws,
  // each with its reference in the judge), copied into the same input buffers outside the timed
  // window, and each call's inputs are spliced (a few values moved, shape_run_support.h): a
  // candidate that memoises its output by input address, or by a sample of the input values,
  // returns a stale answer, caught when the judge re-checks a timed call of its choosing or on
  // the last timed call's outputs; one that keys on all of the values never hits.
  if (auto f = prepare_rotation(resp)) return f;
  int64_t prepared = 0;  // timed calls set up so far; the last one was call prepared - 1
  auto reset_outputs = [&]() -> Status { return prepare_timed_call(prepared++); };
  std::optional<PhaseClock::Scope> timing_phase(
      phases_.scope("timing"));  // ends before the re-checks
  for (int i = 0; i < warmup; ++i) {
    const int rc = call();
    if (rc != 0) return Failure{EvalStatus::kWrongResult, "during warm-up: " + returned_error(rc)};
  }
  if (auto f = device_error(dev_.synchronize(), "during warm-up")) return f;
  if (auto f = check_guards("the warm-up calls")) return f;
  const Json clocks_before = dev_.clocks();

  // CUPTI spans time the calls where the backend can trace (auto, cupti); the graph is then
  // captured once for the replay re-check below, not for timing.
  const std::string trace_unavailable = dev_.tracing_unavailable();
  if (mode == TimingMode::kCupti && !trace_unavailable.empty())
    return Failure{EvalStatus::kRejected, "timing_mode cupti: " + trace_unavailable};
  const bool cupti =
      trace_unavailable.empty() && (mode == TimingMode::kAuto || mode == TimingMode::kCupti);
  bool graph = false;
  std::string graph_unsupported;
  if (mode == TimingMode::kGraph && dev_.graph_timing_method().empty()) {
    return Failure{EvalStatus::kRejected, "timing_mode graph: this backend has no graph replay"};
  }
  if (mode != TimingMode::kEager && !dev_.graph_timing_method().empty()) {
    int rc = 0;
    const int batch = cupti ? 1 : std::clamp(min_it, 1, 50);
    if (auto f = device_error(dev_.capture_timed(call, reset_outputs, batch, rc, graph_unsupported),
                              "capturing the timed graph")) {
      return f;
    }
    graph = graph_unsupported.empty();
    if (!graph && mode == TimingMode::kGraph) {
      return Failure{EvalStatus::kRejected,
                     "timing_mode graph: the call cannot be captured: " + graph_unsupported};
    }
  }
  std::vector<double> samples;
  std::vector<double> event_samples;     // cupti: the same calls timed with events
  std::vector<double> drains;            // eager and cupti: ChildDevice::last_drain_us per call
  std::vector<double> reply_drains;      // eager and cupti: the same after the judge's answer
  std::vector<double> start_gaps;        // eager and cupti: ChildDevice::last_start_gap_us
  std::vector<StrayRecord> strays;       // cupti: of the last collect
  std::map<uint64_t, CallTrace> traces;  // cupti: by call number
  std::map<uint64_t, int> trace_set;     // cupti: call number -> input set it ran on
  const auto wall_limit =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(loop.max_timing_s);
  auto done = [&] {
    const int n = static_cast<int>(samples.size());
    if (n >= max_it) return true;
    if (n < min_it) return false;
    if (std::chrono::steady_clock::now() > wall_limit) return true;
    double total = 0;
    for (double v : samples) total += v;
    return total >= min_time_us && stats::relative_standard_error(samples) <= target_rse;
  };
  uint64_t next_call = 0;
  // After each eager or traced call: the device's idle checks of the call (ChildDevice
  // last_drain_us, last_start_gap_us), then, the judge having answered the call's done and
  // before the harness's own checks touch the device, how long a device-wide synchronize takes
  // (microseconds). Work launched after the call's drain (from a callback at its exit, a signal
  // handler while the child waits for the judge) would otherwise run inside the guard check's
  // wait, which no clock holds.
  auto note_idle = [&]() -> Status {
    drains.push_back(dev_.last_drain_us());
    start_gaps.push_back(dev_.last_start_gap_us());
    const auto t0 = std::chrono::steady_clock::now();
    ATREX_TRY(dev_.synchronize());
    reply_drains.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    return ok();
  };
  // The judge's clock brackets every timed call (a graph replay: its batch), from its go to the
  // child's done (judge_link.h); the runner holds the claimed samples against those brackets.
  if (auto f = device_error(judge_.timing_begin(item_.shape_id), "opening the judge's timing"))
    return Failure{EvalStatus::kCrashed, f->error};
  dev_.set_timing_hooks([this] { begin_timed_call(); }, [this] { end_timed_call(); });
  struct HooksOff {
    ChildDevice& dev;
    ~HooksOff() { dev.set_timing_hooks({}, {}); }
  } hooks_off{dev_};
  while (!done()) {
    if (!judge_.failed().empty())
      return Failure{EvalStatus::kCrashed, "judge: " + judge_.failed()};
    if (!hook_error_.empty()) return Failure{EvalStatus::kCrashed, hook_error_};
    if (cupti) {
      // A batch of traced calls, then their spans (a call without device records: its event time).
      const uint64_t first = next_call;
      for (int k = 0; k < std::clamp(min_it, 1, 50); ++k) {
        int rc = 0;
        double ev = 0;
        if (auto f = device_error(reset_outputs(), "poisoning outputs before a timed call"))
          return f;
        trace_set[next_call] =
            static_cast<int>(static_cast<size_t>(prepared - 1) % rotation_in_.size());
        if (auto f = device_error(dev_.trace_call(call, next_call++, rc, ev), "traced call"))
          return f;
        if (rc != 0)
          return Failure{EvalStatus::kWrongResult, "during timing: " + returned_error(rc)};
        event_samples.push_back(ev);
        if (auto f = device_error(note_idle(), "after a traced call")) return f;
        if (auto f = check_guards(fmt::format("timed call {}", prepared - 1))) return f;
        if (judge_.take_recheck()) {
          if (auto f = recheck_timed_call(resp, prepared - 1)) return f;
        }
      }
      if (auto f = device_error(dev_.synchronize(), "traced calls")) return f;
      const int64_t records_before = dev_.trace_stats().value("device", int64_t{0});
      if (auto f = device_error(dev_.trace_collect(traces, strays), "collecting CUPTI records"))
        return f;
      // Every batch leaves records (the harness's flush and resets, and every honest call's
      // work: its outputs start poisoned). A batch with none at all, where tracing recorded
      // before in this child, is tracing switched off under the harness (cuptiFinalize,
      // cuptiActivityDisable): its calls would all fall back to event windows. Where it never
      // recorded, the calls fall back to their event times as before.
      if (records_before > 0 && dev_.trace_stats().value("device", int64_t{0}) == records_before)
        return Failure{EvalStatus::kRejected,
                       fmt::format("CUPTI recorded no device work at all during timed calls {}-{} "
                                   "after it had recorded before: tracing was switched off under "
                                   "the harness",
                                   first + 1, next_call)};
      if (!strays.empty()) {
        // The candidate's own kernel names (a Python candidate's Triton kernels are in no ELF
        // file: none of its kernels is named like the harness's anyway).
        static const std::set<std::string> none;
        if (auto f = check_stray_work(strays, defined_kernel_keys("/proc/self/exe"),
                                      python_ ? none : defined_kernel_keys(task_.library)))
          return f;
      }
      for (uint64_t id = first; id < next_call; ++id) {
        auto it = traces.find(id);
        samples.push_back(it != traces.end() && it->second.span_us() > 0 ? it->second.span_us()
                                                                         : event_samples[id]);
      }
      continue;
    }
    if (graph) {
      const size_t before = samples.size();
      (void)judge_.call_begin();  // the captured splices stand (no backend with graphs splices at go)
      const Status replayed = dev_.replay_timed(samples);
      judge_.call_end(static_cast<int>(samples.size() - before));
      if (auto f = device_error(replayed, "graph replay")) return f;
      if (auto f = check_guards("a graph replay of the timed calls")) return f;
      // The replay's last sample left its outputs (key_: the last captured call's set).
      if (judge_.take_recheck()) {
        if (auto f = recheck_timed_call(resp, key_.variant)) return f;
      }
      continue;
    }
    int rc = 0;
    double us = 0;
    if (auto f = device_error(reset_outputs(), "poisoning outputs before a timed call")) return f;
    if (auto f = device_error(dev_.time_call(call, rc, us), "timed call")) return f;
    if (rc != 0) return Failure{EvalStatus::kWrongResult, "during timing: " + returned_error(rc)};
    samples.push_back(us);
    if (auto f = device_error(note_idle(), "after a timed call")) return f;
    if (auto f = check_guards(fmt::format("timed call {}", prepared - 1))) return f;
    if (judge_.take_recheck()) {
      if (auto f = recheck_timed_call(resp, prepared - 1)) return f;
    }
  }
  dev_.set_timing_hooks({}, {});
  if (!judge_.failed().empty())
    return Failure{EvalStatus::kCrashed, "judge: " + judge_.failed()};
  if (!hook_error_.empty()) return Failure{EvalStatus::kCrashed, hook_error_};
  if (auto f = device_error(judge_.timing_end(), "closing the judge's timing"))
    return Failure{EvalStatus::kCrashed, f->error};
  inputs_due_ = true;
  timing_phase.reset();
  std::string method = cupti   ? "cupti_kernel_span_l2_flush"
                       : graph ? dev_.graph_timing_method()
                               : dev_.timing_method();
  // Device work outside the calls' timed windows (note_idle): an honest call leaves the device
  // idle after its end event and after the judge's answer (a few microseconds of host latency)
  // and nothing runs between the flush and its start event; one that left its real work on a
  // non-blocking stream, to a thread, a callback or a signal handler, behind a fast kernel on
  // the given stream, leaves that work (kernels/faults/arena_attacks/cupti_escape_side_stream.cu,
  // kernels/faults/stray_attacks).
  if (!drains.empty()) {
    const double timed = stats::median(samples),
                 bound = std::max(kDrainFloorUs, kDrainShare * timed);
    const std::pair<double, const char*> idle[] = {
        {stats::median(drains), "after each call's end event"},
        {stats::median(reply_drains), "after the judge's answer to each call's done"},
        {stats::median(start_gaps), "before each call's start event, after the flush"}};
    for (const auto& [busy, where] : idle) {
      if (busy > bound)
        return Failure{
            EvalStatus::kRejected,
            fmt::format("device work outside the timed windows: the device was busy a median "
                        "{:.1f} us {} (timed {:.1f} us); work on a stream not joined back to the "
                        "given stream, or launched by another thread, a callback or a signal "
                        "handler, is outside the timed window (docs/evaluation.md \"Timing\")",
                        busy, where, timed)};
    }
  }
  std::string cupti_note;
  if (cupti) {
    if (auto f = check_kernel_sets(traces, trace_set)) return f;
    // Work the call does on the host before or between its launches is not device time; a call
    // whose event window is much longer than its device span is timed with the events.
    const double span = stats::median(samples), ev = stats::median(event_samples);
    if (ev - span > std::max(20.0, 0.25 * span)) {
      cupti_note = fmt::format(
          "event window {:.1f} us vs device span {:.1f} us: host work inside the call; timed with "
          "events",
          ev, span);
      samples = event_samples;
      method = dev_.timing_method();
    }
  }
  resp.timing = timing_summary(samples, method);
  if (cupti && python_) {
    attribute_python_kernels(resp, python_triton_cache_dir(), traces);
  } else if (cupti) {
    attribute_kernels(resp, task_.library, traces);
    report_unlaunched_kernels(resp, task_.library, traces);
  }
  if (cupti) {
    resp.timing->event_time_us_median = stats::median(event_samples);
    resp.timing->cupti_records = dev_.trace_stats();
  }
  if (!cupti_note.empty()) resp.timing->cupti_fallback = cupti_note;
  if (!cupti && mode == TimingMode::kAuto && !dev_.graph_timing_method().empty())
    resp.timing->cupti_unavailable = trace_unavailable;
  if (!graph_unsupported.empty() && mode != TimingMode::kEager)
    resp.timing->graph_fallback = graph_unsupported;
  resp.clocks = Json{{"before", clocks_before}, {"after", dev_.clocks()}};
  if (auto f = device_error(dev_.synchronize(), "after timing")) return f;
  return recheck_after_timing(resp, atol, rtol, graph);
}

// After timing, on poisoned outputs each time: the last timed call's outputs, one checked call on
// each input set in the same buffers (rotation), a replay of the captured graph, and one more
// eager call.
std::optional<Failure> ShapeRun::recheck_after_timing(ChildShapeResponse& resp, double atol,
                                                      double rtol, bool graph) {
  // key_ names the last timed call's set (eager) or the last captured call's (graph replay).
  if (auto f = check_outputs(resp, atol, rtol, "outputs of the last timed call: ")) return f;
  const int n = static_cast<int>(rotation_in_.size());
  if (n >= 2) {
    // One checked call on each of the next two sets in turn (unspliced), in the same buffers:
    // whichever answer a memoising candidate kept, one of them is stale.
    const int last = static_cast<int>(static_cast<size_t>(std::max<int64_t>(key_.variant, 0)) %
                                      rotation_in_.size());
    for (int j = 1; j <= 2; ++j) {
      if (auto f = restore_rotation_set((last + j) % n)) return f;
      if (auto f =
              call_and_check(resp, atol, rtol, "new inputs in the same buffers after timing: "))
        return f;
    }
  }
  // What the timed replays computed must be what the eager call computes: a candidate whose
  // work escapes the capture (a side stream never joined back, host-side shortcuts) fails here.
  if (graph) {
    if (auto f = call_and_check(resp, atol, rtol, "graph replay of the timed call: ", [&] {
          return dev_.replay_call() ? 0 : -1;
        })) {
      return f;
    }
  }
  // One more poisoned call after the timed ones: a candidate must not behave differently
  // once it has been called many times (e.g. stop computing after the correctness seeds).
  if (auto f = call_and_check(resp, atol, rtol, "after timing: ")) return f;
  return std::nullopt;
}

}  // namespace atrex::runner::child
