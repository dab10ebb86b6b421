// The SAX handler: a frame stack that knows where in a Kineto trace it is, and a per-event
// builder that is committed when the event's object closes (so a cut inside an event drops only
// that event).
#include <charconv>
#include <istream>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "atrex/ingest/trace.h"
#include "byte_source.h"

namespace atrex::ingest {

uint32_t StringPool::intern(std::string_view s) {
  auto it = index_.find(std::string(s));
  if (it != index_.end()) return it->second;
  const auto id = static_cast<uint32_t>(strings_.size());
  strings_.emplace_back(s);
  index_.emplace(strings_.back(), id);
  return id;
}

namespace {

using Json = nlohmann::json;

enum class Frame {
  kRootObject, kEvents, kEvent, kArgs, kDims, kDimsEntry, kDimsListEntry, kTypes, kConcrete,
  kDistInfo, kSkip
};

struct EventBuilder {
  std::string ph, cat, name, pid, tid;
  std::optional<double> ts, dur;
  int64_t correlation = -1, external_id = -1, device = -1, stream = -1;
  OpInputs inputs;
  bool has_dims = false;
  void reset() { *this = EventBuilder(); }
};

std::optional<double> number_from_string(const std::string& s) {
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

class Handler {
 public:
  Handler(TraceSet& set, TraceFile& file) : set_(set), file_(file) {}

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(Json::number_integer_t v) { return number(static_cast<double>(v), v); }
  bool number_unsigned(Json::number_unsigned_t v) {
    return number(static_cast<double>(v), static_cast<int64_t>(v));
  }
  bool number_float(Json::number_float_t v, const std::string&) {
    return number(v, static_cast<int64_t>(v));
  }
  bool binary(Json::binary_t&) { return true; }
  bool string(std::string& v) {
    if (frames_.empty()) return true;
    switch (frames_.back()) {
      case Frame::kEvent: event_string(v); break;
      case Frame::kArgs: args_string(v); break;
      case Frame::kTypes: ev_.inputs.types.push_back(v); break;
      case Frame::kConcrete: ev_.inputs.concrete.push_back(v); break;
      default: break;
    }
    return true;
  }
  bool key(std::string& k) {
    key_ = k;
    return true;
  }
  bool start_object(std::size_t) { return start(true); }
  bool start_array(std::size_t) { return start(false); }
  bool end_object() { return end(); }
  bool end_array() { return end(); }
  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& ex) {
    error_position_ = position;
    error_ = fmt::format("{} (last token \"{}\")", ex.what(), last_token.substr(0, 40));
    return false;
  }

  bool saw_events() const { return saw_events_; }
  bool root_was_object() const { return root_object_; }
  const std::string& error() const { return error_; }
  size_t error_position() const { return error_position_; }

 private:
  bool number(double d, int64_t i) {
    if (frames_.empty()) return true;
    switch (frames_.back()) {
      case Frame::kEvent:
        if (key_ == "ts") ev_.ts = d;
        else if (key_ == "dur") ev_.dur = d;
        else if (key_ == "pid") ev_.pid = std::to_string(i);
        else if (key_ == "tid") ev_.tid = std::to_string(i);
        break;
      case Frame::kArgs:
        if (key_ == "correlation") ev_.correlation = i;
        else if (key_ == "External id") ev_.external_id = i;
        else if (key_ == "device") ev_.device = i;
        else if (key_ == "stream") ev_.stream = i;
        break;
      case Frame::kDimsEntry:
        ev_.inputs.dims.back().push_back(i);
        break;
      case Frame::kDimsListEntry:
        if (list_first_) ev_.inputs.dims.back().push_back(i);
        break;
      case Frame::kConcrete: ev_.inputs.concrete.push_back(std::to_string(i)); break;
      case Frame::kDistInfo:
        if (key_ == "rank") file_.rank = static_cast<int>(i);
        break;
      default: break;
    }
    return true;
  }

  void event_string(const std::string& v) {
    if (key_ == "ph") ev_.ph = v;
    else if (key_ == "cat") ev_.cat = v;
    else if (key_ == "name") ev_.name = v;
    else if (key_ == "pid") ev_.pid = v;
    else if (key_ == "tid") ev_.tid = v;
    else if (key_ == "ts") ev_.ts = number_from_string(v);
    else if (key_ == "dur") ev_.dur = number_from_string(v);
  }
  void args_string(const std::string& v) {
    auto n = number_from_string(v);
    if (!n) return;
    if (key_ == "correlation") ev_.correlation = static_cast<int64_t>(*n);
    else if (key_ == "External id") ev_.external_id = static_cast<int64_t>(*n);
    else if (key_ == "device") ev_.device = static_cast<int64_t>(*n);
    else if (key_ == "stream") ev_.stream = static_cast<int64_t>(*n);
  }

  Frame child_frame(bool object) const {
    if (frames_.empty()) return object ? Frame::kRootObject : Frame::kEvents;  // array root
    switch (frames_.back()) {
      case Frame::kRootObject:
        if (!object && key_ == "traceEvents") return Frame::kEvents;
        if (object && key_ == "distributedInfo") return Frame::kDistInfo;
        return Frame::kSkip;
      case Frame::kEvents: return object ? Frame::kEvent : Frame::kSkip;
      case Frame::kEvent: return object && key_ == "args" ? Frame::kArgs : Frame::kSkip;
      case Frame::kArgs:
        if (object) return Frame::kSkip;
        if (key_ == "Input Dims") return Frame::kDims;
        if (key_ == "Input type") return Frame::kTypes;
        if (key_ == "Concrete Inputs") return Frame::kConcrete;
        return Frame::kSkip;
      case Frame::kDims: return object ? Frame::kSkip : Frame::kDimsEntry;
      case Frame::kDimsEntry: return object ? Frame::kSkip : Frame::kDimsListEntry;
      default: return Frame::kSkip;
    }
  }

  bool start(bool object) {
    const Frame f = child_frame(object);
    if (f == Frame::kRootObject) root_object_ = true;
    if (f == Frame::kEvents) saw_events_ = true;
    if (f == Frame::kEvent) ev_.reset();
    if (f == Frame::kDims) ev_.has_dims = true;
    if (f == Frame::kDimsEntry) {
      ev_.inputs.dims.emplace_back();
      list_index_ = 0;
    }
    if (f == Frame::kDimsListEntry) list_first_ = list_index_++ == 0;
    frames_.push_back(f);
    return true;
  }

  bool end() {
    const Frame f = frames_.back();
    frames_.pop_back();
    if (f == Frame::kEvent) commit();
    return true;
  }

  uint32_t thread_index() {
    const uint32_t pid = set_.names.intern(ev_.pid);
    const uint32_t tid = set_.names.intern(ev_.tid);
    const uint64_t key = (static_cast<uint64_t>(pid) << 32) | tid;
    auto [it, fresh] = threads_.emplace(key, static_cast<uint32_t>(file_.threads.size()));
    if (fresh) file_.threads.push_back(ThreadKey{pid, tid});
    return it->second;
  }

  int32_t inputs_index() {
    if (!ev_.has_dims && ev_.inputs.types.empty()) return -1;
    std::string key;
    for (const auto& d : ev_.inputs.dims) {
      for (int64_t x : d) key += std::to_string(x) + ',';
      key += ';';
    }
    key += '|';
    for (const auto& t : ev_.inputs.types) key += t + ';';
    key += '|';
    for (const auto& c : ev_.inputs.concrete) key += c + ';';
    auto [it, fresh] = inputs_.emplace(key, static_cast<int32_t>(file_.inputs.size()));
    if (fresh) file_.inputs.push_back(std::move(ev_.inputs));
    return it->second;
  }

  void skip(const std::string& why) {
    ++file_.events_skipped;
    if (file_.first_skip_reason.empty()) {
      file_.first_skip_reason = fmt::format("event {} (\"{}\"): {}", file_.events_seen,
                                            ev_.name.substr(0, 60), why);
    }
  }

  void commit() {
    ++file_.events_seen;
    if (ev_.ph != "X") return;  // metadata, instant and flow events carry no duration
    const std::string& c = ev_.cat;
    const bool range = c == "cpu_op" || c == "user_annotation" ||
                       (c == "python_function" && ev_.name.rfind("nn.Module:", 0) == 0);
    const bool runtime = c == "cuda_runtime" || c == "cuda_driver" || c == "hip_runtime" ||
                         c == "hip_driver" || c == "runtime";
    const bool gpu = c == "kernel" || c == "gpu_memcpy" || c == "gpu_memset";
    if (!range && !runtime && !gpu) return;
    if (ev_.name.empty()) return skip("no \"name\"");
    if (!ev_.ts) return skip("no numeric \"ts\"");
    if (!ev_.dur) return skip("no numeric \"dur\"");
    if (*ev_.dur < 0) return skip(fmt::format("negative \"dur\" {}", *ev_.dur));
    const uint32_t name = set_.names.intern(ev_.name);
    if (range) {
      CpuRange r;
      r.name = name;
      r.thread = thread_index();
      r.kind = c == "cpu_op" ? RangeKind::kOp
               : c == "user_annotation" ? RangeKind::kAnnotation
                                        : RangeKind::kModule;
      r.inputs = c == "cpu_op" ? inputs_index() : -1;
      r.ts_us = *ev_.ts;
      r.dur_us = *ev_.dur;
      r.external_id = ev_.external_id;
      file_.ranges.push_back(r);
    } else if (runtime) {
      if (ev_.correlation < 0) return;  // a runtime call that launched nothing
      file_.runtime.push_back(RuntimeCall{name, thread_index(), *ev_.ts, *ev_.dur,
                                          ev_.correlation, ev_.external_id});
    } else {
      GpuKernel k;
      k.name = name;
      k.kind = c == "kernel" ? GpuKind::kKernel
               : c == "gpu_memcpy" ? GpuKind::kMemcpy
                                   : GpuKind::kMemset;
      k.device = static_cast<int32_t>(ev_.device);
      if (k.device < 0) {
        if (auto p = number_from_string(ev_.pid)) k.device = static_cast<int32_t>(*p);
      }
      k.stream = static_cast<int32_t>(ev_.stream);
      if (k.stream < 0) {
        if (auto t = number_from_string(ev_.tid)) k.stream = static_cast<int32_t>(*t);
      }
      k.ts_us = *ev_.ts;
      k.dur_us = *ev_.dur;
      k.correlation = ev_.correlation;
      k.external_id = ev_.external_id;
      file_.kernels.push_back(k);
    }
  }

  TraceSet& set_;
  TraceFile& file_;
  std::vector<Frame> frames_;
  std::string key_;
  EventBuilder ev_;
  size_t list_index_ = 0;
  bool list_first_ = false;
  bool saw_events_ = false;
  bool root_object_ = false;
  std::string error_;
  size_t error_position_ = 0;
  std::unordered_map<uint64_t, uint32_t> threads_;
  std::unordered_map<std::string, int32_t> inputs_;
};

}  // namespace

Result<void> read_trace(const std::filesystem::path& path, TraceSet& set) {
  ATREX_ASSIGN_OR_RETURN(auto source, detail::TraceByteSource::open(path));
  TraceFile file;
  file.path = path;
  Handler handler(set, file);
  std::istream in(source.get());
  bool complete = false;
  try {
    complete = Json::sax_parse(in, &handler, Json::input_format_t::json, true);
  } catch (const std::exception& e) {  // the SAX parser reports through parse_error; be safe
    return invalid_input(fmt::format("{}: cannot parse: {}", path.string(), e.what()));
  }
  file.bytes_read = source->bytes_out();
  file.repairs = source->repairs();
  if (!complete) {
    if (!handler.saw_events() || file.events_seen == 0) {
      return invalid_input(fmt::format(
          "{}: not a PyTorch-profiler trace: no complete event before the first error at byte "
          "{}: {}",
          path.string(), handler.error_position(), handler.error()));
    }
    file.truncated = true;
    const bool at_end = handler.error_position() + 1 >= file.bytes_read;
    file.truncation = fmt::format(
        "{} at byte {} of {}{}: {}", at_end ? "cut short" : "parse error",
        handler.error_position(), file.bytes_read,
        source->read_error().empty() ? "" : fmt::format(" (gzip: {})", source->read_error()),
        handler.error());
  } else if (!handler.saw_events()) {
    return invalid_input(fmt::format(
        "{}: field \"traceEvents\" is missing: not a PyTorch-profiler (Chrome trace) file",
        path.string()));
  }
  set.files.push_back(std::move(file));
  return ok();
}

}  // namespace atrex::ingest
