#include "atrex/scoring/reducer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "atrex/common/redis/sweep_store.h"
#include "atrex/common/wire/keys.h"
#include "atrex/problems/roofline.h"

namespace atrex::scoring {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kFinalPrefix = "final/";

// The key of one results.jsonl line as MemoryResultStore writes it ({"key":"...","record":...};
// nlohmann sorts members), found without parsing the record. nullopt when the line is laid out
// otherwise (an escape in the key, another member order, a torn end): the caller parses it.
std::optional<std::string_view> fast_key(std::string_view line) {
  constexpr std::string_view kHead = "{\"key\":\"";
  constexpr std::string_view kSep = "\",\"record\":";
  if (!line.starts_with(kHead) || !line.ends_with('}')) return std::nullopt;
  const size_t end = line.find('"', kHead.size());
  if (end == std::string_view::npos) return std::nullopt;
  const std::string_view key = line.substr(kHead.size(), end - kHead.size());
  if (key.find('\\') != std::string_view::npos || line.substr(end, kSep.size()) != kSep)
    return std::nullopt;
  return key;
}

// "<task id>" of "<task id>/<shape id>".
std::string_view task_of(std::string_view key) {
  const size_t slash = key.rfind('/');
  return slash == std::string_view::npos ? key : key.substr(0, slash);
}

problems::HardwareProfile profile_of(const HardwareSummary& h) {
  problems::HardwareProfile p;
  p.name = h.name;
  p.p_peak_flops_per_s = h.p_peak;
  p.hbm_bytes_per_s = h.hbm_bytes_per_s;
  return p;
}

std::string bound_of(const problems::Suite& suite, const ReducedSweep& s, const std::string& op,
                     const std::string& shape_id) {
  const problems::OperatorInfo* info = suite.find(op);
  const problems::Shape* shape = info ? info->find_shape(shape_id) : nullptr;
  if (!shape) return "unknown";
  auto counts = problems::roofline_counts(suite, op, *shape, s.manifest.evaluation.roofline);
  if (!counts) return "unknown";
  auto t = problems::roofline_time(*counts, profile_of(s.manifest.hardware));
  return t ? t->bound : "unknown";
}

}  // namespace

std::vector<EvalRecord> ReducedSweep::final_records(const std::string& agent,
                                                    const std::string& op) const {
  std::vector<EvalRecord> out;
  auto f = finals.find({agent, op});
  if (f == finals.end() || f->second.status != FinalStatus::kEvaluated) return out;
  auto r = records.find(f->second.task_id);
  if (r == records.end()) return out;
  for (const auto& shape : f->second.shapes) {
    for (const auto& rec : r->second) {
      if (rec.shape_id == shape) {
        out.push_back(rec);
        break;
      }
    }
  }
  return out;
}

Reducer::Reducer(const problems::Suite& suite, ReduceOptions options)
    : suite_(suite), options_(std::move(options)) {}

void Reducer::warn(std::string message) {
  if (options_.warn) options_.warn(message);
  warnings_.push_back(std::move(message));
}

ReducedSweep& Reducer::sweep_for(const Manifest& manifest, const std::string& source) {
  for (auto& s : sweeps_) {
    if (s->manifest.sweep_id == manifest.sweep_id) return *s;
  }
  auto s = std::make_unique<ReducedSweep>();
  s->manifest = manifest;
  SweepSummary& sum = s->summary;
  sum.sweep_id = manifest.sweep_id;
  sum.name = manifest.name;
  sum.source = source;
  sum.hardware = manifest.hardware.name;
  sum.backend = backend_name(manifest.backend);
  sum.device = manifest.device;
  sum.status = sweep_status_name(manifest.status);
  for (const auto& b : manifest.builds) sum.builds.push_back(describe(b));
  sum.finals_expected =
      static_cast<int64_t>(manifest.agents.size() * manifest.operators.size());
  sweeps_.push_back(std::move(s));
  return *sweeps_.back();
}

