#include "atrex/common/wire/manifest.h"

#include <fmt/format.h>

#include "atrex/common/wire/reader.h"

namespace atrex {
namespace fs = std::filesystem;

namespace {

Json operator_plan_json(const OperatorPlan& o) {
  return Json{{"operator", o.name}, {"shapes", o.shapes}, {"quick_shapes", o.quick_shapes}};
}

Json local_worker_json(const LocalWorker& w) {
  return Json{{"name", w.name}, {"pid", w.pid}, {"args", w.args}, {"log", w.log}};
}

Json slurm_role_json(const SlurmRole& r) {
  return Json{{"role", r.role},
              {"job_ids", r.job_ids},
              {"ended_job_ids", r.ended_job_ids},
              {"tasks", r.tasks},
              {"workers_per_task", r.workers_per_task},
              {"partition", r.partition},
              {"gres", r.gres},
              {"script", r.script},
              {"sbatch", r.sbatch}};
}

}  // namespace

Result<void> read_value(const JsonField& f, OperatorPlan& o) {
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("operator", o.name));
  ATREX_TRY(r.required("shapes", o.shapes));
  ATREX_TRY(r.required("quick_shapes", o.quick_shapes));
  return r.finish();
}

Result<void> read_value(const JsonField& f, HardwareSummary& h) {
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("name", h.name));
  ATREX_TRY(r.required("p_peak", h.p_peak));
  ATREX_TRY(r.required("hbm_bytes_per_s", h.hbm_bytes_per_s));
  ATREX_TRY(r.required("source", h.source));
  return r.finish();
}

Result<void> read_value(const JsonField& f, LocalWorker& w) {
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("name", w.name));
  ATREX_TRY(r.required("pid", w.pid));
  ATREX_TRY(r.required("args", w.args));
  ATREX_TRY(r.required("log", w.log));
  return r.finish();
}

Result<void> read_value(const JsonField& f, SlurmRole& s) {
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("role", s.role));
  ATREX_TRY(r.required("job_ids", s.job_ids));
  ATREX_TRY(r.required("ended_job_ids", s.ended_job_ids));
  ATREX_TRY(r.required("tasks", s.tasks));
  ATREX_TRY(r.required("workers_per_task", s.workers_per_task));
  ATREX_TRY(r.required("partition", s.partition));
  ATREX_TRY(r.required("gres", s.gres));
  ATREX_TRY(r.required("script", s.script));
  ATREX_TRY(r.required("sbatch", s.sbatch));
  return r.finish();
}

Json to_json(const WorkersRecord& w) {
  if (w.launcher == Launcher::kSlurm) {
    Json roles = Json::array();
    for (const auto& r : w.roles) roles.push_back(slurm_role_json(r));
    return Json{{"launcher", "slurm"}, {"roles", roles}};
  }
  Json processes = Json::array();
  for (const auto& p : w.processes) processes.push_back(local_worker_json(p));
  return Json{{"launcher", "local"}, {"host", w.host}, {"processes", processes}};
}

Result<void> read_value(const JsonField& f, WorkersRecord& w) {
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("launcher", w.launcher));
  if (w.launcher == Launcher::kSlurm) {
    ATREX_TRY(r.required("roles", w.roles));
  } else {
    ATREX_TRY(r.required("host", w.host));
    ATREX_TRY(r.required("processes", w.processes));
  }
  return r.finish();
}

const char* sweep_status_name(SweepStatus s) {
  switch (s) {
    case SweepStatus::kRunning: return "running";
    case SweepStatus::kSubmitted: return "submitted";
    case SweepStatus::kInterrupted: return "interrupted";
    case SweepStatus::kCancelled: return "cancelled";
    case SweepStatus::kComplete: return "complete";
  }
  ATREX_UNREACHABLE("SweepStatus");
}

Result<void> read_value(const JsonField& f, SweepStatus& out) {
  return read_enum(f, out,
                   {SweepStatus::kRunning, SweepStatus::kSubmitted, SweepStatus::kInterrupted,
                    SweepStatus::kCancelled, SweepStatus::kComplete},
                   sweep_status_name, "running, submitted, interrupted, cancelled or complete");
}

