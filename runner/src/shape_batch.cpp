#include "shape_batch.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "atrex/common/process/subprocess.h"
#include "protocol/response_channel.h"

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
  r.unlaunched_kernels = c.unlaunched_kernels;
}

namespace {

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
    r.error = fmt::format("no result within the {:.0f} s limit of one shape; the child was killed",
                          ctx.task->settings.shape_timeout_s);
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

}  // namespace

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
    for (size_t i = next; i < items.size(); ++i) {
      req.shapes.push_back(items[i].request);
      ids.push_back(items[i].request.shape_id);
    }
    const std::string stem = fmt::format("{}-{}-{}-{:x}", task.operator_name, items[next].shape->id,
                                         ::getpid(), ctx.file_tag);
    auto req_fd = request_fd(req);
    if (!req_fd)
      return io_error("runner could not pass the evaluation request: " + req_fd.error().message);
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
      ::close(*req_fd);
      return io_error(fmt::format("pipe: {}", std::strerror(errno)));
    }
    ::fcntl(pipe_fds[0], F_SETFL, O_NONBLOCK);
    // A stop request: a byte on this pipe (the child checks it between shapes). In the sandbox
    // SIGUSR1 would reach bwrap, which dies of it; without, the signal is sent as well.
    int stop_fds[2];
    if (::pipe2(stop_fds, O_CLOEXEC) != 0) {
      ::close(*req_fd);
      ::close(pipe_fds[0]);
      ::close(pipe_fds[1]);
      return io_error(fmt::format("pipe: {}", std::strerror(errno)));
    }
    // The working folder: the sandbox's own tmpfs, else a folder of this child's, removed after.
    const fs::path scratch = sandboxed ? fs::path("/tmp") : ctx.work_dir / (stem + ".scratch");
    if (!sandboxed) fs::create_directories(scratch, ec);
    const fs::path child = ctx.child_dir / eval_child_name(task.candidate.backend);
    std::vector<std::string> argv = {child.string(),
                                     "--request-fd",
                                     "3",
                                     "--response-fd",
                                     "4",
                                     "--stop-fd",
                                     "5",
                                     "--device",
                                     std::to_string(ctx.device_index)};
    SubprocessOptions opt;
    opt.argv =
        sandboxed ? bwrap_argv(
                        ctx.sandbox.bwrap,
                        eval_sandbox_view(task.candidate.backend, ctx.child_dir, ctx.library), argv)
                  : argv;
    opt.env = clean_child_environment(scratch);
    if (!sandboxed) opt.working_dir = scratch;
    // Closed here once the child is forked.
    opt.inherit_fds = {{*req_fd, 3}, {pipe_fds[1], 4}, {stop_fds[0], 5}};
    opt.policies = {&limits};
    // The limit is per shape: every verdict restarts it.
    opt.timeout = std::chrono::milliseconds(static_cast<int64_t>(st.shape_timeout_s * 1000));
    opt.output_file = ctx.work_dir / (stem + ".log");
    ResponseChannel channel(req.nonce, ids);
    size_t emitted = 0;
    bool clean = true, crashed_verdict = false;
    const auto launched = std::chrono::steady_clock::now();
    auto last_line_at = launched;
    auto drain = [&] {
      bool any = false;
      for (const ChildShapeResponse& c : channel.feed(read_available(pipe_fds[0]))) {
        const BatchItem& item = items[next + emitted];
        EvalRecord r = new_eval_record(task, item.shape->id, ctx.device_name);
        apply_child_response(r, c);
        // The child's start (sandbox, context creation, loading) is charged to its first shape.
        if (emitted == 0) {
          r.wall_s +=
              std::max(0.0, c.started_at_s -
                                std::chrono::duration<double>(launched.time_since_epoch()).count());
        }
        clean = clean && (r.status == EvalStatus::kOk || r.status == EvalStatus::kWrongResult);
        crashed_verdict = r.status == EvalStatus::kCrashed;
        hold(std::move(r), item);
        ++emitted;
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
    opt.should_abort = [&] { return channel.tampered(); };
    auto proc = run_subprocess(opt);
    if (proc && sandboxed) translate_bwrap_exit(*proc);
    // Every process of the child is gone (its group, or its PID namespace, was killed): what
    // the pipe still holds is the last of what they wrote.
    drain();
    channel.finish();
    ::close(pipe_fds[0]);
    ::close(stop_fds[1]);
    if (!sandboxed) fs::remove_all(scratch, ec);
    if (channel.tampered()) {
      tampering = channel.why();
      break;
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