void Reducer::add_final(ReducedSweep& s, FinalMarker m) {
  ++s.summary.finals_found;
  if (m.status == FinalStatus::kEvaluated) s.wanted_tasks.insert(m.task_id);
  auto key = std::make_pair(m.agent, m.op);
  s.finals.emplace(std::move(key), std::move(m));
}

void Reducer::add_record(ReducedSweep& s, EvalRecord r) {
  ++s.summary.records_read;
  s.records[r.task_id].push_back(std::move(r));
}

Result<void> Reducer::take_line(ReducedSweep& s, std::string_view line, const fs::path& file,
                                int64_t line_no, bool last, bool finals) {
  auto interesting = [&](std::string_view key) {
    return finals ? key.starts_with(kFinalPrefix)
                  : !key.starts_with(kFinalPrefix) && s.wanted_tasks.contains(task_of(key));
  };
  const auto quick = fast_key(line);
  if (quick && !interesting(*quick)) return ok();
  const std::string where = fmt::format("{}:{}", file.string(), line_no);
  Json entry;
  try {
    entry = Json::parse(line);
  } catch (const Json::parse_error& e) {
    if (last) {
      // The finals pass parses (and warns of) every line but the record lines of the standard
      // layout; those are parsed first in the records pass.
      if (finals || quick) {
        warn(fmt::format("{}: the last line is not complete JSON (a writer stopped mid-line?); "
                         "skipped ({} bytes)",
                         where, line.size()));
      }
      return ok();
    }
    return invalid_input(fmt::format("{}: not valid JSON: {}", where, e.what()));
  }
  if (!entry.is_object() || !entry.contains("key") || !entry["key"].is_string() ||
      !entry.contains("record") || entry.size() != 2) {
    return invalid_input(fmt::format("{}: expected {{\"key\": string, \"record\": object}}", where));
  }
  const std::string key = entry["key"].get<std::string>();
  if (!interesting(key)) return ok();
  if (!seen_keys_.insert(s.manifest.sweep_id + "\n" + key).second) {
    ++s.summary.duplicates_dropped;
    return ok();
  }
  if (finals) {
    ATREX_ASSIGN_OR_RETURN(FinalMarker m, final_marker_from_json(entry["record"], where));
    if (final_key(m.agent, m.op) != key) {
      return invalid_input(fmt::format(
          "{}: field \"record.agent\"/\"record.operator\": the marker says {} but its key is {}",
          where, final_key(m.agent, m.op), key));
    }
    add_final(s, std::move(m));
    return ok();
  }
  ATREX_ASSIGN_OR_RETURN(EvalRecord r, eval_record_from_json(entry["record"], where));
  if (record_key(r.task_id, r.shape_id) != key) {
    return invalid_input(fmt::format(
        "{}: field \"record.task_id\"/\"record.shape_id\": the record says {} but its key is {}",
        where, record_key(r.task_id, r.shape_id), key));
  }
  add_record(s, std::move(r));
  return ok();
}

// The straightforward reader: the file twice through std::getline, every line handed to
// take_line (ReadMode::kTwoPasses; the fast reader's reference in the tests).
Result<void> Reducer::add_jsonl_pass(ReducedSweep& s, const fs::path& file, bool finals) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return io_error(fmt::format("{}: cannot open for reading", file.string()));
  std::string line;
  int64_t line_no = 0;
  int64_t bytes = 0;
  // The bytes not yet reported, at every return; only the first pass reports (the file's size
  // is the progress total, as for the one-pass reader).
  struct BytesReported {
    const ReduceOptions& o;
    int64_t& bytes;
    bool on;
    ~BytesReported() {
      if (on && o.progress && bytes > 0) o.progress(bytes);
    }
  } report_bytes{options_, bytes, finals};
  while (std::getline(in, line)) {
    ++line_no;
    bytes += static_cast<int64_t>(line.size()) + (in.eof() ? 0 : 1);  // eof: no newline
    if (finals && options_.progress && (line_no & 16383) == 0) {
      options_.progress(bytes);
      bytes = 0;
    }
    if (finals) ++s.summary.lines_read;
    if (line.empty()) continue;
    const bool last = in.peek() == EOF;
    ATREX_TRY(take_line(s, line, file, line_no, last, finals));
  }
  if (in.bad()) return io_error(fmt::format("{}: read failed", file.string()));
  return ok();
}