bool BuildRecord::same_build(const BuildRecord& o) const {
  BuildRecord at_the_same_time = *this;
  at_the_same_time.recorded_at = o.recorded_at;
  return at_the_same_time == o;
}

Json to_json(const BuildRecord& b) {
  return Json{{"atrex_version", b.atrex_version},
              {"commit", b.commit},
              {"build_type", b.build_type},
              {"cxx_compiler", b.cxx_compiler},
              {"cxx_flags", b.cxx_flags},
              {"cuda_compiler", b.cuda_compiler},
              {"host", b.host},
              {"recorded_at", b.recorded_at},
              {"candidate_compiler", b.candidate_compiler},
              {"candidate_compiler_version", b.candidate_compiler_version},
              {"candidate_arch", b.candidate_arch},
              {"candidate_flags", b.candidate_flags}};
}

namespace {

std::string flags_line(const std::vector<std::string>& flags) {
  std::string out;
  for (const auto& f : flags) {
    if (f.rfind("-I", 0) == 0) continue;  // the staged include folder: a path, not a choice
    if (!out.empty()) out += ' ';
    out += f;
  }
  return out;
}

}  // namespace

std::string describe(const BuildRecord& b) {
  return fmt::format("atrex {} ({}, {}) on {}; candidates: {} [{}] {}", b.atrex_version, b.commit,
                     b.build_type.empty() ? "no build type" : b.build_type, b.host,
                     b.candidate_compiler_version, b.candidate_arch, flags_line(b.candidate_flags));
}

std::string candidate_compiler_difference(const BuildRecord& a, const BuildRecord& b) {
  std::vector<std::string> parts;
  if (a.candidate_compiler_version != b.candidate_compiler_version) {
    parts.push_back(fmt::format("candidate compiler \"{}\" vs \"{}\"", a.candidate_compiler_version,
                                b.candidate_compiler_version));
  }
  if (a.candidate_arch != b.candidate_arch) {
    parts.push_back(fmt::format("arch {} vs {}", a.candidate_arch, b.candidate_arch));
  }
  if (flags_line(a.candidate_flags) != flags_line(b.candidate_flags)) {
    parts.push_back(fmt::format("flags \"{}\" vs \"{}\"", flags_line(a.candidate_flags),
                                flags_line(b.candidate_flags)));
  }
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

Result<void> read_value(const JsonField& f, BuildRecord& out) {
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("atrex_version", out.atrex_version));
  ATREX_TRY(r.required("commit", out.commit));
  ATREX_TRY(r.required("build_type", out.build_type));
  ATREX_TRY(r.required("cxx_compiler", out.cxx_compiler));
  ATREX_TRY(r.required("cxx_flags", out.cxx_flags));
  ATREX_TRY(r.required("cuda_compiler", out.cuda_compiler));
  ATREX_TRY(r.required("host", out.host));
  ATREX_TRY(r.required("recorded_at", out.recorded_at));
  ATREX_TRY(r.required("candidate_compiler", out.candidate_compiler));
  ATREX_TRY(r.required("candidate_compiler_version", out.candidate_compiler_version));
  ATREX_TRY(r.required("candidate_arch", out.candidate_arch));
  ATREX_TRY(r.required("candidate_flags", out.candidate_flags));
  return r.finish();
}

std::vector<std::string> Manifest::agent_names() const {
  std::vector<std::string> out;
  for (const auto& a : agents) out.push_back(a.name);
  return out;
}

std::vector<std::string> Manifest::operator_names() const {
  std::vector<std::string> out;
  for (const auto& o : operators) out.push_back(o.name);
  return out;
}

