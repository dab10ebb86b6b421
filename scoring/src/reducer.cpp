#include "atrex/scoring/reducer.h"

#include <fstream>

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

Result<void> Reducer::add_jsonl_pass(ReducedSweep& s, const fs::path& file, bool finals) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return io_error(fmt::format("{}: cannot open for reading", file.string()));
  std::vector<char> buffer(1 << 20);
  in.rdbuf()->pubsetbuf(buffer.data(), static_cast<std::streamsize>(buffer.size()));
  std::string line;
  int64_t line_no = 0;
  int64_t bytes = 0;
  struct BytesReported {  // the bytes not yet reported, at every return
    const ReduceOptions& o;
    int64_t& bytes;
    ~BytesReported() {
      if (o.progress && bytes > 0) o.progress(bytes);
    }
  } report_bytes{options_, bytes};
  while (std::getline(in, line)) {
    ++line_no;
    bytes += static_cast<int64_t>(line.size()) + 1;
    if (options_.progress && (line_no & 16383) == 0) {
      options_.progress(bytes);
      bytes = 0;
    }
    if (finals) ++s.summary.lines_read;
    if (line.empty()) continue;
    const bool last = in.peek() == EOF;
    const std::string where = fmt::format("{}:{}", file.string(), line_no);
    auto interesting = [&](std::string_view key) {
      return finals ? key.starts_with(kFinalPrefix)
                    : !key.starts_with(kFinalPrefix) && s.wanted_tasks.count(std::string(task_of(key)));
    };
    const auto quick = fast_key(line);
    if (quick && !interesting(*quick)) continue;
    Json entry;
    try {
      entry = Json::parse(line);
    } catch (const Json::parse_error& e) {
      if (last) {
        if (finals) {
          warn(fmt::format("{}: the last line is not complete JSON (a writer stopped mid-line?); "
                           "skipped ({} bytes)",
                           where, line.size()));
        }
        continue;
      }
      return invalid_input(fmt::format("{}: not valid JSON: {}", where, e.what()));
    }
    if (!entry.is_object() || !entry.contains("key") || !entry["key"].is_string() ||
        !entry.contains("record") || entry.size() != 2) {
      return invalid_input(
          fmt::format("{}: expected {{\"key\": string, \"record\": object}}", where));
    }
    const std::string key = entry["key"].get<std::string>();
    if (!interesting(key)) continue;
    if (!seen_keys_.insert(s.manifest.sweep_id + "\n" + key).second) {
      ++s.summary.duplicates_dropped;
      continue;
    }
    if (finals) {
      ATREX_ASSIGN_OR_RETURN(FinalMarker m, final_marker_from_json(entry["record"], where));
      if (final_key(m.agent, m.op) != key) {
        return invalid_input(fmt::format(
            "{}: field \"record.agent\"/\"record.operator\": the marker says {} but its key is {}",
            where, final_key(m.agent, m.op), key));
      }
      add_final(s, std::move(m));
      continue;
    }
    ATREX_ASSIGN_OR_RETURN(EvalRecord r, eval_record_from_json(entry["record"], where));
    if (record_key(r.task_id, r.shape_id) != key) {
      return invalid_input(fmt::format(
          "{}: field \"record.task_id\"/\"record.shape_id\": the record says {} but its key is {}",
          where, record_key(r.task_id, r.shape_id), key));
    }
    add_record(s, std::move(r));
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
  ATREX_TRY(add_jsonl_pass(s, jsonl, true));
  ATREX_TRY(add_jsonl_pass(s, jsonl, false));
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