namespace {

// Calls on_line(line, line number, last) for every line of `fd` (newline excluded; a last line
// without a newline included), read in blocks of at least 8 MiB with read(2): no per-line copy
// or allocation. on_line returns false to stop (its error is the caller's). The offset passed
// is the line's byte offset in the file.
template <typename OnLine>
Result<bool> scan_lines(int fd, const fs::path& file, OnLine&& on_line,
                        const std::function<void(int64_t)>& progress) {
  std::vector<char> buf(size_t{8} << 20);
  size_t have = 0;        // bytes in buf
  int64_t buf_start = 0;  // file offset of buf[0]
  int64_t line_no = 0;
  int64_t reported = 0;
  bool eof = false;
  while (!eof || have > 0) {
    if (!eof) {
      if (have == buf.size()) buf.resize(buf.size() * 2);  // a line as long as the buffer
      const ssize_t n = ::read(fd, buf.data() + have, buf.size() - have);
      if (n < 0) {
        if (errno == EINTR) continue;
        return io_error(fmt::format("{}: read failed: {}", file.string(), std::strerror(errno)));
      }
      if (n == 0) eof = true;
      have += static_cast<size_t>(n);
    }
    size_t pos = 0;
    while (pos < have) {
      const char* start = buf.data() + pos;
      const void* nl = std::memchr(start, '\n', have - pos);
      size_t len = 0;
      size_t next = 0;
      if (nl) {
        len = static_cast<size_t>(static_cast<const char*>(nl) - start);
        next = pos + len + 1;
        if (next == have && !eof) break;  // whether it is the last line: read on first
      } else if (eof) {
        len = have - pos;  // the last line, without its newline
        next = have;
      } else {
        break;  // the rest of this line is in the next block
      }
      ++line_no;
      const int64_t offset = buf_start + static_cast<int64_t>(pos);
      // As std::getline + peek() == EOF: nothing follows this line when it is taken.
      const bool last = eof && next == have;
      if (!on_line(std::string_view(start, len), offset, line_no, last)) return false;
      pos = next;
    }
    std::memmove(buf.data(), buf.data() + pos, have - pos);
    buf_start += static_cast<int64_t>(pos);
    have -= pos;
    if (progress && buf_start - reported >= (int64_t{4} << 20)) {
      progress(buf_start - reported);
      reported = buf_start;
    }
    if (eof && have == 0) break;
  }
  if (progress && buf_start > reported) progress(buf_start - reported);
  return true;
}

struct TransparentHash {
  using is_transparent = void;
  size_t operator()(std::string_view v) const { return std::hash<std::string_view>{}(v); }
};

}  // namespace

