// The reducer: from a sweep's stored results to its report (DESIGN.md §2 "results stream ->
// reducer"). Reads every (agent, operator)'s atrex.final/1 marker and the atrex.eval/1 records of
// its final evaluation from a result store (a results folder's results.jsonl, or Redis), scores
// them against the suite (aggregate.h) and writes report.json / report.md.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/result_store.h"
#include "atrex/common/wire/manifest.h"
#include "atrex/problems/suite.h"
#include "atrex/scoring/report.h"

namespace atrex::scoring {

// The report of `manifest`'s sweep from `store`. An (agent, operator) without a final marker
// counts as not attempted; one that ended without an evaluation (no correct candidate, an
// error) as attempted and incorrect, with its reason. Records of the final evaluation that are
// missing are left out. Errors: kInvalidInput for a stored marker or record that is not a valid
// atrex.final/1 / atrex.eval/1 (naming its key); the store's errors.
Result<Report> reduce(const Manifest& manifest, ResultStore& store, const problems::Suite& suite,
                      const std::string& created_at);

struct ReportFiles {
  std::filesystem::path json;      // <dir>/report.json
  std::filesystem::path markdown;  // <dir>/report.md
  std::filesystem::path html;      // <dir>/report.html (self-contained, SVG plots)
  std::filesystem::path junit;     // <dir>/junit.xml (one test case per agent x operator)
};
// Writes the report's renderings into `dir` (created when missing; atomically, each file).
Result<ReportFiles> write_report_files(const std::filesystem::path& dir, const Report& report);

}  // namespace atrex::scoring
