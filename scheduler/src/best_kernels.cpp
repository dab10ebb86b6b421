#include "atrex/scheduler/best_kernels.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "atrex/agent/audit_trail.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/kernel_index.h"

namespace atrex::scheduler {
namespace fs = std::filesystem;

namespace {

// A name used as one path component: never a way out of the kernels folder.
bool plain_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\0') == std::string::npos;
}

}  // namespace

Result<int> export_best_kernels(const fs::path& results_dir, const fs::path& out,
                                const scoring::Report& report) {
  KernelIndex index;
  index.sweep_id = report.context.sweep_id;
  ATREX_ASSIGN_OR_RETURN(index.backend, parse_backend(report.context.backend));
  for (const auto& a : report.agents) {
    for (const auto& op : a.operators) {
      if (!op.attempted || op.candidate_sha256.empty()) continue;
      if (!plain_name(a.agent) || !plain_name(op.name)) {
        return invalid_input(fmt::format("best kernels: agent \"{}\" / operator \"{}\" is not a "
                                         "plain file name", a.agent, op.name));
      }
      const fs::path trail = results_dir / "audit" / a.agent / (op.name + ".jsonl");
      std::error_code ec;
      if (!fs::exists(trail, ec)) continue;
      ATREX_ASSIGN_OR_RETURN(auto found,
                             agent::read_evaluated_candidate(trail, op.candidate_sha256));
      if (!found) {
        spdlog::warn("best kernels: {} holds no evaluation of {} ({} {}); not exported",
                     trail.string(), op.candidate_sha256.substr(0, 12), a.agent, op.name);
        continue;
      }
      std::string file_name = fs::path(found->file_name).filename().string();
      if (!plain_name(file_name)) file_name = "candidate" + fs::path(found->file_name).extension().string();
      const fs::path rel = fs::path("kernels") / a.agent / op.name / file_name;
      fs::create_directories(out / rel.parent_path(), ec);
      if (ec) return io_error(fmt::format("{}: {}", (out / rel.parent_path()).string(), ec.message()));
      ATREX_TRY(write_text_file_atomic(out / rel, found->source));
      index.kernels.push_back(
          KernelIndexEntry{a.agent, op.name, rel.string(), op.candidate_sha256, op.s_i});
    }
  }
  std::error_code ec;
  fs::create_directories(out / "kernels", ec);
  if (ec) return io_error(fmt::format("{}: {}", (out / "kernels").string(), ec.message()));
  ATREX_TRY(write_text_file_atomic(out / "kernels" / "index.json", to_json(index).dump(2) + "\n"));
  return static_cast<int>(index.kernels.size());
}

}  // namespace atrex::scheduler
