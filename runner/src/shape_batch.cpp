#include "shape_batch.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>

#include <fmt/format.h>

#include "atrex/common/process/subprocess.h"

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

// Reads the response lines the child appended since `consumed` (whole lines only: the child
// writes each with one fwrite and a flush).
std::vector<std::string> new_lines(const fs::path& file, size_t& consumed) {
  std::vector<std::string> lines;
  std::ifstream in(file, std::ios::binary);
  if (!in) return lines;
  in.seekg(static_cast<std::streamoff>(consumed));
  const std::string fresh((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t start = 0, nl; (nl = fresh.find('\n', start)) != std::string::npos; start = nl + 1) {
    consumed += nl + 1 - start;
    lines.push_back(fresh.substr(start, nl - start));
  }
  return lines;
}

}  // namespace

Result<void> run_shape_batch(const BatchContext& ctx, const std::vector<BatchItem>& items,
                             const std::function<void(EvalRecord, const problems::Shape&)>& emit,
                             const std::function<std::string()>& abandon) {
  const EvalTask& task = *ctx.task;
  const EvalSettings& st = task.settings;
  std::error_code ec;
  fs::create_directories(ctx.work_dir, ec);
  auto stopping = [&] { return ctx.stop && ctx.stop->load(); };
  auto own_before = [&](size_t end) {
    return std::count_if(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(end),
                         [](const BatchItem& i) { return i.own; });
  };
  size_t next = 0;
  while (next < items.size()) {
    if (const std::string why = abandon(); !why.empty()) {
      for (; next < items.size(); ++next) {
        EvalRecord r = new_eval_record(task, items[next].shape->id, ctx.device_name);
        r.status = EvalStatus::kWrongResult;
        r.error = why;
        emit(std::move(r), *items[next].shape);
      }
      return ok();
    }
    if (stopping()) {
      return make_error(ErrorCode::kUnavailable,
                        fmt::format("stopping: {} of {} shapes of task {} evaluated",
                                    own_before(next), own_before(items.size()), task.task_id));
    }
    ChildTaskRequest req{
        task.operator_name, ctx.library.string(), st.atol, st.rtol, timing_loop(st), {}};
    for (size_t i = next; i < items.size(); ++i) req.shapes.push_back(items[i].request);
    const std::string stem = fmt::format("{}-{}-{}-{:x}", task.operator_name, items[next].shape->id,
                                         ::getpid(), ctx.file_tag);
    const fs::path req_file = ctx.work_dir / (stem + ".request.json");
    const fs::path resp_file = ctx.work_dir / (stem + ".response.jsonl");
    fs::remove(resp_file, ec);
    if (auto w = write_text_file_atomic(req_file, to_json(ChildRequest{req, {}}).dump()); !w) {
      return io_error("runner could not write the evaluation request: " + w.error().message);
    }
    SubprocessOptions opt;
    opt.argv = {(ctx.child_dir / eval_child_name(task.candidate.backend)).string(),
                "--request",
                req_file.string(),
                "--response",
                resp_file.string(),
                "--device",
                std::to_string(ctx.device_index)};
    // The limit is per shape: every response line the child appends restarts it.
    opt.timeout = std::chrono::milliseconds(static_cast<int64_t>(st.shape_timeout_s * 1000));
    opt.output_file = ctx.work_dir / (stem + ".log");
    // Records are emitted as the child appends them (a sweep persists each at once).
    size_t consumed = 0, emitted = 0;
    bool clean = true, crashed_verdict = false;
    const auto launched = std::chrono::steady_clock::now();
    auto last_line_at = launched;
    auto drain = [&] {
      bool any = false;
      for (const std::string& line : new_lines(resp_file, consumed)) {
        if (next + emitted >= items.size()) break;
        const problems::Shape& s = *items[next + emitted].shape;
        EvalRecord r = new_eval_record(task, s.id, ctx.device_name);
        Result<ChildShapeResponse> c = internal_error("unparsed");
        try {
          c = child_shape_response_from_json(Json::parse(line), resp_file.string());
        } catch (const Json::exception& e) {
          c = internal_error(e.what());
        }
        if (c && c->shape_id != s.id) {
          c = internal_error(
              fmt::format("a verdict for shape {} where {} was in hand", c->shape_id, s.id));
        }
        if (!c) {
          // The runner wrote the request and reads its own child's lines: a line it cannot
          // take is a broken child, not a candidate verdict.
          r.status = EvalStatus::kCrashed;
          r.error =
              "the evaluation child wrote a response the runner cannot read: " + c.error().message;
        } else {
          apply_child_response(r, *c);
          // The child's start (context creation, loading) is charged to its first shape.
          if (emitted == 0) {
            r.wall_s += std::max(
                0.0, c->started_at_s -
                         std::chrono::duration<double>(launched.time_since_epoch()).count());
          }
        }
        clean = clean && (r.status == EvalStatus::kOk || r.status == EvalStatus::kWrongResult);
        crashed_verdict = r.status == EvalStatus::kCrashed;
        emit(std::move(r), s);
        ++emitted;
        any = true;
        last_line_at = std::chrono::steady_clock::now();
      }
      return any;
    };
    opt.progress = drain;
    opt.should_stop = stopping;
    auto proc = run_subprocess(opt);
    drain();
    const double since_last =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - last_line_at).count();
    next += emitted;
    // Asked to stop: the child exits after the shape in hand (or dies of the signal if it came
    // before the child set its handler); the rest of the task is given back.
    const bool stopped = stopping() && proc && (proc->ok() || proc->term_signal == opt.stop_signal);
    // A child stops by itself after a failed unseen shape (stop_task_on_failure): the loop's
    // next turn records the rest.
    const bool gave_up = proc && proc->ok() && !abandon().empty();
    if (next < items.size() && !crashed_verdict && !stopped && !gave_up) {
      // The child died or hung on items[next] without writing its result.
      clean = false;
      emit(lost_shape_record(ctx, *items[next].shape, proc, since_last), *items[next].shape);
      ++next;
    }
    fs::remove(req_file, ec);
    fs::remove(resp_file, ec);
    if (clean) fs::remove(opt.output_file, ec);
  }
  return ok();
}

}  // namespace atrex::runner
