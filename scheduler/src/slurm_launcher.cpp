// The `slurm` launcher (docs/sweeps.md "Cluster sweeps"): two sbatch job arrays of long-lived
// workers that pull from Redis — runners (cuda/hip sweeps: the GPU partition, --gres=gpu:N and
// one runner per GPU; cpu sweeps: the CPU partition, no gres) and agent workers (CPU partition).
// Slurm is not the task queue: arrays are few and long-lived (MaxArraySize is 1001 by default).
// The job script is deploy/slurm/worker.sbatch, compiled in; it handles --signal=B:USR1@120 and
// --requeue. State comes from one batched `squeue` call (slurmctld keeps finished jobs for
// MinJobAge); `sacct` only adds detail when it exists and accounting is enabled.
//
// The manifest's workers object:
//   {"launcher": "slurm", "roles": [{"role": "runner", "job_ids": ["12"], "ended_job_ids": [],
//     "tasks": 2, "workers_per_task": 1, "partition": "cpu", "gres": "", "script":
//     ".../runner.sbatch", "sbatch": [argv of the last submission]}, {"role": "agent-worker",
//     ...}]}
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "atrex/common/embedded.h"
#include "atrex/problems/suite.h"
#include "atrex/common/process/subprocess.h"
#include "atrex/scheduler/launcher.h"

