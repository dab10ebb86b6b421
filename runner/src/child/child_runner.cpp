#include "child_runner.h"

#include <dlfcn.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "atrex/candidate.h"
#include "atrex/problems/compare.h"
#include "elf_symbols.h"
#include "launch.h"
#include "shape_run_support.h"

namespace atrex::runner {
namespace {

using problems::ResolvedShape;

using child::Buffers;
using child::Failure;
using child::first_byte_difference;
using child::PhaseClock;
using child::timing_summary;

class ShapeRun {
 public:
  ShapeRun(const Json& req, ChildDevice& dev) : req_(req), dev_(dev), buffers_(dev) {}

  Json run() {
    Json resp{{"schema", kChildResponseSchema}, {"device", dev_.name()}, {"seeds_passed", 0},
              {"max_abs_error", 0.0}, {"max_rel_error", 0.0}, {"low_signal_outputs", Json::array()}};
    auto failure = execute(resp);
    resp["status"] = failure ? failure->status : "ok";
    resp["error"] = failure ? failure->error : "";
    resp["phases_s"] = phases_.to_json();
    if (!resp.contains("clocks")) resp["clocks"] = dev_.clocks();
    return resp;
  }

 private:
  std::optional<Failure> execute(Json& resp) {
    // --- shape and candidate
    const auto* def = problems::find_native_operator(req_.value("operator", ""));
    if (!def) return Failure{"rejected", "operator has no native definition: " + req_.value("operator", "")};
    problems::Shape shape;
    shape.id = req_.value("shape_id", "");
    shape.params = req_.value("params", Json::object());
    auto resolved = problems::resolve_shape(*def, shape);
    if (!resolved) return Failure{"rejected", resolved.error().message};
    shape_ = std::move(*resolved);
    void* handle = ::dlopen(req_.value("library", "").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) return Failure{"compile_error", fmt::format("cannot load the compiled candidate: {}", ::dlerror())};
    entry_ = reinterpret_cast<AtrexCandidateRunFn>(::dlsym(handle, ATREX_CANDIDATE_ENTRY_POINT));
    if (!entry_) {
      return Failure{"rejected", fmt::format("the candidate does not export `{}` with C linkage (see atrex/candidate.h)",
                                             ATREX_CANDIDATE_ENTRY_POINT)};
    }
    error_fn_ = reinterpret_cast<AtrexCandidateErrorFn>(::dlsym(handle, ATREX_CANDIDATE_ERROR_SYMBOL));
    {
      auto p = phases_.scope("setup");
      if (auto f = allocate()) return f;
      dev_.trim();  // buffers cached from the previous shape and not reused
    }
    launch_ = std::make_unique<LaunchBuilder>(shape_, dev_.dl_device(), dev_.stream());
    for (size_t i = 0; i < work_in_.size(); ++i) launch_->set_input(i, work_in_[i]);
    for (size_t i = 0; i < out_.size(); ++i) launch_->set_output(i, out_[i]);

    // --- correctness gate: every seed draws fresh inputs
    const auto seeds = req_.value("seeds", std::vector<uint64_t>{1});
    const double atol = def->atol.value_or(req_.value("atol", 1e-2));
    const double rtol = def->rtol.value_or(req_.value("rtol", 5e-2));
    for (uint64_t seed : seeds) {
      if (auto f = prepare_seed(seed)) return f;
      if (auto f = call_and_check(resp, atol, rtol, "")) return f;
      resp["seeds_passed"] = resp["seeds_passed"].get<int>() + 1;
    }
    if (!req_.value("performance", true)) return std::nullopt;
    return measure(resp, atol, rtol);
  }

  std::optional<Failure> allocate() {
    std::string err;
    for (const auto& d : shape_.inputs) {
      work_in_.push_back(buffers_.alloc(d.bytes(), err));
      pristine_in_.push_back(buffers_.alloc(d.bytes(), err));
      if (!err.empty()) return Failure{"crashed", "allocating inputs: " + err};
    }
    for (const auto& d : shape_.outputs) {
      out_.push_back(buffers_.alloc(d.bytes(), err));
      ref_out_.push_back(buffers_.alloc(d.bytes(), err));
      if (!err.empty()) return Failure{"crashed", "allocating outputs: " + err};
    }
    // The second input set of the timed calls (measure) and its reference; without room for it
    // the rotation is off, said so in the response.
    if (req_.value("performance", true)) {
      for (const auto& d : shape_.inputs) {
        if (second_set_error_.empty()) alt_pristine_in_.push_back(buffers_.alloc(d.bytes(), second_set_error_));
      }
      for (const auto& d : shape_.outputs) {
        if (second_set_error_.empty()) alt_ref_out_.push_back(buffers_.alloc(d.bytes(), second_set_error_));
      }
      if (!second_set_error_.empty()) (void)dev_.synchronize();  // clears a recoverable out-of-memory error
    }
    return std::nullopt;
  }

