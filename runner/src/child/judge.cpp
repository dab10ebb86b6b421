// The judge (judge.h): checks of the candidate child's calls against references that live only
// here, and the child's timed calls on this process's clock.
#include "judge.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "atrex/common/process/seccomp.h"
#include "atrex/common/untrusted_json.h"
#include "child_runner.h"
#include "judge_core.h"
#include "protocol/arena_handoff.h"
#include "atrex/common/wire/judge_messages.h"

namespace atrex::runner {
namespace judge_detail {

namespace {
void close_fd(int fd) { ::close(fd); }
}  // namespace

double g_start_latency_us = 0;

std::optional<std::string> Judge::read_line() {
  for (;;) {
    if (const auto nl = pending_.find('\n'); nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return line;
    }
    if (pending_.size() > (1u << 20)) throw Stop{true, "a message to the judge is over 1 MiB"};
    char buf[65536];
    const ssize_t n = ::read(in_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (!pending_.empty()) throw Stop{true, "an unfinished message to the judge"};
      return std::nullopt;  // the child is done (or gone)
    }
    pending_.append(buf, static_cast<size_t>(n));
  }
}

std::optional<Json> Judge::read_message() {
  const auto line = read_line();
  if (!line) return std::nullopt;
  auto parsed = parse_untrusted_json(*line);
  if (!parsed) {
    const std::string& why = parsed.error().message;
    throw Stop{true, "a message to the judge is " + (why == "not JSON" ? why : "JSON " + why)};
  }
  return std::move(*parsed);
}

void Judge::reply(const Json& j) {
  // The child may be gone (its pipe closed): that ends the judge at the next read.
  (void)write_response_line(out_, j.dump() + "\n");
}

void Judge::write_verdict(const JudgeVerdict& v) {
  JudgeVerdict out = v;
  out.nonce = task_.nonce;
  out.device_arena = device_arena_ != nullptr;  // dropped at the first shape on the child's no
  if (!write_response_line(verdict_fd_, to_json(out).dump() + "\n")) verdict_broken_ = true;
}

const ChildShape& Judge::current(const std::string& shape_id, bool enter) {
  if (index_ >= task_.shapes.size())
    throw Stop{true, fmt::format("a message for shape {} after the task's last shape", shape_id)};
  const ChildShape& item = task_.shapes[index_];
  if (shape_id != item.shape_id)
    throw Stop{true, fmt::format("a message for shape {} where shape {} is in hand", shape_id,
                                 item.shape_id)};
  if (enter && !entered_) enter_shape();
  return item;
}

// Per-shape bookkeeping, for the shape at index_ (before its first message).
void Judge::begin_verdict() {
  verdict_ = JudgeVerdict{};
  verdict_.start_latency_us = g_start_latency_us;
  if (index_ < task_.shapes.size()) verdict_.shape_id = task_.shapes[index_].shape_id;
  passed_seeds_.clear();
  post_timing_sets_.clear();
  in_timing_ = bracket_open_ = recheck_pending_ = false;
  inputs_due_ = true;
  timed_calls_ = 0;
  brackets_.clear();
  last_bracket_checked_ = false;
  verdict_.brackets_hold_work = dev_.brackets_hold_work();
  const auto* def = problems::find_native_operator(task_.operator_name);
  probe_required_ = def && def->range_probe.enabled() && index_ < task_.shapes.size() &&
                    task_.shapes[index_].range_probe;
  edge_required_ = def && !def->edge_cases.empty() && index_ < task_.shapes.size() &&
                   task_.shapes[index_].edge_cases;
}

void Judge::enter_shape() {
  const ChildShape& item = task_.shapes[index_];
  def_ = problems::find_native_operator(task_.operator_name);
  if (!def_) throw Stop{true, "a check of an operator without a native definition"};
  problems::Shape shape;
  shape.id = item.shape_id;
  shape.params = item.params;
  auto resolved = problems::resolve_shape(*def_, shape);
  if (!resolved) throw Stop{true, "a check of a shape that does not resolve: " +
                                      resolved.error().message};
  shape_ = std::move(*resolved);
  layout_ = shared_layout(shape_);
  atol_ = def_->atol.value_or(task_.atol);
  rtol_ = def_->rtol.value_or(task_.rtol);
  buffers_ = std::make_unique<Buffers>(dev_);
  auto take = [&](size_t bytes, std::vector<void*>& into) {
    auto p = buffers_->alloc(bytes);
    if (!p || fail_allocations_) {
      const std::string why =
          p ? std::string("failed as ATREX_TEST_JUDGE_FAIL=alloc asks") : p.error().message;
      throw Stop{false, "judge: allocating: " + why, true};
    }
    into.push_back(*p);
  };
  for (auto& set : sets_) {
    set = InputSet{};
    for (const auto& d : shape_.inputs) take(d.bytes(), set.in);
    for (const auto& d : shape_.outputs) take(d.bytes(), set.ref);
  }
  if (arena_socket_ >= 0) {
    // The child answered before its first message (child_main), before any candidate code ran.
    if (!receive_arena_answer(arena_socket_)) device_arena_ = nullptr;
    ::close(arena_socket_);
    arena_socket_ = -1;
  }
  host_in_.assign(shape_.inputs.size(), {});
  host_out_.assign(shape_.outputs.size(), {});
  cand_in_.clear();
  cand_out_.clear();
  calib_in_.clear();
  calib_out_.clear();
  if (device_arena_) {
    // The candidate's buffers are compared where the child keeps them; the host copies are
    // made only for a failure's message (candidate_to_host).
    const DeviceArenaLayout arena = device_arena_layout(shape_);
    if (arena.total > device_arena_bytes_)
      throw Stop{false,
                 fmt::format("judge: shape {} needs {} bytes of the device arena, it holds {}",
                             item.shape_id, arena.total, device_arena_bytes_),
                 true};
    for (uint64_t at : arena.input) cand_in_.push_back(device_arena_ + at);
    for (uint64_t at : arena.output) cand_out_.push_back(device_arena_ + at);
    if (item.performance) {
      for (const auto& d : shape_.inputs) take(d.bytes(), calib_in_);
      for (const auto& d : shape_.outputs) take(d.bytes(), calib_out_);
    }
    entered_ = true;
    return;
  }
  for (size_t i = 0; i < shape_.inputs.size(); ++i) host_in_[i].resize(shape_.inputs[i].bytes());
  for (size_t i = 0; i < shape_.outputs.size(); ++i)
    host_out_[i].resize(shape_.outputs[i].bytes());
  // Every check copies what the child published from these to the device.
  for (auto* list : {&host_in_, &host_out_})
    for (auto& b : *list)
      if (dev_.pin_host(b.data(), b.size())) pinned_.push_back(b.data());
  if (dev_.host_memory()) {
    for (auto& b : host_in_) cand_in_.push_back(b.data());
    for (auto& b : host_out_) cand_out_.push_back(b.data());
  } else {
    for (const auto& d : shape_.inputs) take(d.bytes(), cand_in_);
    for (const auto& d : shape_.outputs) take(d.bytes(), cand_out_);
  }
  calib_in_ = cand_in_;
  calib_out_ = cand_out_;
  entered_ = true;
}

void Judge::leave_shape() {
  for (void* p : pinned_) dev_.unpin_host(p);
  pinned_.clear();
  for (auto& set : sets_) set = InputSet{};
  cand_in_.clear();
  cand_out_.clear();
  calib_in_.clear();
  calib_out_.clear();
  host_in_.clear();
  host_out_.clear();
  buffers_.reset();
  if (entered_) dev_.trim();
  entered_ = false;
  ++index_;
  begin_verdict();
}


void Judge::finish_shape(EvalStatus claimed) {
  const ChildShape& item = task_.shapes[index_];
  verdict_.claimed = claimed;
  verdict_.seeds_passed = static_cast<int>(passed_seeds_.size());
  // A shape may end inside its timed calls (or with a re-check asked for and not made) only
  // with a verdict that scores nothing: a failed re-check, or the child's own failure (the
  // candidate returned an error, wrote out of bounds, a device error).
  if ((in_timing_ || recheck_pending_) && claimed == EvalStatus::kOk)
    throw Stop{true, recheck_pending_
                         ? "a shape reported ok without the re-check of a timed call the judge "
                           "asked for"
                         : "a shape ended inside its timed calls"};
  in_timing_ = recheck_pending_ = false;
  if (verdict_.status != EvalStatus::kWrongResult) {
    std::vector<std::string> missing;
    for (uint64_t s : item.seeds) {
      if (!passed_seeds_.count(s)) {
        missing.push_back("the correctness seeds");
        break;
      }
    }
    if (probe_required_ && verdict_.range_probe.empty()) missing.push_back("the range probe");
    if (edge_required_ && verdict_.edge_case.empty()) missing.push_back("the edge-case set");
    if (item.performance && !verdict_.timed) missing.push_back("the timed calls");
    if (item.performance && verdict_.timed_rechecks == 0)
      missing.push_back("the re-check of a timed call");
    if (item.performance && verdict_.post_timing_checks < 2)
      missing.push_back("the checks after timing");
    if (missing.empty()) {
      verdict_.status = EvalStatus::kOk;
    } else {
      std::string m;
      for (const auto& s : missing) m += (m.empty() ? "" : ", ") + s;
      verdict_.status = EvalStatus::kRejected;
      verdict_.error = fmt::format("the judge saw no check of {} ({} checked calls)", m,
                                   verdict_.checks);
    }
  }
  write_verdict(verdict_);
  leave_shape();
}

void Judge::handle(const Json& message) {
  const auto arrived = Clock::now();  // a call_end's bracket ends here, before the parse
  auto parsed = judge_message_from_json(message, "a message to the judge");
  if (!parsed) throw Stop{true, parsed.error().message};
  // After the judge asked to re-check a timed call, only that check may come.
  if (recheck_pending_ && !std::holds_alternative<JudgeCheck>(*parsed) &&
      !std::holds_alternative<JudgeShapeEnd>(*parsed))
    throw Stop{true, fmt::format("the timed call the judge chose to re-check was not published "
                                 "(\"{}\" came instead)",
                                 message.value("op", std::string()))};
  if (const auto* prep = std::get_if<JudgePrepare>(&*parsed)) {
    current(prep->shape_id);
    if (in_timing_) throw Stop{true, "an input set prepared inside the timed calls"};
    legit_set(prep->key);
    input_set(prep->key);
  } else if (const auto* chk = std::get_if<JudgeCheck>(&*parsed)) {
    current(chk->shape_id);
    if (in_timing_ && !recheck_pending_) throw Stop{true, "a check inside the timed calls"};
    check(chk->key, chk->context, chk->inputs);
  } else if (const auto* begin = std::get_if<JudgeTimingBegin>(&*parsed)) {
    const ChildShape& item = current(begin->shape_id);
    if (!item.performance || in_timing_ || verdict_.timed)
      throw Stop{true, fmt::format("timed calls of shape {} not asked for, or twice", begin->shape_id)};
    // The calibration: one timed sample's cost beyond the call, on this process's device and
    // clock, with this shape's output reset (and input copy) standing in for the child's.
    InputSet* from = sets_[0].filled ? &sets_[0] : sets_[1].filled ? &sets_[1] : nullptr;
    auto reset = [&]() -> Status {
      for (size_t i = 0; i < calib_out_.size(); ++i)
        ATREX_TRY(dev_.fill(calib_out_[i], 0xFF, shape_.outputs[i].bytes()));
      for (size_t i = 0; from && i < calib_in_.size(); ++i)
        ATREX_TRY(dev_.copy(calib_in_[i], from->in[i], shape_.inputs[i].bytes()));
      return ok();
    };
    device(dev_.bracket_overhead(reset, verdict_.bracket_overhead_us), "calibrating timing");
    verdict_.bracket_latency_us = wake_up_latency_us(ping_, pong_);
    in_timing_ = true;
    timed_calls_ = 0;
    recheck_after_calls_ = static_cast<int64_t>(
        rng_() % static_cast<uint64_t>(std::max(1, task_.timing.min_iterations)));
    reply(judge_go());
  } else if (std::holds_alternative<JudgeCallBegin>(*parsed)) {
    call_begin();
  } else if (const auto* done = std::get_if<JudgeCallEnd>(&*parsed)) {
    call_end(*done, arrived);
  } else if (std::holds_alternative<JudgeTimingEnd>(*parsed)) {
    if (!in_timing_ || bracket_open_) throw Stop{true, "timed calls ended that never began"};
    in_timing_ = false;
    inputs_due_ = true;
    verdict_.timed = true;
  } else if (const auto* end = std::get_if<JudgeShapeEnd>(&*parsed)) {
    current(end->shape_id, false);
    finish_shape(end->status);
  } else {
    // JudgeInputsPublished: only ever an answer to the judge's request (check()).
    throw Stop{true, "inputs published that the judge did not ask for"};
  }
}


void Judge::call_begin() {
  if (!in_timing_ || bracket_open_) throw Stop{true, "a timed call outside the timed calls"};
  bracket_open_ = true;
  go_splice_ = static_cast<int64_t>(rng_() % static_cast<uint64_t>(kJudgeSpliceLimit));
  bracket_start_ = Clock::now();
  reply(to_json(JudgeCallGo{go_splice_}));
}

void Judge::call_end(const JudgeCallEnd& m, Clock::time_point now) {
  if (!bracket_open_) throw Stop{true, "a timed call ended that never began"};
  // A bracket holds one call, or one graph replay of the batch the child captures
  // (shape_measure.cpp: clamp(min_iterations, 1, 50)); on cpu, where each bracket's work is
  // checked, always one. Any other count is the child's invention (attack round 3: relays that
  // claimed 1000 calls a bracket divided every bracket's bound by 1000 and bent the clock 850x).
  const int batch = std::clamp(task_.timing.min_iterations, 1, 50);
  if (m.calls != 1 && (verdict_.brackets_hold_work || m.calls != batch))
    throw Stop{true, fmt::format("a timed call's done claims {} calls in its bracket (1{} "
                                 "expected)",
                                 m.calls,
                                 verdict_.brackets_hold_work ? "" : fmt::format(" or {}", batch))};
  bracket_open_ = false;
  verdict_.bracket_us.push_back(
      std::chrono::duration<double, std::micro>(now - bracket_start_).count());
  verdict_.bracket_calls.push_back(m.calls);
  brackets_.push_back(Bracket{go_splice_});
  if (verdict_.brackets_hold_work) read_done_outputs();
  last_bracket_checked_ = false;
  recheck_pending_ = choose_recheck(m.calls);
  if (recheck_pending_) inputs_due_ = true;
  reply(to_json(JudgeCallEndReply{recheck_pending_}));
}

// Twice the median round trip of kJudgeStartPings (15) one-byte pings to the runner's echo
// thread (another process, woken as the child is woken by a go and as the judge is woken by a
// done): the two wake-ups a bracket holds, as this host schedules them now. Without the echo
// fds, between this thread and a helper of its own (which a loaded host schedules more kindly:
// same process).
double wake_up_latency_us(int ping_fd, int pong_fd) {
  int ping[2] = {-1, -1}, pong[2] = {-1, -1};
  std::thread echo;
  if (ping_fd < 0 || pong_fd < 0) {
    if (::pipe(ping) != 0) return 0;
    if (::pipe(pong) != 0) {
      close_fd(ping[0]);
      close_fd(ping[1]);
      return 0;
    }
    echo = std::thread([&] {
      char b;
      while (::read(ping[0], &b, 1) == 1) {
        if (::write(pong[1], &b, 1) != 1) break;
      }
    });
    ping_fd = ping[1];
    pong_fd = pong[0];
  }
  std::vector<double> trips;
  for (int k = 0; k < kJudgeStartPings; ++k) {
    char b = 'p';
    const auto t0 = Clock::now();
    if (::write(ping_fd, &b, 1) != 1 || ::read(pong_fd, &b, 1) != 1) break;
    trips.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  if (echo.joinable()) {
    close_fd(ping[1]);  // the helper's read sees EOF
    echo.join();
    close_fd(ping[0]);
    close_fd(pong[0]);
    close_fd(pong[1]);
  }
  if (trips.empty()) return 0;
  std::sort(trips.begin(), trips.end());
  return 2 * trips[trips.size() / 2];
}

int Judge::run() {
  begin_verdict();
  try {
    for (;;) {
      const auto message = read_message();
      if (!message) return 0;
      handle(*message);
      if (verdict_broken_) return 1;
    }
  } catch (const Stop& stop) {
    JudgeVerdict v = verdict_;
    if (index_ < task_.shapes.size()) v.shape_id = task_.shapes[index_].shape_id;
    if (stop.tampering) {
      v.status = EvalStatus::kRejected;
      v.tampering = stop.why;
    } else {
      v.status = EvalStatus::kCrashed;
      v.error = stop.why;
      v.judge_failed = stop.judge_failed;
    }
    write_verdict(v);
    // The child waits for an answer: a failed check, so that it stops the shape.
    reply(judge_stop(stop.why));
    fmt::print(stderr, "{}\n", stop.why);
    if (!stop.tampering) std::_Exit(3);  // the device may be unusable
    return 0;
  }
}

}  // namespace judge_detail

using judge_detail::g_start_latency_us;
using judge_detail::Judge;
using judge_detail::wake_up_latency_us;

void judge_prelude(int argc, char** argv) {
  bool judge = false;
  int ping_fd = -1, pong_fd = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--judge") == 0) judge = true;
    if (i + 1 < argc && std::strcmp(argv[i], "--ping-fd") == 0) ping_fd = std::atoi(argv[i + 1]);
    if (i + 1 < argc && std::strcmp(argv[i], "--pong-fd") == 0) pong_fd = std::atoi(argv[i + 1]);
  }
  if (judge && ping_fd >= 0 && pong_fd >= 0)
    g_start_latency_us = wake_up_latency_us(ping_fd, pong_fd);
}

namespace {

// The device arena for the task's largest shape, offered to the child on `socket` (none where
// the device shares no memory, or cannot allocate it: the memfd copies stay then). The arena holds
// only the child's own buffers: the references stay in the judge's memory.
ChildDevice::SharedMemory offer_device_arena(const ChildTaskRequest& task, ChildDevice& device,
                                             int socket) {
  ChildDevice::SharedMemory arena;
  if (socket < 0) return arena;
  uint64_t bytes = 0;
  const auto* def = problems::find_native_operator(task.operator_name);
  // Host memory (cpu) keeps its memfd arena; brackets that hold the work read the outputs there.
  const bool shares = def && !device.host_memory() && !device.brackets_hold_work();
  for (size_t i = 0; shares && i < task.shapes.size(); ++i) {
    problems::Shape shape;
    shape.id = task.shapes[i].shape_id;
    shape.params = task.shapes[i].params;
    if (auto resolved = problems::resolve_shape(*def, shape))
      bytes = std::max(bytes, device_arena_layout(*resolved).total);
  }
  if (bytes > 0) {
    if (auto made = device.create_shared(bytes)) {
      arena = *made;
    } else if (made.error().code != ErrorCode::kUnavailable) {
      fmt::print(stderr, "judge: no device arena, the checks copy through the host: {}\n",
                 made.error().message);
      (void)device.synchronize();  // clears a recoverable out-of-memory error
    }
  }
  if (auto sent = send_arena_offer(socket, ArenaOffer{arena.bytes, arena.fd}); !sent) {
    fmt::print(stderr, "judge: {}\n", sent.error().message);
    arena = {};
  }
  if (arena.fd >= 0) ::close(arena.fd);
  arena.fd = -1;
  return arena;
}

}  // namespace

int run_judge_task(const ChildTaskRequest& task, ChildDevice& device, int verdict_fd,
                   int check_in_fd, int check_out_fd, int shared_fd, int ping_fd, int pong_fd,
                   int arena_fd) {
  ::signal(SIGPIPE, SIG_IGN);
  // Before the filter: the driver's export of the handle may need what the filter refuses.
  const ChildDevice::SharedMemory arena = offer_device_arena(task, device, arena_fd);
  if (task.seccomp) {
    if (auto s = install_candidate_seccomp(); !s) {
      fmt::print(stderr, "the judge refuses to run: {}\n", s.error().message);
      return 5;
    }
  }
  Judge judge(task, device, verdict_fd, check_in_fd, check_out_fd, shared_fd, ping_fd, pong_fd,
              arena, arena.ptr ? arena_fd : -1);
  if (!arena.ptr && arena_fd >= 0) ::close(arena_fd);
  return judge.run();
}

}  // namespace atrex::runner