Json to_json(const Manifest& m) {
  Json ops = Json::array();
  for (const auto& o : m.operators) ops.push_back(operator_plan_json(o));
  Json agents = Json::array();
  for (const auto& a : m.agents) agents.push_back(to_json(a));
  Json j{{"schema", kManifestSchema},
         {"sweep_id", m.sweep_id},
         {"name", m.name},
         {"source", m.source},
         {"spec", m.spec},
         {"suite", m.suite},
         {"backend", backend_name(m.backend)},
         {"device", m.device},
         {"hardware", Json{{"name", m.hardware.name},
                           {"p_peak", m.hardware.p_peak},
                           {"hbm_bytes_per_s", m.hardware.hbm_bytes_per_s},
                           {"source", m.hardware.source}}},
         {"agents", agents},
         {"operators", ops},
         {"not_covered", m.not_covered},
         {"evaluation", to_json(m.evaluation)},
         {"quick_evaluation", to_json(m.quick_evaluation)},
         {"output", m.output},
         {"status", sweep_status_name(m.status)}};
  auto opt = [&](const char* key, const std::optional<std::string>& v) {
    if (v) j[key] = *v;
  };
  opt("launcher", m.launcher);
  opt("started_at", m.started_at);
  opt("submitted_at", m.submitted_at);
  opt("resumed_at", m.resumed_at);
  opt("cancelled_at", m.cancelled_at);
  opt("finished_at", m.finished_at);
  opt("redis_url", m.redis_url);
  opt("redis", m.redis);
  if (m.cluster) j["cluster"] = to_json(*m.cluster);
  if (m.workers) j["workers"] = to_json(*m.workers);
  if (!m.builds.empty()) {
    Json builds = Json::array();
    for (const auto& b : m.builds) builds.push_back(to_json(b));
    j["builds"] = builds;
  }
  return j;
}

Result<Manifest> manifest_from_json(const Json& j, const std::string& source) {
  Manifest m;
  auto settings = [](const JsonField& s) {
    return eval_settings_from_json(s, {}, Completeness::kComplete);
  };
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(JsonField(j, source)));
  ATREX_TRY(r.schema(kManifestSchema));
  ATREX_TRY(r.required("sweep_id", m.sweep_id));
  ATREX_TRY(r.required("name", m.name));
  ATREX_TRY(r.required("source", m.source));
  ATREX_TRY(r.required("spec", m.spec));
  ATREX_TRY(r.required("suite", m.suite));
  ATREX_TRY(r.required("backend", m.backend));
  ATREX_TRY(r.required("device", m.device));
  ATREX_TRY(r.required("hardware", m.hardware));
  ATREX_TRY(r.required("agents", m.agents));
  ATREX_TRY(r.required("operators", m.operators));
  ATREX_TRY(r.required("not_covered", m.not_covered));
  ATREX_TRY(r.required("evaluation", m.evaluation, settings));
  ATREX_TRY(r.required("quick_evaluation", m.quick_evaluation, settings));
  ATREX_TRY(r.required("output", m.output));
  ATREX_TRY(r.required("status", m.status));
  ATREX_TRY(r.optional("launcher", m.launcher));
  ATREX_TRY(r.optional("started_at", m.started_at));
  ATREX_TRY(r.optional("submitted_at", m.submitted_at));
  ATREX_TRY(r.optional("resumed_at", m.resumed_at));
  ATREX_TRY(r.optional("cancelled_at", m.cancelled_at));
  ATREX_TRY(r.optional("finished_at", m.finished_at));
  ATREX_TRY(r.optional("redis_url", m.redis_url));
  ATREX_TRY(r.optional("redis", m.redis));
  ATREX_TRY(r.optional("cluster", m.cluster, [](const JsonField& c) {
    return cluster_options_from_json(c, {}, Completeness::kComplete);
  }));
  ATREX_TRY(r.optional("workers", m.workers));
  ATREX_TRY(r.optional("builds", m.builds));
  ATREX_TRY(r.finish());
  return m;
}

Result<Manifest> read_manifest_file(const fs::path& dir) {
  const fs::path file = dir / "manifest.json";
  auto j = read_json_file(file);
  if (!j) return tl::unexpected(with_context(j.error(), "not a sweep results folder"));
  return manifest_from_json(*j, file.string());
}

Result<void> write_manifest_file(const fs::path& dir, const Manifest& m) {
  return write_text_file_atomic(dir / "manifest.json", to_json(m).dump(2));
}

}  // namespace atrex