  // Puts output i in its pre-call state: a copy of its `initial_from` input (in-place
  // semantics), else poison (0xFF bytes: NaN for floats) so unwritten elements fail.
  std::string initialise_output(size_t i, void* buffer) { return initialise_output(i, buffer, pristine_in_); }
  std::string initialise_output(size_t i, void* buffer, const std::vector<void*>& inputs) {
    const std::string& from = shape_.def->outputs[i].initial_from;
    if (!from.empty()) {
      for (size_t k = 0; k < shape_.inputs.size(); ++k) {
        if (shape_.inputs[k].name == from) return dev_.copy(buffer, inputs[k], shape_.outputs[i].bytes());
      }
      return "output " + shape_.outputs[i].name + " starts from unknown input " + from;
    }
    return dev_.fill(buffer, 0xFF, shape_.outputs[i].bytes());
  }

  std::optional<Failure> device_error(const std::string& err, const char* where) {
    if (err.empty()) return std::nullopt;
    return Failure{"crashed", fmt::format("{}: {}", where, err)};
  }

  // Fresh inputs for `seed`, pristine copies for the reference and the unchanged-input check.
  std::optional<Failure> prepare_seed(uint64_t seed) {
    auto phase = phases_.scope("inputs");
    for (size_t i = 0; i < shape_.inputs.size(); ++i) {
      if (auto f = device_error(dev_.generate(shape_, i, seed, pristine_in_[i]), "generating inputs")) return f;
      if (auto f = device_error(dev_.copy(work_in_[i], pristine_in_[i], shape_.inputs[i].bytes()), "copying inputs")) return f;
    }
    for (size_t i = 0; i < shape_.outputs.size(); ++i) {
      if (auto f = device_error(initialise_output(i, ref_out_[i]), "initialising reference outputs")) return f;
    }
    std::vector<const void*> in(pristine_in_.begin(), pristine_in_.end());
    if (auto f = device_error(dev_.reference(shape_, in, ref_out_), "reference")) return f;
    if (auto f = device_error(dev_.synchronize(), "reference")) return f;
    host_mirrors_valid_ = false;  // copied when a host comparison needs them (host_mirrors)
    return std::nullopt;
  }

  // Host copies of the current set's pristine inputs and reference outputs, for the comparisons
  // that run on the host (custom ones, backends without a device comparison, failure messages).
  std::optional<Failure> host_mirrors() {
    if (host_mirrors_valid_) return std::nullopt;
    host_pristine_.resize(shape_.inputs.size());
    host_ref_.resize(shape_.outputs.size());
    for (size_t i = 0; i < shape_.inputs.size(); ++i) {
      host_pristine_[i].resize(shape_.inputs[i].bytes());
      if (auto f = device_error(dev_.to_host(host_pristine_[i].data(), pristine_in_[i], shape_.inputs[i].bytes()), "copy")) return f;
    }
    for (size_t i = 0; i < shape_.outputs.size(); ++i) {
      host_ref_[i].resize(shape_.outputs[i].bytes());
      if (auto f = device_error(dev_.to_host(host_ref_[i].data(), ref_out_[i], shape_.outputs[i].bytes()), "copy")) return f;
    }
    host_mirrors_valid_ = true;
    return std::nullopt;
  }

  // Poisons outputs, calls the candidate once, and checks outputs and inputs.
  std::optional<Failure> call_and_check(Json& resp, double atol, double rtol, const std::string& context,
                                        const std::function<int()>& invoke = {}) {
    for (size_t i = 0; i < out_.size(); ++i) {
      if (auto f = device_error(initialise_output(i, out_[i]), "poisoning outputs")) return f;
    }
    if (auto f = device_error(dev_.synchronize(), "poisoning outputs")) return f;
    int rc = 0;
    {
      auto p = phases_.scope("candidate");
      rc = invoke ? invoke() : entry_(launch_->launch());
      if (auto f = device_error(dev_.synchronize(), "after the candidate call")) return f;
    }
    if (rc != 0) return Failure{"wrong_result", returned_error(rc)};
    return check_outputs(resp, atol, rtol, context);
  }

