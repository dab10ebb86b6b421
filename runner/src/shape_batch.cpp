#include "shape_batch.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "atrex/common/process/cgroup.h"
#include "atrex/common/process/subprocess.h"
#include "atrex/problems/operator.h"
#include "protocol/response_channel.h"
#include "protocol/shared_layout.h"
#include "timing_check.h"

namespace atrex::runner {
namespace fs = std::filesystem;

void apply_child_response(EvalRecord& r, const ChildShapeResponse& c) {
  r.status = c.status;
  r.error = c.error;
  r.max_abs_error = c.max_abs_error;
  r.max_rel_error = c.max_rel_error;
  r.seeds_passed = c.seeds_passed;
  r.wall_s = c.wall_s;
  r.low_signal_outputs = c.low_signal_outputs;
  if (!c.device.empty()) r.device = c.device;
  r.clocks = c.clocks;
  r.phases_s = c.phases_s;
  r.timing = c.timing;
  r.dsl_share = c.dsl_share;
  r.range_probe = c.range_probe;
  r.edge_case = c.edge_case;
  r.unlaunched_kernels = c.unlaunched_kernels;
}

namespace {

// How long a child may take to exit once its last record is in (a CUDA context's teardown takes
// about a second): past it the child is killed and its records kept. A candidate that parks the
// process at exit (kernels/faults/rms_norm_hangs_at_exit.cpp) held the runner's slot for the
// whole shape limit before.
constexpr auto kChildExitGrace = std::chrono::seconds(10);

// The record of the shape a child was working on when it ended without a verdict.
EvalRecord lost_shape_record(const BatchContext& ctx, const problems::Shape& shape,
                             const Result<SubprocessResult>& proc, double since_last_s) {
  EvalRecord r = new_eval_record(*ctx.task, shape.id, ctx.device_name);
  r.wall_s = since_last_s;
  if (!proc) {
    r.status = EvalStatus::kCrashed;
    r.error = "runner could not start the evaluation child: " + proc.error().message;
  } else if (proc->timed_out) {
    r.status = EvalStatus::kTimeout;
    // The child's last output says where it was (a Python candidate's own prints, a JIT's).
    const std::string& out = proc->output_tail;
    const std::string tail = out.size() > 1500 ? out.substr(out.size() - 1500) : out;
    r.error = fmt::format("no result within the {:.0f} s limit of one shape; the child was "
                          "killed{}{}",
                          ctx.task->settings.shape_timeout_s,
                          tail.empty() ? "" : "; its last output: ", tail);
  } else {
    r.status = EvalStatus::kCrashed;
    const std::string& out = proc->output_tail;
    const std::string tail = out.size() > 1500 ? out.substr(out.size() - 1500) : out;
    r.error = fmt::format("the evaluation child died ({}) without a result{}{}", proc->describe(),
                          tail.empty() ? "" : "; output: ", tail);
  }
  return r;
}

// The request on an anonymous file (memfd): no path any other process could open.
Result<int> request_fd(const ChildTaskRequest& req) {
  const int fd = ::memfd_create("atrex-request", MFD_CLOEXEC);
  if (fd < 0) return io_error(fmt::format("memfd_create: {}", std::strerror(errno)));
  const std::string text = to_json(ChildRequest{req, {}}).dump();
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return io_error(fmt::format("writing the request: {}", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  ::lseek(fd, 0, SEEK_SET);
  return fd;
}

// Whatever the pipe holds now (non-blocking).
std::string read_available(int fd) {
  std::string got;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      got.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return got;  // EOF, EAGAIN or an error
  }
}

// The bytes a shape takes in the shared memfd (protocol/shared_layout.h): its published inputs
// and outputs, then the output arena.
uint64_t shared_bytes_of(const std::string& op, const problems::Shape& shape) {
  const auto* def = problems::find_native_operator(op);
  if (!def) return 0;
  auto resolved = problems::resolve_shape(*def, shape);
  if (!resolved) return 0;
  return shared_layout(*resolved).total;
}

void close_all(std::initializer_list<int> fds) {
  for (int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
}

}  // namespace

// The record of a shape from the child's line and the judge's verdict on it (nullptr: none
// came). Returns what makes the task tampering ("" when nothing does). docs/evaluation.md
// "The judge": `ok` needs both; correctness figures are the judge's; the claimed timing is held
// against the judge's brackets (timing_check.h).
std::string judge_record(EvalRecord& r, const ChildShapeResponse& c, const JudgeVerdict* j) {
  if (j && !j->tampering.empty()) return "the judge: " + j->tampering;
  if (j) r.judge_reads = j->device_arena ? JudgeReads::kDeviceArena : JudgeReads::kMemfd;
  if (c.status == EvalStatus::kOk) {
    if (!j) return fmt::format("the child reported shape {} ok without a verdict of the judge",
                               c.shape_id);
    if (j->claimed != c.status)
      return fmt::format("the child told the judge shape {} was {} and the runner {}", c.shape_id,
                         eval_status_name(j->claimed), eval_status_name(c.status));
    if (j->status != EvalStatus::kOk)
      return fmt::format("the child reported shape {} ok; the judge: {}: {}", c.shape_id,
                         eval_status_name(j->status), j->error);
    if (c.input_rotation.rfind("on", 0) == 0 && j->post_timing_sets < 2)
      return fmt::format("the child reported rotated input sets for shape {}; the judge checked "
                         "{} after timing",
                         c.shape_id, j->post_timing_sets);
    if (c.timing) {
      const int bracketed = timed_calls(*j);
      if (c.timing->n != bracketed || static_cast<int>(c.timing->samples_us.size()) != c.timing->n)
        return fmt::format("the child reports {} timed samples of shape {} ({} listed); the "
                           "judge bracketed {} timed calls",
                           c.timing->n, c.shape_id, c.timing->samples_us.size(), bracketed);
    } else if (j->timed) {
      return fmt::format("the child reports no timing of shape {}; the judge saw it timed",
                         c.shape_id);
    }
    r.seeds_passed = j->seeds_passed;
    r.max_abs_error = j->max_abs_error;
    r.max_rel_error = j->max_rel_error;
    r.low_signal_outputs = j->low_signal_outputs;
    r.range_probe = j->range_probe;
    r.edge_case = j->edge_case;
    if (c.timing) {
      const TimingCrossCheck t = cross_check_timing(*c.timing, *j);
      spdlog::debug("shape {}: claimed median {:.4g} us; the judge's shortest bracket {:.4g} us "
                    "per call of {} brackets, latency allowance {:.0f} us (measured {:.0f} us, "
                    "{:.0f} us at the judge's start), bound {:.4g} us",
                    c.shape_id, t.claimed_us, t.shortest_bracket_us, j->bracket_us.size(),
                    t.latency_us, j->bracket_latency_us, j->start_latency_us, t.bound_us);
      if (!t.plausible) {
        r.status = EvalStatus::kRejected;
        r.error = t.why;
      }
    }
    return {};
  }
  if (j && c.status == EvalStatus::kWrongResult && j->status == EvalStatus::kWrongResult) {
    r.error = j->error;
    r.max_abs_error = j->max_abs_error;
    r.max_rel_error = j->max_rel_error;
    r.low_signal_outputs = j->low_signal_outputs;
    r.seeds_passed = j->seeds_passed;
  } else if (j && j->status == EvalStatus::kCrashed) {
    // The judge failed on its own device (it answered the child's check with that failure).
    r.status = EvalStatus::kCrashed;
    r.error = j->error;
  } else if (c.status == EvalStatus::kWrongResult || c.status == EvalStatus::kCrashed) {
    // A verdict of the child's own (the candidate returned an error, the kernel sets differ, a
    // device error): no better for the candidate than the judge's, so it stands; the figures
    // the child no longer computes are the judge's.
    if (j) r.seeds_passed = j->seeds_passed;
  }
  return {};
}

Result<void> run_shape_batch(const BatchContext& ctx, const std::vector<BatchItem>& items,
                             const std::function<void(EvalRecord, const problems::Shape&)>& emit,
                             const std::function<std::string()>& abandon) {
  const EvalTask& task = *ctx.task;
  const EvalSettings& st = task.settings;
  const bool sandboxed = ctx.sandbox.mode == SandboxMode::kBwrap;
  std::error_code ec;
  fs::create_directories(ctx.work_dir, ec);
  auto stopping = [&] { return ctx.stop && ctx.stop->load(); };
  auto own_before = [&](size_t end) {
    return std::count_if(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(end),
                         [](const BatchItem& i) { return i.own; });
  };
  // The own shapes' records wait for the end of the batch: a tampered channel found in a later
  // child still decides the whole task. Unseen shapes' records go out at once (absorbed by the
  // evaluator's UnseenCheck, whose verdict `abandon` reports).
  std::vector<std::pair<EvalRecord, const problems::Shape*>> held;
  std::string tampering;
  auto hold = [&](EvalRecord r, const BatchItem& item) {
    if (item.own) {
      held.emplace_back(std::move(r), item.shape);
    } else {
      emit(std::move(r), *item.shape);
    }
  };
  auto flush = [&] {
    if (!tampering.empty()) {
      for (const BatchItem& item : items) {
        if (!item.own) continue;
        EvalRecord r = new_eval_record(task, item.shape->id, ctx.device_name);
        r.status = EvalStatus::kRejected;
        r.error = "tampering: " + tampering;
        emit(std::move(r), *item.shape);
      }
      return;
    }
    for (auto& [r, shape] : held) emit(std::move(r), *shape);
    held.clear();
  };
  const ResourceLimits limits(eval_child_limits(task.candidate.backend, ctx.sandbox));
  size_t next = 0;
  while (next < items.size() && tampering.empty()) {
    if (const std::string why = abandon(); !why.empty()) {
      for (; next < items.size(); ++next) {
        EvalRecord r = new_eval_record(task, items[next].shape->id, ctx.device_name);
        r.status = EvalStatus::kWrongResult;
        r.error = why;
        hold(std::move(r), items[next]);
      }
      break;
    }
    if (stopping()) {
      flush();
      return make_error(ErrorCode::kUnavailable,
                        fmt::format("stopping: {} of {} shapes of task {} evaluated",
                                    own_before(next), own_before(items.size()), task.task_id));
    }
    ChildTaskRequest req{
        task.operator_name, ctx.library.string(), st.atol, st.rtol, timing_loop(st), {}, {}, true};
    req.nonce = make_nonce();
    req.seccomp = sandboxed;
    std::vector<std::string> ids;
    uint64_t shared_bytes = 0;
    for (size_t i = next; i < items.size(); ++i) {
      req.shapes.push_back(items[i].request);
      ids.push_back(items[i].request.shape_id);
      shared_bytes = std::max(shared_bytes, shared_bytes_of(task.operator_name, *items[i].shape));
    }
    // The judge's request: the same shapes and seeds, a nonce of its own (the child never sees
    // it), no candidate.
    ChildTaskRequest judge_req = req;
    judge_req.nonce = make_nonce();
    judge_req.library.clear();
    const std::string stem = fmt::format("{}-{}-{}-{:x}", task.operator_name, items[next].shape->id,
                                         ::getpid(), ctx.file_tag);
    auto req_fd = request_fd(req);
    if (!req_fd)
      return io_error("runner could not pass the evaluation request: " + req_fd.error().message);
    auto judge_req_fd = request_fd(judge_req);
    if (!judge_req_fd) {
      ::close(*req_fd);
      return io_error("runner could not pass the judge's request: " + judge_req_fd.error().message);
    }
    // The result pipe (child -> runner), the stop pipe (runner -> child), the judge's pipes
    // (child -> judge, judge -> child, judge -> runner) and the memfd the child publishes its
    // buffers in, sized here (the child's RLIMIT_FSIZE would stop it growing the file).
    int pipe_fds[2] = {-1, -1}, stop_fds[2] = {-1, -1}, to_judge[2] = {-1, -1},
        from_judge[2] = {-1, -1}, verdict_fds[2] = {-1, -1};
    const int shared = ::memfd_create("atrex-shared", MFD_CLOEXEC);
    const int shared_child = shared >= 0 ? ::fcntl(shared, F_DUPFD_CLOEXEC, 3) : -1;
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0 || ::pipe2(stop_fds, O_CLOEXEC) != 0 ||
        ::pipe2(to_judge, O_CLOEXEC) != 0 || ::pipe2(from_judge, O_CLOEXEC) != 0 ||
        ::pipe2(verdict_fds, O_CLOEXEC) != 0 || shared < 0 || shared_child < 0 ||
        ::ftruncate(shared, static_cast<off_t>(shared_bytes)) != 0) {
      const std::string why = std::strerror(errno);
      close_all({*req_fd, *judge_req_fd, pipe_fds[0], pipe_fds[1], stop_fds[0], stop_fds[1],
                 to_judge[0], to_judge[1], from_judge[0], from_judge[1], verdict_fds[0],
                 verdict_fds[1], shared, shared_child});
      return io_error("runner could not set up the evaluation child's channels: " + why);
    }
    ::fcntl(pipe_fds[0], F_SETFL, O_NONBLOCK);
    ::fcntl(verdict_fds[0], F_SETFL, O_NONBLOCK);
    // The judge's latency probe: each byte it writes comes back from this process's echo
    // thread (timing_check.h); the thread ends when the judge's end closes.
    // And the socket pair the judge offers its device arena on (protocol/arena_handoff.h).
    int ping[2] = {-1, -1}, pong[2] = {-1, -1}, arena[2] = {-1, -1};
    if (::pipe2(ping, O_CLOEXEC) != 0 || ::pipe2(pong, O_CLOEXEC) != 0 ||
        ::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, arena) != 0) {
      const std::string why = std::strerror(errno);
      close_all({*req_fd, *judge_req_fd, pipe_fds[0], pipe_fds[1], stop_fds[0], stop_fds[1],
                 to_judge[0], to_judge[1], from_judge[0], from_judge[1], verdict_fds[0],
                 verdict_fds[1], shared, shared_child, ping[0], ping[1], pong[0], pong[1],
                 arena[0], arena[1]});
      return io_error("runner could not set up the judge's latency probe: " + why);
    }
    std::atomic<bool> echo_stop{false};
    std::atomic<int> echoed{0};
    std::thread echo([rd = ping[0], wr = pong[1], &echo_stop, &echoed] {
      while (!echo_stop.load()) {
        pollfd p{rd, POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) continue;
        char b;
        if (::read(rd, &b, 1) != 1 || ::write(wr, &b, 1) != 1) break;
        echoed.fetch_add(1);
      }
      ::close(rd);
      ::close(wr);
    });
    // The working folder: the sandbox's own tmpfs, else a folder of this child's, removed after.
    const fs::path scratch = sandboxed ? fs::path("/tmp") : ctx.work_dir / (stem + ".scratch");
    const fs::path judge_scratch =
        sandboxed ? fs::path("/tmp") : ctx.work_dir / (stem + ".judge-scratch");
    if (!sandboxed) {
      fs::create_directories(scratch, ec);
      fs::create_directories(judge_scratch, ec);
    }
    const fs::path child = ctx.child_dir / eval_child_name(task.candidate.backend);
    std::vector<std::string> argv = {child.string(),  "--request-fd",   "3",
                                     "--response-fd", "4",              "--stop-fd",
                                     "5",             "--judge-out-fd", "6",
                                     "--judge-in-fd", "7",              "--shared-fd",
                                     "8",             "--device",       std::to_string(ctx.device_index)};
    std::vector<std::string> judge_argv = {child.string(),    "--judge",         "--request-fd",
                                           "3",               "--response-fd",   "4",
                                           "--check-in-fd",   "5",               "--check-out-fd",
                                           "6",               "--shared-fd",     "7",
                                           "--ping-fd",       "8",               "--pong-fd",
                                           "9",               "--device",
                                           std::to_string(ctx.device_index)};
    // The judge's device arena (docs/evaluation.md "The judge's device arena"): on by default;
    // ATREX_DEVICE_ARENA=0 keeps the memfd copies (the comparison run of arenaBench/checkCost).
    const char* arena_env = std::getenv("ATREX_DEVICE_ARENA");
    const bool device_arena = !(arena_env && std::string(arena_env) == "0");
    if (device_arena) {
      argv.insert(argv.end(), {"--arena-fd", "9"});
      judge_argv.insert(judge_argv.end(), {"--arena-fd", "10"});
    } else {
      close_all({arena[0], arena[1]});
    }
    // The judge: the same binary in a sandbox of its own, without the candidate's library.
    SubprocessOptions jopt;
    jopt.argv = sandboxed ? bwrap_argv(ctx.sandbox.bwrap,
                                       eval_sandbox_view(task.candidate.backend, child, {}),
                                       judge_argv)
                          : judge_argv;
    jopt.env = clean_child_environment(judge_scratch);
    if (!sandboxed) jopt.working_dir = judge_scratch;
    jopt.inherit_fds = {{*judge_req_fd, 3},
                        {verdict_fds[1], 4},
                        {to_judge[0], 5},
                        {from_judge[1], 6},
                        {shared, 7},
                        {ping[1], 8},
                        {pong[0], 9}};
    if (device_arena) jopt.inherit_fds.emplace_back(arena[0], 10);
    jopt.policies = {&limits};
    jopt.stop_signal = 0;
    // It ends by itself when the child's pipe closes; this bounds a judge that does not.
    jopt.timeout = std::chrono::milliseconds(
        static_cast<int64_t>(st.shape_timeout_s * 1000 * static_cast<double>(ids.size() + 1)));
    jopt.output_file = ctx.work_dir / (stem + ".judge.log");
    JudgeChannel judge_channel(judge_req.nonce, ids);
    std::vector<JudgeVerdict> verdicts;
    std::atomic<bool> child_done{false};
    std::atomic<int64_t> child_done_at_ms{0};
    auto judge_drain = [&] {
      for (JudgeVerdict& v : judge_channel.feed(read_available(verdict_fds[0])))
        verdicts.push_back(std::move(v));
      return false;
    };
    jopt.progress = judge_drain;
    jopt.should_abort = [&] {
      if (!child_done.load()) return false;
      const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count();
      return now_ms - child_done_at_ms.load() > 30'000;
    };
    Result<SubprocessResult> judge_proc = make_error(ErrorCode::kInternal, "the judge never ran");
    std::atomic<bool> judge_ended{false};
    std::thread judge_thread([&] {
      judge_proc = run_subprocess(jopt);
      judge_ended.store(true);
    });
    // The judge's start probe (judge_prelude) runs before any candidate code can load this
    // host: the child is spawned once its pings came back (attack round 3: spinning threads
    // started at timing_begin had widened the allowance measured then).
    for (const auto wait_from = std::chrono::steady_clock::now();
         echoed.load() < kJudgeStartPings && !judge_ended.load() &&
         std::chrono::steady_clock::now() - wait_from <
             std::chrono::milliseconds(kJudgeStartWaitMs);)
      std::this_thread::sleep_for(std::chrono::microseconds(200));

    SubprocessOptions opt;
    opt.argv = sandboxed ? bwrap_argv(ctx.sandbox.bwrap,
                                      eval_sandbox_view(task.candidate.backend, child, ctx.library),
                                      argv)
                         : argv;
    opt.env = clean_child_environment(scratch);
    if (!sandboxed) opt.working_dir = scratch;
    // Closed here once the child is forked.
    opt.inherit_fds = {{*req_fd, 3},       {pipe_fds[1], 4},   {stop_fds[0], 5},
                       {to_judge[1], 6},   {from_judge[0], 7}, {shared_child, 8}};
    if (device_arena) opt.inherit_fds.emplace_back(arena[1], 9);
    // A cgroup of its own where the host gives one (memory with memfd and shm pages, tasks):
    // entered between fork and exec, removed when this turn of the loop ends.
    static std::atomic<uint64_t> cgroup_serial{0};
    const auto cgroup = ChildCgroup::create(
        fmt::format("atrex-{}-{}", ::getpid(), cgroup_serial.fetch_add(1)),
        eval_child_cgroup_limits(task.candidate.backend, ctx.sandbox));
    {
      static std::once_flag said;
      std::call_once(said, [&] { spdlog::info("evaluation children's cgroup: {}", cgroup->describe()); });
    }
    opt.policies = {&limits, cgroup.get()};
    // The limit is per shape: every verdict restarts it.
    opt.timeout = std::chrono::milliseconds(static_cast<int64_t>(st.shape_timeout_s * 1000));
    opt.output_file = ctx.work_dir / (stem + ".log");
    ResponseChannel channel(req.nonce, ids);
    std::vector<ChildShapeResponse> lines;
    const auto launched = std::chrono::steady_clock::now();
    auto last_line_at = launched;
    auto drain = [&] {
      bool any = false;
      for (ChildShapeResponse& c : channel.feed(read_available(pipe_fds[0]))) {
        lines.push_back(std::move(c));
        any = true;
        last_line_at = std::chrono::steady_clock::now();
      }
      return any;
    };
    opt.progress = drain;
    opt.should_stop = [&] {
      if (!stopping()) return false;
      (void)!::write(stop_fds[1], "s", 1);
      return true;
    };
    if (sandboxed) opt.stop_signal = 0;
    bool lingered = false;
    opt.should_abort = [&] {
      if (channel.tampered()) return true;
      lingered = channel.accepted() == ids.size() &&
                 std::chrono::steady_clock::now() - last_line_at > kChildExitGrace;
      return lingered;
    };
    auto proc = run_subprocess(opt);
    if (lingered) {
      spdlog::warn("task {} ({}): the evaluation child was still running {} s after its last "
                   "record; killed, its records kept",
                   task.task_id, task.operator_name, kChildExitGrace.count());
    }
    if (proc && sandboxed) translate_bwrap_exit(*proc);
    if (proc && cgroup->oom_killed()) {
      proc->output_tail += fmt::format("\n[atrex] the child's cgroup memory limit ({} MiB) was "
                                       "reached: the kernel killed a process of it",
                                       eval_child_cgroup_limits(task.candidate.backend,
                                                                ctx.sandbox).memory_bytes >> 20);
    }
    child_done_at_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now().time_since_epoch())
                           .count();
    child_done = true;
    // Every process of the child is gone (its group, or its PID namespace, was killed): what
    // the pipe still holds is the last of what they wrote. The judge sees its pipe close and
    // ends.
    drain();
    channel.finish();
    judge_thread.join();
    echo_stop = true;
    echo.join();
    if (judge_proc && sandboxed) translate_bwrap_exit(*judge_proc);
    judge_drain();
    judge_channel.finish();
    close_all({pipe_fds[0], stop_fds[1], verdict_fds[0]});
    if (!sandboxed) {
      fs::remove_all(scratch, ec);
      fs::remove_all(judge_scratch, ec);
    }
    if (!channel.tampered() && judge_channel.broken())
      tampering = "the judge's channel: " + judge_channel.why();
    // The judge failed on its own (its device's memory, taken by other evaluations on the card;
    // its mapping): the runner's failure, not the candidate's. The shapes before it are
    // recorded; the task is given back below (the runner loop releases its lease, the queue
    // delivers it again, max_deliveries in all), so no shape is charged `crashed` for it.
    const auto judge_failed = std::find_if(verdicts.begin(), verdicts.end(),
                                           [](const JudgeVerdict& v) { return v.judge_failed; });
    // The child's lines with the judge's verdicts, in order.
    size_t emitted = 0;
    bool clean = true, crashed_verdict = false;
    for (const ChildShapeResponse& c : lines) {
      if (channel.tampered() || !tampering.empty()) break;
      const BatchItem& item = items[next + emitted];
      EvalRecord r = new_eval_record(task, item.shape->id, ctx.device_name);
      apply_child_response(r, c);
      const JudgeVerdict* j = emitted < verdicts.size() ? &verdicts[emitted] : nullptr;
      if (j && j->judge_failed) break;  // == judge_failed: the task is given back below
      if (std::string why = judge_record(r, c, j); !why.empty()) {
        tampering = why;
        break;
      }
      // The child's start (sandbox, context creation, loading) is charged to its first shape.
      if (emitted == 0) {
        r.wall_s +=
            std::max(0.0, c.started_at_s -
                              std::chrono::duration<double>(launched.time_since_epoch()).count());
      }
      // The child lost its judge: say what became of it.
      if (r.status == EvalStatus::kCrashed && r.error.rfind("judge: ", 0) == 0) {
        if (!judge_proc) {
          r.error += "; the judge could not start: " + judge_proc.error().message;
        } else if (!judge_proc->ok()) {
          const std::string& out = judge_proc->output_tail;
          r.error += fmt::format("; the judge {}{}{}", judge_proc->describe(),
                                 out.empty() ? "" : ": ",
                                 out.size() > 800 ? out.substr(out.size() - 800) : out);
        }
      }
      clean = clean && (r.status == EvalStatus::kOk || r.status == EvalStatus::kWrongResult);
      crashed_verdict = r.status == EvalStatus::kCrashed;
      hold(std::move(r), item);
      ++emitted;
    }
    // A judge's tampering verdict past the child's lines (a message it could not take).
    for (const JudgeVerdict& v : verdicts) {
      if (tampering.empty() && !v.tampering.empty()) tampering = "the judge: " + v.tampering;
    }
    if (!clean || !judge_proc || !judge_proc->ok()) {
      // Kept for the record's reader; removed with the work folder.
    } else {
      fs::remove(jopt.output_file, ec);
    }
    if (channel.tampered()) tampering = channel.why();
    if (!tampering.empty()) break;
    if (judge_failed != verdicts.end()) {
      flush();
      return make_error(ErrorCode::kUnavailable,
                        fmt::format("the judge failed on its own at shape {} of task {} ({} of "
                                    "{} shapes evaluated; the runner's failure, not the "
                                    "candidate's: the task is given back): {}",
                                    judge_failed->shape_id, task.task_id,
                                    own_before(next + emitted), own_before(items.size()),
                                    judge_failed->error));
    }
    const double since_last =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - last_line_at).count();
    next += emitted;
    // Asked to stop: the child exits after the shape in hand (or dies of the signal if it came
    // before the child set its handler; in the sandbox, bwrap dies of it and takes the child
    // along); the rest of the task is given back.
    const bool stopped =
        stopping() && proc &&
        (proc->ok() || (opt.stop_signal != 0 && proc->term_signal == opt.stop_signal));
    // A child stops by itself after a failed unseen shape (stop_task_on_failure): the loop's
    // next turn records the rest.
    const bool gave_up = proc && proc->ok() && !abandon().empty();
    if (next < items.size() && !crashed_verdict && !stopped && !gave_up) {
      // The child died or hung on items[next] without writing its result.
      clean = false;
      hold(lost_shape_record(ctx, *items[next].shape, proc, since_last), items[next]);
      ++next;
    }
    if (clean) fs::remove(opt.output_file, ec);
  }
  flush();
  return ok();
}

}  // namespace atrex::runner
