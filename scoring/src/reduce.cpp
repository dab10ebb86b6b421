#include "atrex/scoring/reduce.h"

#include "atrex/scoring/reducer.h"
#include "atrex/scoring/render.h"

namespace atrex::scoring {

Result<Report> reduce(const Manifest& manifest, ResultStore& store, const problems::Suite& suite,
                      const std::string& created_at) {
  Reducer reducer(suite);
  ATREX_TRY(reducer.add_store(manifest, store, manifest.output));
  return reducer.finish(created_at);
}

Result<ReportFiles> write_report_files(const std::filesystem::path& dir, const Report& report) {
  ReportFiles files{dir / "report.json", dir / "report.md", dir / "report.html",
                    dir / "junit.xml"};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  ATREX_TRY(write_text_file_atomic(files.json, to_json(report).dump(2)));
  ATREX_TRY(write_text_file_atomic(files.markdown, render_markdown(report)));
  ATREX_TRY(write_text_file_atomic(files.html, render_html(report)));
  ATREX_TRY(write_text_file_atomic(files.junit, render_junit(report)));
  return files;
}

}  // namespace atrex::scoring
