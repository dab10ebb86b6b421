#include "atrex/runner/evaluator.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "atrex/common/clock.h"
#include "atrex/common/hash.h"
#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"
#include "atrex/problems/unseen.h"
#include "atrex/runner/subprocess.h"
#include "atrex/scoring/roofline.h"
#include "unseen_check.h"

namespace atrex::runner {
namespace fs = std::filesystem;

std::string GpuInfo::cuda_arch() const {
  if (cc_major == 9 && cc_minor == 0) return "sm_90a";
  return fmt::format("sm_{}{}", cc_major, cc_minor);
}

fs::path default_child_dir() {
  if (const char* e = std::getenv("ATREX_CHILD_DIR"); e && *e) return e;
  return problems::executable_dir();
}

const Environment& probe_environment() {
  static const Environment env = [] {
    Environment e;
    std::ifstream cpuinfo("/proc/cpuinfo");
    for (std::string line; std::getline(cpuinfo, line);) {
      if (line.rfind("model name", 0) == 0) {
        e.cpu_name = line.substr(line.find(':') + 2);
        break;
      }
    }
    const fs::path child = default_child_dir() / "atrex-eval-cuda";
    std::error_code ec;
    e.cuda_child_built = fs::exists(child, ec);
    if (!e.cuda_child_built) {
      e.gpu_probe_error = "atrex was built without the CUDA backend";
      return e;
    }
    SubprocessOptions opt;
    opt.argv = {child.string(), "--probe"};
    opt.timeout = std::chrono::seconds(60);
    auto r = run_subprocess(opt);
    if (!r || !r->ok()) {
      e.gpu_probe_error = r ? r->describe() + ": " + r->output_tail : r.error().message;
      return e;
    }
    try {
      Json j = Json::parse(r->output_tail.substr(r->output_tail.find('{')));
      for (const auto& d : j["devices"]) {
        e.gpus.push_back(GpuInfo{d["index"], d["name"], d["cc_major"], d["cc_minor"], d["sm_count"],
                                 d["l2_bytes"], d["memory_bytes"]});
      }
      if (e.gpus.empty()) e.gpu_probe_error = j.value("error", "no CUDA device found");
    } catch (const std::exception& ex) {
      e.gpu_probe_error = std::string("unreadable device probe output: ") + ex.what();
    }
    return e;
  }();
  return env;
}

Evaluator::Evaluator(EvaluatorOptions options)
    : options_(std::move(options)), cache_(options_.cache_dir, options_.include_dir) {
  seed_base_ = options_.seed ? *options_.seed
                             : std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  if (options_.work_dir.empty())
    options_.work_dir = fs::temp_directory_path() / fmt::format("atrex-eval-{}", ::getpid());
}

Result<problems::RooflineCounts> roofline_counts(const problems::Suite& suite,
                                                 const std::string& op,
                                                 const problems::Shape& shape,
                                                 const std::string& source) {
  if (source != "analytic") return suite.roofline(op, shape.id);
  ATREX_ASSIGN_OR_RETURN(const problems::OperatorDef* def, problems::require_native_operator(op));
  if (!def->analytic)
    return not_found(fmt::format("operator {} has no analytic roofline formula", op));
  ATREX_ASSIGN_OR_RETURN(problems::ResolvedShape resolved, problems::resolve_shape(*def, shape));
  return def->analytic(resolved);
}

void Evaluator::finish_record(EvalRecord& r, const EvalSettings& settings,
                              const problems::Shape& shape) {
  r.hardware = options_.hardware.name;
  r.runner = options_.runner;
  r.created_at = utc_timestamp_now();
  if (!options_.suite) return;
  auto counts = roofline_counts(*options_.suite, r.operator_name, shape, settings.roofline);
  if (!counts) {
    spdlog::warn("roofline for {} shape {}: {}", r.operator_name, shape.id, counts.error().message);
    return;
  }
  auto t = scoring::roofline_time(*counts, options_.hardware);
  if (!t) {
    spdlog::warn("roofline for {} shape {}: {}", r.operator_name, shape.id, t.error().message);
    return;
  }
  r.t_roofline_us = t->roofline_s * 1e6;
  if (r.status == EvalStatus::kOk && r.timing && r.timing->n > 0) {
    auto s = scoring::score_shape(r.t_roofline_us, r.timing->time_us_median);
    r.s_j = s.s_j;
    r.above_roofline = s.above_roofline;
  }
}

Evaluator::Target Evaluator::resolve_target(const std::string& backend) const {
  const Environment& env = probe_environment();
  Target t{env.cpu_name, "native", ""};
  if (backend == "cuda") {
    if (!env.cuda_child_built)
      t.reject = "this runner was built without the CUDA backend";
    else if (!env.has_gpu())
      t.reject = "no CUDA GPU on this runner: " + env.gpu_probe_error;
    else if (options_.device_index >= static_cast<int>(env.gpus.size()))
      t.reject = fmt::format("no GPU {}", options_.device_index);
    else {
      t.device_name = env.gpus[options_.device_index].name;
      t.arch = env.gpus[options_.device_index].cuda_arch();
    }
  } else if (backend == "hip") {
    const HipEnvironment& hip = probe_hip_environment();
    if (hip.gpus.empty()) {
      t.reject = hip.probe_error;
      t.device_name = "no AMD GPU";
    } else if (options_.device_index >= static_cast<int>(hip.gpus.size())) {
      t.reject = fmt::format("no AMD GPU {}", options_.device_index);
    } else {
      t.device_name = hip.gpus[options_.device_index].name;
      t.arch = hip.gpus[options_.device_index].arch;
    }
  } else if (backend != "cpu") {
    t.reject = fmt::format("backend \"{}\" cannot run on this runner (available: cpu{})", backend,
                           env.has_gpu() ? ", cuda" : "");
  }
  return t;
}

Result<bool> Evaluator::precompile(const EvalTask& task) {
  const Target target = resolve_target(task.candidate.backend);
  if (!target.reject.empty()) return false;  // evaluate() records why
  ATREX_ASSIGN_OR_RETURN(CompileOutcome compiled, cache_.compile(task.candidate, target.arch,
                                                                 task.settings.compile_timeout_s));
  if (options_.on_compile) options_.on_compile(compiled.cache_hit);
  return !compiled.cache_hit;
}

Result<std::vector<EvalRecord>> Evaluator::evaluate(
    const EvalTask& task, const std::function<void(const EvalRecord&)>& on_record) {
  ATREX_ASSIGN_OR_RETURN(const problems::OperatorDef* def,
                         problems::require_native_operator(task.operator_name));
  if (!options_.suite) return internal_error("Evaluator needs a suite");
  ATREX_ASSIGN_OR_RETURN(const problems::OperatorInfo* info,
                         options_.suite->require(task.operator_name));
  std::vector<const problems::Shape*> shapes;
  for (const auto& id : task.shape_ids) {
    const problems::Shape* s = info->find_shape(id);
    if (!s)
      return not_found(fmt::format("operator {} has no shape \"{}\"", task.operator_name, id));
    shapes.push_back(s);
  }
  const Target target = resolve_target(task.candidate.backend);
  const std::string& device_name = target.device_name;
  const std::string& reject = target.reject;
  const std::string& arch = target.arch;
  auto base_record = [&](const problems::Shape& s) {
    return new_eval_record(task, s.id, device_name);
  };
  std::vector<EvalRecord> out;
  auto emit = [&](EvalRecord r, const problems::Shape& s) {
    finish_record(r, task.settings, s);
    if (on_record) on_record(r);
    out.push_back(std::move(r));
  };
  if (!reject.empty()) {
    for (const auto* s : shapes) {
      EvalRecord r = base_record(*s);
      r.status = EvalStatus::kRejected;
      r.error = reject;
      emit(std::move(r), *s);
    }
    return out;
  }
  ATREX_ASSIGN_OR_RETURN(CompileOutcome compiled,
                         cache_.compile(task.candidate, arch, task.settings.compile_timeout_s));
  if (options_.on_compile) options_.on_compile(compiled.cache_hit);
  spdlog::debug("compile {} ({}): {} in {:.2f} s{}", task.candidate.sha256.substr(0, 12),
                task.candidate.backend, compiled.ok ? "ok" : "failed", compiled.wall_s,
                compiled.cache_hit ? " (cache hit)" : "");
  if (!compiled.ok) {
    for (const auto* s : shapes) {
      EvalRecord r = base_record(*s);
      r.status = EvalStatus::kCompileError;
      r.error =
          compiled.log.size() > 4000 ? compiled.log.substr(0, 4000) + "\n[...]" : compiled.log;
      emit(std::move(r), *s);
    }
    return out;
  }
  // Unseen shapes first (correctness only), then the task's own: a failure on an unseen shape
  // ends the task with every own shape wrong_result (unseen_check.h).
  UnseenCheck unseen;
  if (task.settings.unseen_shapes > 0) {
    const uint64_t seed =
        num::mix64(seed_base_ ^ std::hash<std::string>{}(task.task_id + "/unseen"));
    ATREX_ASSIGN_OR_RETURN(
        auto derived,
        problems::derive_unseen_shapes(*def, *info, shapes, task.settings.unseen_shapes, seed));
    unseen = UnseenCheck(std::move(derived));
  }
  std::vector<ShapeItem> items;
  for (const auto& u : unseen.shapes()) {
    items.push_back(
        ShapeItem{&u.shape, UnseenCheck::item_fields(shape_seed(task, u.shape.id, 0)), false});
  }
  for (const auto* s : shapes) items.push_back(ShapeItem{s});
  auto checked_emit = [&](EvalRecord r, const problems::Shape& s) {
    if (unseen.absorb(r)) return;
    unseen.decorate(r);
    emit(std::move(r), s);
  };
  ATREX_TRY(run_shapes(task, items, compiled.library, device_name, checked_emit,
                       [&] { return unseen.failure(); }));
  return out;
}

uint64_t Evaluator::shape_seed(const EvalTask& task, const std::string& shape_id, int k) const {
  const uint64_t base =
      num::mix64(seed_base_ ^ std::hash<std::string>{}(task.task_id + "/" + shape_id));
  return num::mix64(base + static_cast<uint64_t>(k));
}

namespace {

void apply_child_response(EvalRecord& r, const Json& j) {
  auto status = parse_eval_status(j.value("status", "crashed"));
  r.status = status ? *status : EvalStatus::kCrashed;
  r.error = j.value("error", "");
  r.max_abs_error = j.value("max_abs_error", 0.0);
  r.max_rel_error = j.value("max_rel_error", 0.0);
  r.seeds_passed = j.value("seeds_passed", 0);
  r.wall_s = j.value("wall_s", 0.0);
  if (j.contains("low_signal_outputs"))
    r.low_signal_outputs = j["low_signal_outputs"].get<std::vector<std::string>>();
  if (j.contains("device")) r.device = j["device"].get<std::string>();
  if (j.contains("clocks")) r.clocks = j["clocks"];
  if (j.contains("phases_s") && j["phases_s"].is_object()) r.phases_s = j["phases_s"];
  if (j.contains("timing") && j["timing"].is_object())
    r.timing = timing_summary_from_json(j["timing"]);
  if (j.contains("dsl_share") && j["dsl_share"].is_number())
    r.dsl_share = j["dsl_share"].get<double>();
  r.range_probe = j.value("range_probe", "");
  if (j.contains("unlaunched_kernels") && j["unlaunched_kernels"].is_array()) {
    r.unlaunched_kernels = j["unlaunched_kernels"].get<std::vector<std::string>>();
  }
}

}  // namespace

Result<void> Evaluator::run_shapes(
    const EvalTask& task, const std::vector<ShapeItem>& shape_items, const fs::path& library,
    const std::string& device_name,
    const std::function<void(EvalRecord, const problems::Shape&)>& emit,
    const std::function<std::string()>& abandon) {
  const auto& st = task.settings;
  std::error_code ec;
  fs::create_directories(options_.work_dir, ec);
  auto stopping = [&] { return options_.stop && options_.stop->load(); };
  std::vector<const problems::Shape*> shapes;
  for (const auto& item : shape_items) shapes.push_back(item.shape);
  size_t next = 0;
  while (next < shapes.size()) {
    if (const std::string why = abandon(); !why.empty()) {
      for (; next < shapes.size(); ++next) {
        EvalRecord r = new_eval_record(task, shapes[next]->id, device_name);
        r.status = EvalStatus::kWrongResult;
        r.error = why;
        emit(std::move(r), *shapes[next]);
      }
      return ok();
    }
    if (stopping()) {
      auto own = [&](size_t end) {
        return std::count_if(shape_items.begin(),
                             shape_items.begin() + static_cast<std::ptrdiff_t>(end),
                             [](const ShapeItem& i) { return i.own; });
      };
      return make_error(ErrorCode::kUnavailable,
                        fmt::format("stopping: {} of {} shapes of task {} evaluated", own(next),
                                    own(shapes.size()), task.task_id));
    }
    // Fresh seeds per (evaluator, task, shape): a candidate cannot know them in advance.
    Json items = Json::array();
    for (size_t i = next; i < shapes.size(); ++i) {
      std::vector<uint64_t> seeds;
      for (int k = 0; k < st.seeds; ++k) seeds.push_back(shape_seed(task, shapes[i]->id, k));
      Json item{{"shape_id", shapes[i]->id}, {"params", shapes[i]->params}, {"seeds", seeds}};
      for (const auto& [k, v] : shape_items[i].extra.items()) item[k] = v;
      items.push_back(std::move(item));
    }
    Json req{{"schema", "atrex.child-request/1"},
             {"operator", task.operator_name},
             {"shapes", items},
             {"library", library.string()},
             {"atol", st.atol},
             {"rtol", st.rtol},
             {"performance", st.performance},
             {"warmup_iterations", st.warmup_iterations},
             {"min_iterations", st.min_iterations},
             {"max_iterations", st.max_iterations},
             {"min_time_s", st.min_time_s},
             {"max_timing_s", st.max_timing_s},
             {"target_rse", st.target_rse},
             {"timing_mode", st.timing_mode},
             {"range_probe", st.range_probe}};
    const std::string stem =
        fmt::format("{}-{}-{}-{:x}", task.operator_name, shapes[next]->id, ::getpid(),
                    num::mix64(seed_base_ ^ std::hash<std::string>{}(task.task_id)));
    const fs::path req_file = options_.work_dir / (stem + ".request.json");
    const fs::path resp_file = options_.work_dir / (stem + ".response.jsonl");
    fs::remove(resp_file, ec);
    if (auto w = write_text_file_atomic(req_file, req.dump()); !w) {
      return io_error("runner could not write the evaluation request: " + w.error().message);
    }
    SubprocessOptions opt;
    const std::string child = task.candidate.backend == "cuda"  ? "atrex-eval-cuda"
                              : task.candidate.backend == "hip" ? "atrex-eval-hip"
                                                                : "atrex-eval-cpu";
    opt.argv = {(options_.child_dir / child).string(),
                "--request",
                req_file.string(),
                "--response",
                resp_file.string(),
                "--device",
                std::to_string(options_.device_index)};
    // The limit is per shape: every response line the child appends restarts it.
    opt.timeout = std::chrono::milliseconds(static_cast<int64_t>(st.shape_timeout_s * 1000));
    opt.output_file = options_.work_dir / (stem + ".log");
    // Records are emitted as the child appends them (a sweep persists each at once).
    size_t consumed = 0, emitted = 0;
    bool clean = true;
    std::string last_status;
    const auto launched = std::chrono::steady_clock::now();
    auto last_line_at = launched;
    auto drain = [&] {
      std::ifstream in(resp_file, std::ios::binary);
      if (!in) return false;
      in.seekg(static_cast<std::streamoff>(consumed));
      std::string fresh((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      bool any = false;
      for (size_t start = 0, nl; (nl = fresh.find('\n', start)) != std::string::npos;
           start = nl + 1) {
        consumed += nl + 1 - start;
        if (next + emitted >= shapes.size()) break;
        Json j;
        try {
          j = Json::parse(fresh.substr(start, nl - start));
        } catch (const std::exception&) {
          continue;  // the runner's own read of a half-written line cannot happen (whole lines
                     // only)
        }
        const problems::Shape& s = *shapes[next + emitted];
        EvalRecord r = new_eval_record(task, s.id, device_name);
        apply_child_response(r, j);
        // The child's start (context creation, loading) is charged to its first shape.
        if (emitted == 0 && j.contains("started_at_s")) {
          r.wall_s +=
              std::max(0.0, j["started_at_s"].get<double>() -
                                std::chrono::duration<double>(launched.time_since_epoch()).count());
        }
        if (r.device.empty()) r.device = device_name;
        clean = clean && (r.status == EvalStatus::kOk || r.status == EvalStatus::kWrongResult);
        last_status = j.value("status", "");
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
    if (next < shapes.size() && last_status != "crashed" && !stopped && !gave_up) {
      // The child died or hung on shapes[next] without writing its result.
      clean = false;
      EvalRecord r = new_eval_record(task, shapes[next]->id, device_name);
      r.wall_s = since_last;
      if (!proc) {
        r.status = EvalStatus::kCrashed;
        r.error = "runner could not start the evaluation child: " + proc.error().message;
      } else if (proc->timed_out) {
        r.status = EvalStatus::kTimeout;
        r.error =
            fmt::format("no result within the {:.0f} s limit of one shape; the child was killed",
                        st.shape_timeout_s);
      } else {
        r.status = EvalStatus::kCrashed;
        std::string tail = proc->output_tail.size() > 1500
                               ? proc->output_tail.substr(proc->output_tail.size() - 1500)
                               : proc->output_tail;
        r.error = fmt::format("the evaluation child died ({}) without a result{}{}",
                              proc->describe(), tail.empty() ? "" : "; output: ", tail);
      }
      emit(std::move(r), *shapes[next]);
      ++next;
    }
    fs::remove(req_file, ec);
    fs::remove(resp_file, ec);
    if (clean) fs::remove(opt.output_file, ec);
  }
  return ok();
}

}  // namespace atrex::runner