  std::string returned_error(int rc) {
    const char* msg = error_fn_ ? error_fn_() : nullptr;
    return fmt::format("the candidate returned {}{}{}", rc, msg ? ": " : "", msg ? msg : "");
  }

  // Inputs must be unchanged and outputs within tolerance of the reference of the current input
  // set. Compared on the device where the backend can (CUDA: two reduction passes, no copy);
  // the host comparison runs for custom comparisons (compare.h of each operator) and to word
  // the message of a failure.
  std::optional<Failure> check_outputs(Json& resp, double atol, double rtol, const std::string& context) {
    auto phase = phases_.scope("check");
    for (size_t i = 0; i < shape_.inputs.size(); ++i) {
      const size_t bytes = shape_.inputs[i].bytes();
      bool on_device = false;
      int64_t first = -1;
      if (auto f = device_error(dev_.first_difference(work_in_[i], pristine_in_[i], bytes, first, on_device), "comparing inputs")) return f;
      if (on_device && first < 0) continue;
      if (auto f = host_mirrors()) return f;
      host_scratch_.resize(shape_.inputs.size());
      host_scratch_[i].resize(bytes);
      if (auto f = device_error(dev_.to_host(host_scratch_[i].data(), work_in_[i], bytes), "copy")) return f;
      auto diff = first_byte_difference(shape_.inputs[i], host_scratch_[i].data(), host_pristine_[i].data());
      if (!diff.empty()) return Failure{"wrong_result", context + "the candidate modified its input " + diff + "; inputs are read-only"};
    }
    std::vector<std::optional<problems::CompareResult>> passed(shape_.outputs.size());
    bool need_host = false;
    const std::vector<const void*> dev_out(out_.begin(), out_.end()), dev_ref(ref_out_.begin(), ref_out_.end());
    for (size_t i = 0; i < shape_.outputs.size(); ++i) {
      problems::CompareResult c;
      bool on_device = false;
      const std::string err = shape_.def->outputs[i].compare
                                  ? dev_.compare_custom(shape_, i, dev_out, dev_ref, atol, rtol, c, on_device)
                                  : dev_.compare(shape_.outputs[i], out_[i], ref_out_[i], atol, rtol, c, on_device);
      if (auto f = device_error(err, "comparing outputs")) return f;
      if (on_device && c.pass) passed[i] = c;
      else need_host = true;
    }
    if (need_host) {
      if (auto f = host_mirrors()) return f;
      host_out_.resize(shape_.outputs.size());
      for (size_t i = 0; i < shape_.outputs.size(); ++i) {
        host_out_[i].resize(shape_.outputs[i].bytes());
        if (auto f = device_error(dev_.to_host(host_out_[i].data(), out_[i], shape_.outputs[i].bytes()), "copy")) return f;
      }
    }
    std::vector<const void*> cand, ref, in;  // empty when every output passed on the device
    for (auto& b : host_out_) cand.push_back(b.data());
    for (auto& b : host_ref_) ref.push_back(b.data());
    for (auto& b : host_pristine_) in.push_back(b.data());
    for (size_t i = 0; i < shape_.outputs.size(); ++i) {
      const auto custom = shape_.def->outputs[i].compare;
      problems::CompareResult c = passed[i]                   ? *passed[i]
                                  : custom                    ? custom(shape_, i, cand, ref, in, atol, rtol)
                                                              : problems::compare_output(shape_.outputs[i], cand[i], ref[i], atol, rtol);
      resp["max_abs_error"] = std::max(resp["max_abs_error"].get<double>(), c.max_abs_error);
      resp["max_rel_error"] = std::max(resp["max_rel_error"].get<double>(), c.max_rel_error);
      if (c.low_signal) {
        auto& ls = resp["low_signal_outputs"];
        if (std::find(ls.begin(), ls.end(), shape_.outputs[i].name) == ls.end()) ls.push_back(shape_.outputs[i].name);
      }
      if (!c.pass) return Failure{"wrong_result", context + c.message};
    }
    return std::nullopt;
  }

  void swap_input_sets() {
    std::swap(pristine_in_, alt_pristine_in_);
    std::swap(ref_out_, alt_ref_out_);
    std::swap(host_pristine_, alt_host_pristine_);
    std::swap(host_ref_, alt_host_ref_);
    std::swap(host_mirrors_valid_, alt_host_mirrors_valid_);
  }