// The fast reader (ReadMode::kOnePass): one sequential read of the file. Markers (and lines not
// in the writer's layout) are taken at once; for every other line only its offset and its
// task's index are kept (16 bytes), and the lines of the final evaluations are read back by
// offset afterwards and taken in file order. Same results as the two passes: take_line decides
// for both.
Result<void> Reducer::add_jsonl_one_pass(ReducedSweep& s, const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(fmt::format("{}: cannot open for reading", file.string()));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  constexpr uint32_t kAnyTask = UINT32_MAX;  // a line to take again whatever its task
  struct Deferred {
    int64_t offset;
    uint32_t size;
    uint32_t task;
    int64_t line_no;
    bool last;
  };
  std::vector<Deferred> deferred;
  std::unordered_map<std::string, uint32_t, TransparentHash, std::equal_to<>> task_index;
  std::vector<std::string_view> task_names;  // index -> name (views of task_index's keys)
  std::string last_task;
  uint32_t last_index = kAnyTask;
  Result<void> status = ok();
  int64_t scanned_end = 0;  // what was read (a live sweep's file may grow meanwhile)
  auto on_line = [&](std::string_view line, int64_t offset, int64_t line_no, bool last) {
    ++s.summary.lines_read;
    scanned_end = offset + static_cast<int64_t>(line.size());
    if (line.empty()) return true;
    const auto quick = fast_key(line);
    uint32_t task = kAnyTask;
    if (!quick || quick->starts_with(kFinalPrefix)) {
      status = take_line(s, line, file, line_no, last, true);
      if (!status) return false;
      if (quick) return true;
    } else {
      const std::string_view t = task_of(*quick);
      if (last_index != kAnyTask && t == last_task) {
        task = last_index;
      } else {
        auto it = task_index.find(t);
        if (it == task_index.end()) {
          it = task_index.emplace(std::string(t), static_cast<uint32_t>(task_names.size())).first;
          task_names.push_back(it->first);
        }
        task = last_index = it->second;
        last_task.assign(t);
      }
    }
    if (line.size() > UINT32_MAX) {
      status = invalid_input(fmt::format("{}:{}: a line of {} bytes", file.string(), line_no,
                                         line.size()));
      return false;
    }
    deferred.push_back({offset, static_cast<uint32_t>(line.size()), task, line_no, last});
    return true;
  };
  ATREX_ASSIGN_OR_RETURN(bool done, scan_lines(fd, file, on_line, options_.progress));
  if (!done) return status;
  std::vector<char> wanted(task_names.size(), 0);
  for (size_t i = 0; i < task_names.size(); ++i)
    wanted[i] = s.wanted_tasks.contains(task_names[i]) ? 1 : 0;
  // Read back in windows of at least 4 MiB: a sweep whose every record is final reads the file
  // once more, sequentially, not a system call per line.
  std::vector<char> window;
  int64_t window_start = 0;
  for (const Deferred& d : deferred) {
    if (d.task != kAnyTask && !wanted[d.task]) continue;
    if (d.offset < window_start ||
        d.offset + d.size > window_start + static_cast<int64_t>(window.size())) {
      window.resize(std::max<size_t>(size_t{4} << 20, d.size));
      const int64_t n = std::min<int64_t>(static_cast<int64_t>(window.size()),
                                          scanned_end - d.offset);
      int64_t got = 0;
      while (got < n) {
        const ssize_t r = ::pread(fd, window.data() + got, static_cast<size_t>(n - got),
                                  d.offset + got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return io_error(fmt::format("{}: read failed (the file changed while it was "
                                                "read?)", file.string()));
        got += r;
      }
      window.resize(static_cast<size_t>(n));
      window_start = d.offset;
      if (d.size > window.size()) {
        return io_error(fmt::format("{}: the file got shorter while it was read", file.string()));
      }
    }
    const std::string_view line(window.data() + (d.offset - window_start), d.size);
    ATREX_TRY(take_line(s, line, file, d.line_no, d.last, false));
  }
  return ok();
}

Result<void> Reducer::add_folder(const fs::path& dir) {
  ATREX_ASSIGN_OR_RETURN(Manifest manifest, read_manifest_file(dir));
  const fs::path jsonl = dir / "results.jsonl";
  std::error_code ec;
  if (!fs::exists(jsonl, ec)) {
    return not_found(fmt::format("{}: no results.jsonl: the sweep stored no results yet",
                                 dir.string()));
  }
  ReducedSweep& s = sweep_for(manifest, dir.string());
  const int64_t lines_before = s.summary.lines_read;
  if (options_.read_mode == ReadMode::kTwoPasses) {
    ATREX_TRY(add_jsonl_pass(s, jsonl, true));
    ATREX_TRY(add_jsonl_pass(s, jsonl, false));
  } else {
    ATREX_TRY(add_jsonl_one_pass(s, jsonl));
  }
  if (s.summary.lines_read == lines_before) {
    return invalid_input(fmt::format("{}: holds no records: nothing to report", jsonl.string()));
  }
  return ok();
}

Result<void> Reducer::add_store(const Manifest& manifest, ResultStore& store,
                                const std::string& source) {
  ReducedSweep& s = sweep_for(manifest, source);
  for (const auto& agent : manifest.agent_names()) {
    for (const auto& op : manifest.operator_names()) {
      const std::string key = final_key(agent, op);
      ATREX_ASSIGN_OR_RETURN(auto stored, store.get(key));
      if (!stored) continue;
      ++s.summary.lines_read;
      ATREX_ASSIGN_OR_RETURN(FinalMarker fin, final_marker_from_json(*stored, "result " + key));
      if (final_key(fin.agent, fin.op) != key) {
        return invalid_input(fmt::format("result {}: field \"agent\"/\"operator\": the marker "
                                         "says {}",
                                         key, final_key(fin.agent, fin.op)));
      }
      if (!seen_keys_.insert(manifest.sweep_id + "\n" + key).second) {
        ++s.summary.duplicates_dropped;
      } else {
        add_final(s, std::move(fin));
      }
      // The records of the marker read first (this one or an earlier source's); those an
      // earlier source lacked are taken from here.
      const FinalMarker& first = s.finals.at({agent, op});
      if (first.status != FinalStatus::kEvaluated) continue;
      for (const auto& shape : first.shapes) {
        const std::string rkey = record_key(first.task_id, shape);
        ATREX_ASSIGN_OR_RETURN(auto rec, store.get(rkey));
        if (!rec) continue;
        ++s.summary.lines_read;
        if (!seen_keys_.insert(manifest.sweep_id + "\n" + rkey).second) {
          ++s.summary.duplicates_dropped;
          continue;
        }
        ATREX_ASSIGN_OR_RETURN(EvalRecord r, eval_record_from_json(*rec, "result " + rkey));
        add_record(s, std::move(r));
      }
    }
  }
  return ok();
}

Result<void> Reducer::add_redis(const RedisEndpoint& redis, const std::string& sweep_id) {
  ATREX_ASSIGN_OR_RETURN(Manifest manifest, fetch_manifest(redis, sweep_id));
  ATREX_ASSIGN_OR_RETURN(SweepStore store, SweepStore::open(redis, sweep_id));
  return add_store(manifest, *store.results,
                   fmt::format("{} (sweep {})", redis.redacted(), sweep_id));
}

Result<Report> Reducer::finish(const std::string& created_at) const {
  if (sweeps_.empty()) return invalid_input("nothing to reduce: no source was given");
  Report report;
  const Manifest& first = sweeps_.front()->manifest;
  report.context = ReportContext{first.sweep_id,
                                 first.name,
                                 suite_.dir().string(),
                                 first.hardware.name,
                                 backend_name(first.backend),
                                 first.device,
                                 created_at};
  report.warnings = warnings_;
  std::map<std::string, std::set<std::string>> sweeps_of_agent;
  for (const auto& s : sweeps_) {
    for (const auto& a : s->manifest.agents) sweeps_of_agent[a.name].insert(s->manifest.sweep_id);
  }
  for (const auto& s : sweeps_) {
    report.sweeps.push_back(s->summary);
    if (s->summary.finals_found < s->summary.finals_expected) report.partial = true;
    for (const auto& op : s->manifest.operator_names()) {
      if (!suite_.find(op)) {
        report.warnings.push_back(fmt::format(
            "sweep {}: operator {} is not in the suite {}: not scored", s->manifest.sweep_id, op,
            suite_.dir().string()));
      }
    }
    for (const auto& spec : s->manifest.agents) {
      std::vector<EvalRecord> records;
      std::map<std::string, std::string> failed;
      TokenUsage usage;
      for (const auto& op : s->manifest.operator_names()) {
        auto f = s->finals.find({spec.name, op});
        if (f == s->finals.end()) continue;
        usage.add(f->second.usage);
        if (f->second.status != FinalStatus::kEvaluated) {
          failed[op] = f->second.error.empty() ? final_status_name(f->second.status)
                                               : f->second.error;
          continue;
        }
        auto rs = s->final_records(spec.name, op);
        if (rs.size() < f->second.shapes.size()) {
          report.warnings.push_back(fmt::format(
              "sweep {}: {} of {}: {} of the final evaluation's {} records are missing",
              s->manifest.sweep_id, spec.name, op, f->second.shapes.size() - rs.size(),
              f->second.shapes.size()));
          report.partial = true;
          // A shape of the final evaluation without a record was never shown correct (its task
          // was dead-lettered, e.g. a judge that kept failing on a card the candidate filled, or
          // lost): it counts as a failed shape (the operator is at most partially correct), so
          // that a candidate cannot hide the shapes it fails by having its task given back.
          std::set<std::string> have;
          for (const auto& r : rs) have.insert(r.shape_id);
          for (const auto& shape : f->second.shapes) {
            if (have.count(shape)) continue;
            EvalRecord none;
            if (!rs.empty()) none.candidate = rs.front().candidate;
            none.task_id = f->second.task_id;
            none.operator_name = op;
            none.shape_id = shape;
            none.candidate.agent = spec.name;
            none.status = EvalStatus::kCrashed;
            none.error = "no record of this shape from the final evaluation (its task was "
                         "dead-lettered or its records lost: see the dead-lettered tasks)";
            rs.push_back(std::move(none));
          }
        }
        for (auto& r : rs) records.push_back(std::move(r));
      }
      AgentScore a = score_agent(suite_, spec.name, records, failed, options_.dsl_threshold,
                                 s->manifest.evaluation.target_rse);
      a.sweep_id = s->manifest.sweep_id;
      a.provider = spec.provider;
      a.usage = usage;
      if (sweeps_of_agent[spec.name].size() > 1) {
        a.agent = spec.name + "@" + (s->manifest.name.empty() ? s->manifest.sweep_id
                                                              : s->manifest.name);
      }
      for (auto& o : a.operators) {
        for (auto& d : o.shapes) d.bound = bound_of(suite_, *s, o.name, d.shape_id);
      }
      report.agents.push_back(std::move(a));
    }
  }
  for (const auto& [agent, ids] : sweeps_of_agent) {
    if (ids.size() > 1) {
      report.warnings.push_back(fmt::format(
          "agent {} is in {} of the merged sweeps: named <agent>@<sweep name> in this report",
          agent, ids.size()));
    }
  }
  return report;
}

void apply_baseline(Report& report, const Report& baseline, const std::string& label,
                    const std::string& source) {
  std::map<std::string, const OperatorScore*> best;
  for (const auto& a : baseline.agents) {
    for (const auto& o : a.operators) {
      if (!o.attempted) continue;
      auto& b = best[o.name];
      if (!b || o.s_i > b->s_i) b = &o;
    }
  }
  for (auto& a : report.agents) {
    for (auto& o : a.operators) {
      auto it = best.find(o.name);
      if (it == best.end()) continue;
      o.baseline_s_i = it->second->s_i;
      for (auto& d : o.shapes) {
        for (const auto& bd : it->second->shapes) {
          if (bd.shape_id == d.shape_id) d.baseline_time_us_median = bd.time_us_median;
        }
      }
    }
  }
  report.baselines.push_back(BaselineSummary{label, source, baseline.context.sweep_id});
}

}  // namespace atrex::scoring