namespace atrex::scheduler {
namespace slurm_data {
std::span<const EmbeddedFile> embedded_files();
}

namespace fs = std::filesystem;

namespace {

// Runs a Slurm client command; output is stdout and stderr together.
Result<SubprocessResult> slurm_command(std::vector<std::string> argv) {
  SubprocessOptions o;
  o.argv = std::move(argv);
  o.timeout = std::chrono::seconds(60);
  o.output_tail_bytes = 1 << 20;
  ATREX_ASSIGN_OR_RETURN(SubprocessResult r, run_subprocess(o));
  if (!r.started) {
    return make_error(
        ErrorCode::kUnavailable,
        fmt::format(
            "{} not found: --launcher slurm needs the Slurm client commands (sbatch, squeue, "
            "scancel) on this machine's PATH",
            o.argv.front()));
  }
  return r;
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

tl::unexpected<Error> slurm_failed(const std::string& what, const SubprocessResult& r) {
  std::string hint;
  if (r.output_tail.find("Unable to contact slurm controller") != std::string::npos ||
      r.output_tail.find("Connection refused") != std::string::npos) {
    hint =
        " (is SLURM_CONF right and slurmctld up? for the local test cluster: "
        "deploy/cluster-in-a-box.sh start, "
        "then eval \"$(deploy/cluster-in-a-box.sh env)\")";
  }
  return make_error(ErrorCode::kUnavailable, fmt::format("{} failed ({}): {}{}", what, r.describe(),
                                                         trimmed(r.output_tail), hint));
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

Result<std::string> job_template(const ClusterOptions& o) {
  if (!o.job_template.empty()) return read_text_file(o.job_template);
  auto f = find_embedded(slurm_data::embedded_files(), "worker.sbatch");
  if (!f) return internal_error("the embedded deploy/slurm/worker.sbatch is missing");
  return std::string(*f);
}

Result<std::string> render(std::string text, const std::map<std::string, std::string>& values,
                           const std::string& source) {
  for (const auto& [name, value] : values) {
    const std::string token = "@" + name + "@", quoted = shell_quote(value);
    for (size_t at = text.find(token); at != std::string::npos;
         at = text.find(token, at + quoted.size())) {
      text.replace(at, token.size(), quoted);
    }
  }
  if (text.rfind("#!", 0) != 0)
    return invalid_input(fmt::format("{}: a job script must start with #!", source));
  return text;
}

// What one array runs: derived from the sweep's backend and the options.
struct ArrayPlan {
  std::string role;  // runner | agent-worker
  int tasks = 1;
  int workers_per_task = 1;
  std::string partition;
  std::string gres;
};

std::vector<ArrayPlan> plans_for(const Manifest& manifest, const ClusterOptions& o) {
  const bool gpu_backend = is_gpu_backend(manifest.backend);
  ArrayPlan runner{"runner", o.runners, gpu_backend ? o.gpus_per_runner : 1,
                   gpu_backend ? o.gpu_partition : o.cpu_partition,
                   gpu_backend ? fmt::format("gpu:{}", o.gpus_per_runner) : ""};
  ArrayPlan agent{"agent-worker", o.agent_workers, 1, o.cpu_partition, ""};
  return {runner, agent};
}

// Writes the role's job script and submits an array of `count` tasks; returns the job id.
Result<std::pair<std::string, std::vector<std::string>>> submit_array(const Manifest& manifest,
                                                                      const ClusterOptions& o,
                                                                      const RedisEndpoint& redis,
                                                                      const ArrayPlan& p,
                                                                      int count) {
  if (count < 1)
    return invalid_input(fmt::format("slurm: the {} array needs at least one task", p.role));
  const fs::path out = manifest.output;
  const std::string& id = manifest.sweep_id;
  const fs::path atrex = o.atrex.empty() ? problems::executable_dir() / "atrex" : o.atrex;
  std::error_code ec;
  fs::create_directories(out / "slurm", ec);
  fs::create_directories(out / "logs" / "slurm", ec);
  if (ec)
    return io_error(
        fmt::format("{}: cannot create the slurm folders: {}", out.string(), ec.message()));
  ATREX_ASSIGN_OR_RETURN(std::string tpl, job_template(o));
  ATREX_ASSIGN_OR_RETURN(
      std::string script_text,
      render(tpl,
             {{"ROLE", p.role},
              {"ATREX", fs::absolute(atrex).string()},
              {"REDIS_URL", redis.to_url()},
              {"SWEEP_ID", id},
              {"WORKERS_PER_TASK", std::to_string(p.workers_per_task)},
              {"LOG_DIR", (out / "logs").string()}},
             o.job_template.empty() ? "deploy/slurm/worker.sbatch" : o.job_template.string()));
  const fs::path script = out / "slurm" / (p.role + ".sbatch");
  ATREX_TRY(write_text_file_atomic(script, script_text));
  fs::permissions(script, fs::perms::owner_all, ec);  // it holds the Redis URL

  std::vector<std::string> args = {
      "sbatch",
      "--parsable",
      fmt::format("--job-name=atrex-{}-{}", p.role, id),
      o.array_throttle > 0 ? fmt::format("--array=0-{}%{}", count - 1, o.array_throttle)
                           : fmt::format("--array=0-{}", count - 1),
      "--time=" + o.time_limit,
      "--chdir=" + fs::current_path().string(),
      "--output=" + (out / "logs" / "slurm" / "%x-%A_%a.out").string()};
  if (!p.partition.empty()) args.push_back("--partition=" + p.partition);
  if (!p.gres.empty()) args.push_back("--gres=" + p.gres);
  args.insert(args.end(), o.sbatch_args.begin(), o.sbatch_args.end());
  args.push_back(script.string());
  ATREX_ASSIGN_OR_RETURN(SubprocessResult r, slurm_command(args));
  if (!r.ok()) return slurm_failed(fmt::format("sbatch of the {} array", p.role), r);
  // --parsable prints "<job id>[;<cluster>]" (after any warnings).
  std::string job = trimmed(r.output_tail);
  job = job.substr(job.find_last_of('\n') == std::string::npos ? 0 : job.find_last_of('\n') + 1);
  job = job.substr(0, job.find(';'));
  if (job.empty() || job.find_first_not_of("0123456789") != std::string::npos) {
    return internal_error(fmt::format("sbatch printed no job id: {}", trimmed(r.output_tail)));
  }
  return std::pair{job, args};
}

Result<void> scancel(const std::vector<std::string>& job_ids) {
  if (job_ids.empty()) return ok();
  std::vector<std::string> args = {"scancel"};
  args.insert(args.end(), job_ids.begin(), job_ids.end());
  ATREX_ASSIGN_OR_RETURN(SubprocessResult r, slurm_command(args));
  // Jobs that already ended are not an error: they are stopped.
  if (!r.ok() && r.output_tail.find("Invalid job id") == std::string::npos &&
      r.output_tail.find("already completing or completed") == std::string::npos) {
    return slurm_failed("scancel", r);
  }
  return ok();
}

// Every array task of `job_ids` that slurmctld still knows, with its state, from one squeue call.
struct TaskState {
  std::string job;   // the array's job id
  std::string task;  // array index ("N/A" for a plain job)
  std::string state;
};

Result<std::vector<TaskState>> squeue(const std::vector<std::string>& job_ids) {
  if (job_ids.empty()) return std::vector<TaskState>{};
  ATREX_ASSIGN_OR_RETURN(
      SubprocessResult r,
      slurm_command({"squeue", "--noheader", "--array", "--states=all",
                     "--jobs=" + fmt::format("{}", fmt::join(job_ids, ",")), "--format=%F|%K|%T"}));
  // Every id purged (older than MinJobAge) is an error for squeue; it means "none left".
  if (!r.ok() && r.output_tail.find("Invalid job id") == std::string::npos)
    return slurm_failed("squeue", r);
  std::vector<TaskState> out;
  std::istringstream in(r.output_tail);
  for (std::string line; std::getline(in, line);) {
    const auto a = line.find('|'), b = line.rfind('|');
    if (a == std::string::npos || a == b) continue;  // not a data line (a warning)
    out.push_back({line.substr(0, a), line.substr(a + 1, b - a - 1), trimmed(line.substr(b + 1))});
  }
  return out;
}

bool alive_state(const std::string& s) {
  static const std::set<std::string> kAlive = {"PENDING",  "CONFIGURING", "RUNNING",
                                               "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
                                               "RESIZING", "SUSPENDED",   "SIGNALING"};
  return kAlive.count(s) > 0;
}

std::vector<std::string> all_job_ids(const WorkersRecord& workers) {
  std::vector<std::string> ids;
  for (const auto& role : workers.roles)
    ids.insert(ids.end(), role.job_ids.begin(), role.job_ids.end());
  return ids;
}

// Final states of jobs squeue no longer lists, from sacct when it is there and working.
std::map<std::string, std::string> sacct_states(const std::vector<std::string>& job_ids) {
  std::map<std::string, std::string> out;
  if (job_ids.empty()) return out;
  auto r =
      slurm_command({"sacct", "--noheader", "--allocations", "--parsable2", "--format=JobID,State",
                     "--jobs=" + fmt::format("{}", fmt::join(job_ids, ","))});
  if (!r || !r->ok()) return out;  // absent, or "accounting storage is disabled"
  std::istringstream in(r->output_tail);
  for (std::string line; std::getline(in, line);) {
    const auto bar = line.find('|');
    if (bar == std::string::npos) continue;
    const std::string id = line.substr(0, line.find_first_of("_|"));
    out[id] += (out[id].empty() ? "" : ",") + line.substr(bar + 1);
  }
  return out;
}

class SlurmLauncher final : public WorkerLauncher {
 public:
  Result<WorkersRecord> launch(const Manifest& manifest, const ClusterOptions& o,
                               const RedisEndpoint& redis, const ProgressFn& say) override {
    WorkersRecord w{Launcher::kSlurm, "", {}, {}};
    std::vector<std::string> submitted;
    for (const ArrayPlan& p : plans_for(manifest, o)) {
      auto job = submit_array(manifest, o, redis, p, p.tasks);
      if (!job) {
        // No half-started sweep; the submit error is the one to report.
        if (auto c = scancel(submitted); !c) {
          spdlog::warn("slurm: cancelling the arrays already submitted: {}", c.error().message);
        }
        return tl::unexpected(job.error());
      }
      submitted.push_back(job->first);
      w.roles.push_back(
          SlurmRole{p.role,
                    {job->first},
                    {},
                    p.tasks,
                    p.workers_per_task,
                    p.partition,
                    p.gres,
                    (fs::path(manifest.output) / "slurm" / (p.role + ".sbatch")).string(),
                    job->second});
      if (say) {
        say(fmt::format(
            "slurm: {} array job {} ({} task(s){}{}{})", p.role, job->first, p.tasks,
            p.partition.empty() ? "" : ", partition " + p.partition,
            p.gres.empty() ? "" : ", gres " + p.gres,
            o.array_throttle > 0 ? fmt::format(", at most {} at once", o.array_throttle) : ""));
      }
    }
    return w;
  }

  std::pair<int, std::string> alive(const WorkersRecord& workers) override {
    auto states = squeue(all_job_ids(workers));
    if (!states) return {-1, "cannot query Slurm: " + states.error().message};
    int alive_total = 0;
    std::vector<std::string> parts;
    for (const auto& role : workers.roles) {
      int alive = 0;
      std::map<std::string, int> by_state;
      std::vector<std::string> gone;
      for (const auto& id : role.job_ids) {
        bool listed = false;
        for (const auto& t : *states) {
          if (t.job != id) continue;
          listed = true;
          ++by_state[t.state];
          if (alive_state(t.state)) ++alive;
        }
        if (!listed) gone.push_back(id);
      }
      std::string detail;
      for (const auto& [state, n] : by_state)
        detail += fmt::format("{}{} {}", detail.empty() ? "" : ", ", n, state);
      for (const auto& [id, st] : sacct_states(gone))
        detail += fmt::format("{}job {}: {}", detail.empty() ? "" : ", ", id, st);
      if (detail.empty() && !gone.empty()) detail = "ended";
      parts.push_back(fmt::format("{} {}/{} alive (job {}: {})", role.role, alive, role.tasks,
                                  fmt::join(role.job_ids, ","), detail));
      alive_total += alive;
    }
    return {alive_total, "slurm: " + fmt::format("{}", fmt::join(parts, "; "))};
  }

  Result<void> stop(const WorkersRecord& workers) override { return scancel(all_job_ids(workers)); }

  Result<WorkersRecord> revive(const Manifest& manifest, const ClusterOptions& o,
                               const RedisEndpoint& redis, const ProgressFn& say) override {
    if (!manifest.workers || manifest.workers->launcher != Launcher::kSlurm) {
      return launch(manifest, o, redis, say);
    }
    WorkersRecord workers = *manifest.workers;
    ATREX_ASSIGN_OR_RETURN(std::vector<TaskState> states, squeue(all_job_ids(workers)));
    const auto plans = plans_for(manifest, o);
    for (auto& role : workers.roles) {
      const auto plan = std::find_if(plans.begin(), plans.end(),
                                     [&](const ArrayPlan& p) { return p.role == role.role; });
      if (plan == plans.end()) {
        return internal_error(
            fmt::format("slurm: unknown worker role \"{}\" in the manifest", role.role));
      }
      int alive = 0;
      std::vector<std::string> still;
      for (const auto& id : role.job_ids) {
        const int n =
            static_cast<int>(std::count_if(states.begin(), states.end(), [&](const TaskState& t) {
              return t.job == id && alive_state(t.state);
            }));
        alive += n;
        (n > 0 ? still : role.ended_job_ids).push_back(id);
      }
      role.job_ids = still;
      if (alive >= role.tasks) continue;
      ATREX_ASSIGN_OR_RETURN(auto job, submit_array(manifest, o, redis, *plan, role.tasks - alive));
      role.job_ids.push_back(job.first);
      role.sbatch = job.second;
      if (say) {
        say(fmt::format("slurm: {} of {} {} task(s) had ended; new array job {}",
                        role.tasks - alive, role.tasks, role.role, job.first));
      }
    }
    return workers;
  }
};

}  // namespace

std::unique_ptr<WorkerLauncher> make_slurm_launcher() { return std::make_unique<SlurmLauncher>(); }

}  // namespace atrex::scheduler