  // Keeps the last correctness seed's inputs and reference as the second set and draws a timing
  // seed's into the current one (prepare_seed). False when there is no room for it (recorded in
  // the response); a device error is left in rotation_failure_.
  bool prepare_second_input_set(Json& resp) {
    if (!second_set_error_.empty()) {
      resp["input_rotation"] = "off: no room for a second input set (" + second_set_error_ + ")";
      return false;
    }
    alt_host_pristine_.clear();
    alt_host_ref_.clear();
    alt_host_mirrors_valid_ = false;
    swap_input_sets();  // the seed's set becomes the second one; prepare_seed fills the fresh one
    const uint64_t timing_seed = req_.value("seeds", std::vector<uint64_t>{1}).back() ^ 0x9E3779B97F4A7C15ull;
    rotation_failure_ = prepare_seed(timing_seed);
    resp["input_rotation"] = "on";
    return !rotation_failure_;
  }

  // The kernels a timed call launches must be the same (as a multiset of names) in every timed
  // call on the same input set (SOL-ExecBench's check): a candidate that skips work or replays a
  // cached answer when its inputs repeat launches fewer kernels.
  std::optional<Failure> check_kernel_sets(const std::map<uint64_t, CallTrace>& traces,
                                           const std::map<uint64_t, int>& set_of) {
    std::map<int, std::pair<uint64_t, std::vector<std::string>>> first;  // input set -> (call, kernels)
    for (const auto& [id, set] : set_of) {
      std::vector<std::string> names;
      if (auto it = traces.find(id); it != traces.end()) {
        for (const auto& k : it->second.kernels) names.push_back(k.name);
      }
      std::sort(names.begin(), names.end());
      auto [pos, inserted] = first.try_emplace(set, id, names);
      if (inserted || pos->second.second == names) continue;
      auto list = [](const std::vector<std::string>& v) {
        std::string out;
        for (size_t i = 0; i < v.size() && i < 6; ++i) out += (i ? ", " : "") + v[i];
        return fmt::format("{} kernel(s){}{}{}", v.size(), v.empty() ? "" : ": ", out, v.size() > 6 ? ", ..." : "");
      };
      return Failure{"wrong_result",
                     fmt::format("the kernels launched differ between timed calls on the same inputs (call {}: {}; call {}: {}): "
                                 "work skipped or replayed from a cache",
                                 pos->second.first + 1, list(pos->second.second), id + 1, list(names))};
    }
    return std::nullopt;
  }

  // Target-DSL attribution: the share of the timed calls' kernel time spent in kernels the
  // candidate's own library defines (elf_symbols.h); vendor-library kernels make up the rest.
  void attribute_kernels(Json& resp, const std::map<uint64_t, CallTrace>& traces) {
    auto symbols = defined_function_symbols(req_.value("library", ""));
    std::set<std::string> own_keys;
    if (symbols) {
      for (const auto& s : *symbols) own_keys.insert(kernel_key(s));
    }
    std::map<std::string, std::pair<double, bool>> per_kernel;  // name -> (us, own)
    double own = 0, total = 0;
    for (const auto& [id, t] : traces) {
      for (const auto& k : t.kernels) per_kernel[k.name].first += k.us;
    }
    for (auto& [name, v] : per_kernel) {
      v.second = own_keys.count(kernel_key(name)) > 0;
      total += v.first;
      if (v.second) own += v.first;
    }
    if (!symbols) resp["dsl_attribution_error"] = symbols.error().message;
    if (total <= 0 || !symbols) return;
    resp["dsl_share"] = own / total;
    Json kernels = Json::array();
    for (const auto& [name, v] : per_kernel) {
      kernels.push_back(Json{{"name", name}, {"share", v.first / total}, {"own", v.second}});
    }
    resp["timing"]["kernels"] = kernels;
  }

