#include "atrex/common/wire/cluster_options.h"

#include <fmt/format.h>

#include "atrex/common/wire/reader.h"

namespace atrex {

const char* launcher_name(Launcher l) {
  switch (l) {
    case Launcher::kLocal: return "local";
    case Launcher::kSlurm: return "slurm";
  }
  ATREX_UNREACHABLE("Launcher");
}

Result<void> read_value(const JsonField& f, Launcher& out) {
  return read_enum(f, out, {Launcher::kLocal, Launcher::kSlurm}, launcher_name, "local or slurm");
}

Json to_json(const ClusterOptions& o) {
  return Json{{"launcher", launcher_name(o.launcher)},
              {"runners", o.runners},
              {"agent_workers", o.agent_workers},
              {"gpus_per_runner", o.gpus_per_runner},
              {"gpu_partition", o.gpu_partition},
              {"cpu_partition", o.cpu_partition},
              {"time_limit", o.time_limit},
              {"array_throttle", o.array_throttle},
              {"sbatch_args", o.sbatch_args},
              {"job_template", o.job_template.string()},
              {"atrex", o.atrex.string()},
              {"lease_timeout_s", o.lease_timeout_s},
              {"max_deliveries", o.max_deliveries},
              {"prefetch", o.prefetch},
              {"metrics", o.metrics},
              {"metrics_targets", o.metrics_targets.string()},
              {"sandbox", sandbox_mode_name(o.sandbox)}};
}

namespace {

template <class T>
Result<void> member(ObjectReader& r, Completeness c, const char* key, T& out) {
  return c == Completeness::kComplete ? r.required(key, out) : r.optional(key, out);
}

Result<void> int_member(ObjectReader& r, Completeness c, const char* key, int& out, int lo,
                        int hi) {
  ATREX_TRY(member(r, c, key, out));
  if (r.has(key) && (out < lo || out > hi)) {
    ATREX_ASSIGN_OR_RETURN(JsonField child, r.field().at(key));
    return child.fail(fmt::format("expected an integer in [{}, {}]", lo, hi));
  }
  return ok();
}

Result<void> path_member(ObjectReader& r, Completeness c, const char* key,
                         std::filesystem::path& out) {
  std::string s = out.string();
  ATREX_TRY(member(r, c, key, s));
  out = s;
  return ok();
}

}  // namespace

Result<ClusterOptions> cluster_options_from_json(const JsonField& f, const ClusterOptions& base,
                                                 Completeness c) {
  ClusterOptions o = base;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(member(r, c, "launcher", o.launcher));
  ATREX_TRY(int_member(r, c, "runners", o.runners, 1, 100000));
  ATREX_TRY(int_member(r, c, "agent_workers", o.agent_workers, 1, 100000));
  ATREX_TRY(int_member(r, c, "gpus_per_runner", o.gpus_per_runner, 1, 64));
  ATREX_TRY(member(r, c, "gpu_partition", o.gpu_partition));
  ATREX_TRY(member(r, c, "cpu_partition", o.cpu_partition));
  ATREX_TRY(member(r, c, "time_limit", o.time_limit));
  ATREX_TRY(int_member(r, c, "array_throttle", o.array_throttle, 0, 100000));
  ATREX_TRY(member(r, c, "sbatch_args", o.sbatch_args));
  ATREX_TRY(path_member(r, c, "job_template", o.job_template));
  ATREX_TRY(path_member(r, c, "atrex", o.atrex));
  ATREX_TRY(int_member(r, c, "lease_timeout_s", o.lease_timeout_s, 3, 86400));
  ATREX_TRY(int_member(r, c, "max_deliveries", o.max_deliveries, 1, 100));
  ATREX_TRY(int_member(r, c, "prefetch", o.prefetch, 0, 16));
  ATREX_TRY(member(r, c, "metrics", o.metrics));
  ATREX_TRY(path_member(r, c, "metrics_targets", o.metrics_targets));
  // Optional even in a manifest: one written before the member existed ran sandboxed.
  ATREX_TRY(r.optional("sandbox", o.sandbox));
  ATREX_TRY(r.finish());
  return o;
}

}  // namespace atrex
