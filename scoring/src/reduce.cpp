#include "atrex/scoring/reduce.h"

#include <map>

#include "atrex/common/wire/eval_record.h"
#include "atrex/common/wire/final_marker.h"
#include "atrex/common/wire/keys.h"

namespace atrex::scoring {

Result<Report> reduce(const Manifest& manifest, ResultStore& store, const problems::Suite& suite,
                      const std::string& created_at) {
  std::vector<EvalRecord> finals;
  std::map<std::string, std::map<std::string, std::string>> failed;  // agent -> op -> reason
  std::map<std::string, TokenUsage> usage;                            // agent -> model usage
  for (const auto& agent : manifest.agent_names()) {
    for (const auto& op : manifest.operator_names()) {
      const std::string key = final_key(agent, op);
      ATREX_ASSIGN_OR_RETURN(auto stored, store.get(key));
      if (!stored) continue;
      ATREX_ASSIGN_OR_RETURN(FinalMarker fin, final_marker_from_json(*stored, "result " + key));
      usage[agent].add(fin.usage);
      if (fin.status != FinalStatus::kEvaluated) {
        failed[agent][op] = fin.error.empty() ? final_status_name(fin.status) : fin.error;
        continue;
      }
      for (const auto& shape : fin.shapes) {
        const std::string rkey = record_key(fin.task_id, shape);
        ATREX_ASSIGN_OR_RETURN(auto rec, store.get(rkey));
        if (!rec) continue;
        ATREX_ASSIGN_OR_RETURN(EvalRecord r, eval_record_from_json(*rec, "result " + rkey));
        finals.push_back(std::move(r));
      }
    }
  }
  Report report;
  report.context = ReportContext{manifest.sweep_id,
                                 manifest.name,
                                 manifest.suite,
                                 manifest.hardware.name,
                                 backend_name(manifest.backend),
                                 manifest.device,
                                 created_at};
  for (const auto& agent : manifest.agent_names()) {
    report.agents.push_back(score_agent(suite, agent, finals, failed[agent]));
    report.agents.back().usage = usage[agent];
  }
  return report;
}

Result<ReportFiles> write_report_files(const std::filesystem::path& dir, const Report& report) {
  ReportFiles files{dir / "report.json", dir / "report.md"};
  ATREX_TRY(write_text_file_atomic(files.json, to_json(report).dump(2)));
  ATREX_TRY(write_text_file_atomic(files.markdown, render_markdown(report)));
  return files;
}

}  // namespace atrex::scoring