  // Performance gate on the last seed's inputs: warm-up, then cache-flushed timed calls (graph
  // replay where the call can be captured, else eager; CUPTI kernel spans where the backend can trace;
  // request "timing_mode": auto|cupti|graph|eager)
  // until min_iterations, min_time_s and the relative standard error target are all met, or
  // max_iterations / max_timing_s is reached; then re-checks of the outputs and inputs, of a
  // graph replay and of one more eager call.
  std::optional<Failure> measure(Json& resp, double atol, double rtol) {
    const int warmup = req_.value("warmup_iterations", 3);
    const int min_it = req_.value("min_iterations", 10), max_it = req_.value("max_iterations", 200);
    const double min_time_us = req_.value("min_time_s", 0.2) * 1e6;
    const double target_rse = req_.value("target_rse", 0.005);
    const std::string mode = req_.value("timing_mode", "auto");
    if (mode != "auto" && mode != "cupti" && mode != "graph" && mode != "eager") {
      return Failure{"rejected", "timing_mode must be auto, cupti, graph or eager, not " + mode};
    }
    auto call = [&] { return entry_(launch_->launch()); };
    // Every timed call starts from poisoned outputs (in-place outputs from their input), set
    // outside the timed window: a candidate cannot skip work because its output already holds
    // the answer of the previous call; the last timed call's outputs are checked below.
    //
    // Timed calls alternate between two input sets of different content (the last correctness
    // seed's and a timing seed's), copied into the same input buffers outside the timed window:
    // a candidate that memoises its output by input address returns a stale answer, caught on
    // the last timed call's outputs. Skipped (and said so) when the device has no room for a
    // second set.
    const bool rotate = prepare_second_input_set(resp);
    if (auto f = rotation_failure_) return f;
    int prepared = 0;  // timed calls set up so far; the last one used set (prepared - 1) % 2
    auto reset_outputs = [&]() -> std::string {
      const std::vector<void*>& set = rotate && prepared % 2 == 1 ? alt_pristine_in_ : pristine_in_;
      ++prepared;
      if (rotate) {
        for (size_t i = 0; i < work_in_.size(); ++i) {
          if (auto e = dev_.copy(work_in_[i], set[i], shape_.inputs[i].bytes()); !e.empty()) return e;
        }
      }
      for (size_t i = 0; i < out_.size(); ++i) {
        if (auto e = initialise_output(i, out_[i], set); !e.empty()) return e;
      }
      return {};
    };
    std::optional<PhaseClock::Scope> timing_phase(phases_.scope("timing"));  // ends before the re-checks
    for (int i = 0; i < warmup; ++i) {
      const int rc = call();
      if (rc != 0) return Failure{"wrong_result", "during warm-up: " + returned_error(rc)};
    }
    if (auto f = device_error(dev_.synchronize(), "during warm-up")) return f;
    const Json clocks_before = dev_.clocks();

    // CUPTI spans time the calls where the backend can trace (auto, cupti); the graph is then
    // captured once for the replay re-check below, not for timing.
    const std::string trace_unavailable = dev_.tracing_unavailable();
    if (mode == "cupti" && !trace_unavailable.empty()) return Failure{"rejected", "timing_mode cupti: " + trace_unavailable};
    const bool cupti = trace_unavailable.empty() && (mode == "auto" || mode == "cupti");
    bool graph = false;
    std::string graph_unsupported;
    if (mode == "graph" && dev_.graph_timing_method().empty()) {
      return Failure{"rejected", "timing_mode graph: this backend has no graph replay"};
    }
    if (mode != "eager" && !dev_.graph_timing_method().empty()) {
      int rc = 0;
      const int batch = cupti ? 1 : std::clamp(min_it, 1, 50);
      if (auto f = device_error(dev_.capture_timed(call, reset_outputs, batch, rc, graph_unsupported), "capturing a CUDA graph")) {
        return f;
      }
      graph = graph_unsupported.empty();
      if (!graph && mode == "graph") {
        return Failure{"rejected", "timing_mode graph: the call cannot be captured: " + graph_unsupported};
      }
    }
    std::vector<double> samples;
    std::vector<double> event_samples;           // cupti: the same calls timed with events
    std::map<uint64_t, CallTrace> traces;         // cupti: by call number
    std::map<uint64_t, int> trace_set;            // cupti: call number -> input set it ran on
    const auto wall_limit = std::chrono::steady_clock::now() + std::chrono::duration<double>(req_.value("max_timing_s", 3.0));
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
    while (!done()) {
      if (cupti) {
        // A batch of traced calls, then their spans (a call without device records: its event time).
        const uint64_t first = next_call;
        for (int k = 0; k < std::clamp(min_it, 1, 50); ++k) {
          int rc = 0;
          double ev = 0;
          if (auto f = device_error(reset_outputs(), "poisoning outputs before a timed call")) return f;
          trace_set[next_call] = rotate ? (prepared - 1) % 2 : 0;
          if (auto f = device_error(dev_.trace_call(call, next_call++, rc, ev), "traced call")) return f;
          if (rc != 0) return Failure{"wrong_result", "during timing: " + returned_error(rc)};
          event_samples.push_back(ev);
        }
        if (auto f = device_error(dev_.synchronize(), "traced calls")) return f;
        if (auto f = device_error(dev_.trace_collect(traces), "collecting CUPTI records")) return f;
        for (uint64_t id = first; id < next_call; ++id) {
          auto it = traces.find(id);
          samples.push_back(it != traces.end() && it->second.span_us() > 0 ? it->second.span_us() : event_samples[id]);
        }
        continue;
      }
      if (graph) {
        if (auto f = device_error(dev_.replay_timed(samples), "graph replay")) return f;
        continue;
      }
      int rc = 0;
      double us = 0;
      if (auto f = device_error(reset_outputs(), "poisoning outputs before a timed call")) return f;
      if (auto f = device_error(dev_.time_call(call, rc, us), "timed call")) return f;
      if (rc != 0) return Failure{"wrong_result", "during timing: " + returned_error(rc)};
      samples.push_back(us);
    }
    timing_phase.reset();
    std::string method = cupti ? "cupti_kernel_span_l2_flush" : graph ? dev_.graph_timing_method() : dev_.timing_method();
    std::string cupti_note;
    if (cupti) {
      if (auto f = check_kernel_sets(traces, trace_set)) return f;
      // Work the call does on the host before or between its launches is not device time; a call
      // whose event window is much longer than its device span is timed with the events.
      const double span = stats::median(samples), ev = stats::median(event_samples);
      if (ev - span > std::max(20.0, 0.25 * span)) {
        cupti_note = fmt::format("event window {:.1f} us vs device span {:.1f} us: host work inside the call; timed with events", ev, span);
        samples = event_samples;
        method = dev_.timing_method();
      }
    }
    resp["timing"] = timing_summary(samples, method);
    if (cupti) attribute_kernels(resp, traces);
    resp["timing"]["relative_standard_error"] = stats::relative_standard_error(samples);
    resp["timing"]["target_rse"] = target_rse;
    if (cupti) {
      resp["timing"]["event_time_us_median"] = stats::median(event_samples);
      resp["timing"]["cupti_records"] = dev_.trace_stats();
    }
    if (!cupti_note.empty()) resp["timing"]["cupti_fallback"] = cupti_note;
    if (!cupti && mode == "auto" && !dev_.graph_timing_method().empty()) resp["timing"]["cupti_unavailable"] = trace_unavailable;
    if (!graph_unsupported.empty() && mode != "eager") resp["timing"]["graph_fallback"] = graph_unsupported;
    resp["clocks"] = Json{{"before", clocks_before}, {"after", dev_.clocks()}};
    if (auto f = device_error(dev_.synchronize(), "after timing")) return f;
    // Make the set the last timed call used the current one: the checks below compare with it,
    // and the re-checks after it run on the inputs now in the buffers.
    if (rotate && (prepared - 1) % 2 == 1) swap_input_sets();
    if (auto f = check_outputs(resp, atol, rtol, "outputs of the last timed call: ")) return f;
    if (rotate) {
      // One checked call on each input set in turn, in the same buffers: whichever answer a
      // memoising candidate kept, one of the two is stale.
      for (int k = 0; k < 2; ++k) {
        swap_input_sets();
        for (size_t i = 0; i < work_in_.size(); ++i) {
          if (auto f = device_error(dev_.copy(work_in_[i], pristine_in_[i], shape_.inputs[i].bytes()), "copying inputs")) return f;
        }
        if (auto f = call_and_check(resp, atol, rtol, "new inputs in the same buffers after timing: ")) return f;
      }
    }
    // What the timed replays computed must be what the eager call computes: a candidate whose
    // work escapes the capture (a side stream never joined back, host-side shortcuts) fails here.
    if (graph) {
      if (auto f = call_and_check(resp, atol, rtol, "CUDA-graph replay of the timed call: ", [&] {
            const std::string e = dev_.replay_call();
            return e.empty() ? 0 : -1;
          })) {
        return f;
      }
    }
    // One more poisoned call after the timed ones: a candidate must not behave differently
    // once it has been called many times (e.g. stop computing after the correctness seeds).
    if (auto f = call_and_check(resp, atol, rtol, "after timing: ")) return f;
    return std::nullopt;
  }

  const Json& req_;
  ChildDevice& dev_;
  Buffers buffers_;
  ResolvedShape shape_;
  AtrexCandidateRunFn entry_ = nullptr;
  AtrexCandidateErrorFn error_fn_ = nullptr;
  std::unique_ptr<LaunchBuilder> launch_;
  PhaseClock phases_;
  // The second input set of the timed calls (see measure).
  std::vector<void*> alt_pristine_in_, alt_ref_out_;
  std::vector<std::vector<uint8_t>> alt_host_pristine_, alt_host_ref_;
  std::optional<Failure> rotation_failure_;
  std::string second_set_error_;
  std::vector<void*> work_in_, pristine_in_, out_, ref_out_;
  // Host mirrors, sized on first use (host_mirrors).
  std::vector<std::vector<uint8_t>> host_pristine_, host_scratch_, host_ref_, host_out_;
  bool host_mirrors_valid_ = false, alt_host_mirrors_valid_ = false;
};

}  // namespace

Json run_child_shape(const Json& request, ChildDevice& device) {
  ShapeRun run(request, device);
  return run.run();
}

namespace {

std::atomic<bool> g_stop_requested{false};
extern "C" void on_stop_signal(int) { g_stop_requested.store(true); }

// Task mode (request "shapes": [{shape_id, params, seeds}, ...]): one process evaluates the
// shapes in order and appends each response as one JSON line to the response file as soon as
// it is known, so the runner sees progress and, after a crash or a timeout, knows which shape
// was in hand. Stops after a crashed shape (the context may be unusable) and, on SIGUSR1,
// between shapes.
int run_child_task(const Json& request, ChildDevice& device, const std::string& response_path) {
  struct sigaction sa{};
  sa.sa_handler = on_stop_signal;
  ::sigaction(SIGUSR1, &sa, nullptr);
  std::FILE* out = std::fopen(response_path.c_str(), "a");
  if (!out) {
    fmt::print(stderr, "{}: cannot open the response file: {}\n", response_path, std::strerror(errno));
    return 1;
  }
  Json common = request;
  common.erase("shapes");
  for (const Json& item : request["shapes"]) {
    if (g_stop_requested.load()) break;
    Json one = common;
    for (const auto& [k, v] : item.items()) one[k] = v;
    const auto t0 = std::chrono::steady_clock::now();
    Json response = run_child_shape(one, device);
    // steady_clock is CLOCK_MONOTONIC, shared with the runner: it charges the child's start to
    // the first shape.
    response["started_at_s"] = std::chrono::duration<double>(t0.time_since_epoch()).count();
    response["shape_id"] = one.value("shape_id", "");
    response["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string line = response.dump() + "\n";
    if (std::fwrite(line.data(), 1, line.size(), out) != line.size() || std::fflush(out) != 0) {
      fmt::print(stderr, "{}: cannot write the response: {}\n", response_path, std::strerror(errno));
      return 1;
    }
    if (response.value("status", "") == "crashed") {
      std::fclose(out);
      std::_Exit(3);  // a crashed (sticky-error) context must not be reused, nor its destructors run
    }
  }
  std::fclose(out);
  return 0;
}

}  // namespace

int child_main(int argc, char** argv, ChildDevice& device) {
  std::string request_path, response_path;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--request") == 0) request_path = argv[i + 1];
    if (std::strcmp(argv[i], "--response") == 0) response_path = argv[i + 1];
  }
  if (request_path.empty() || response_path.empty()) {
    fmt::print(stderr, "usage: {} --request FILE --response FILE\n", argv[0]);
    return 2;
  }
  auto request = read_json_file(request_path);
  if (!request) {
    fmt::print(stderr, "{}\n", request.error().message);
    return 2;
  }
  if (request->contains("shapes") && (*request)["shapes"].is_array()) return run_child_task(*request, device, response_path);
  Json response = request->value("mode", "shape") == "dump" ? run_child_dump(*request, device)
                                                             : run_child_shape(*request, device);
  auto written = write_text_file_atomic(response_path, response.dump());
  if (!written) {
    fmt::print(stderr, "{}\n", written.error().message);
    return 1;
  }
  // A crashed (sticky-error) context must not be reused: exit without running destructors
  // that would touch it again.
  if (response.value("status", "") == "crashed") std::_Exit(3);
  return 0;
}

}  // namespace atrex::runner
