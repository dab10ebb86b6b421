// The written suite (Atrex-Bench layout) and the coverage report (JSON and Markdown).
#include <cmath>

#include <fmt/format.h>

#include "atrex/ingest/ingest.h"
#include "atrex/problems/suite.h"

namespace atrex::ingest {
namespace fs = std::filesystem;

namespace {

double share(double part, double whole) { return whole > 0 ? part / whole : 0; }

Json phase_json(const PhaseTimes& t) {
  return {{"prefill", t[kPrefill]}, {"decode", t[kDecode]}, {"unknown", t[kUnknownPhase]}};
}

Result<void> write_json(const fs::path& file, const Json& j) {
  return write_text_file_atomic(file, j.dump(2) + "\n");
}

}  // namespace

Json coverage_json(const IngestResult& r, int top_unmapped) {
  Json j;
  j["schema"] = "atrex.ingest-coverage/1";
  j["rules"] = r.rules_file;
  j["applications"] = r.apps;
  j["gpu_time_us"] = r.gpu_us;
  j["kernels"] = r.kernels;
  j["mapped_gpu_time_us"] = r.mapped_us;
  j["mapped_share"] = share(r.mapped_us, r.gpu_us);
  j["unmapped_gpu_time_us"] = r.unmapped_us;
  j["unmapped_share"] = share(r.unmapped_us, r.gpu_us);
  j["phase_gpu_time_us"] = phase_json(r.phase_us);
  j["traces"] = Json::array();
  for (const auto& t : r.traces) {
    j["traces"].push_back({{"path", t.path},
                           {"application", t.app},
                           {"truncated", t.truncated},
                           {"truncation", t.truncation},
                           {"bytes_read", t.bytes_read},
                           {"repairs", t.repairs},
                           {"events", t.events},
                           {"events_skipped", t.events_skipped},
                           {"first_skip_reason", t.first_skip_reason},
                           {"kernels", t.kernels},
                           {"gpu_time_us", t.gpu_us},
                           {"graph_replayed_kernels", t.graph_kernels},
                           {"unlaunched_kernels", t.unlaunched_kernels},
                           {"ambiguous_correlation_joins", t.ambiguous_joins},
                           {"joins_by_device_map", t.joins_by_device_map},
                           {"joins_by_launch_lag", t.joins_by_lag},
                           {"ops_with_shapes", t.ops_with_shapes},
                           {"phase_gpu_time_us", phase_json(t.phase_us)}});
  }
  j["families"] = Json::object();
  for (const auto& [name, f] : r.families) {
    j["families"][name] = {{"gpu_time_us", f.gpu_us},
                           {"share", share(f.gpu_us, r.gpu_us)},
                           {"kernels", f.kernels},
                           {"phase_gpu_time_us", phase_json(f.phase_us)},
                           {"distinct_shapes", f.shapes.size()},
                           {"no_shape_gpu_time_us", f.no_shape_us},
                           {"no_shape_kernels", f.no_shape_kernels},
                           {"no_shape_reason", f.no_shape_reason},
                           {"traces", f.num_traces}};
  }
  j["suite"] = Json::array();
  for (const auto& op : r.suite) {
    j["suite"].push_back({{"operator", op.name},
                          {"weight", op.weight},
                          {"phase", op.phase},
                          {"shapes", op.shapes.size()},
                          {"covered_share", op.covered_share},
                          {"dropped_shapes", op.dropped_shapes},
                          {"first_drop_reason", op.first_drop_reason}});
  }
  j["report_only"] = r.report_only;
  j["unmapped_top"] = Json::array();
  for (size_t i = 0; i < r.unmapped.size() && static_cast<int>(i) < top_unmapped; ++i) {
    const auto& u = r.unmapped[i];
    j["unmapped_top"].push_back({{"kernel", u.name},
                                 {"gpu_time_us", u.gpu_us},
                                 {"share", share(u.gpu_us, r.gpu_us)},
                                 {"calls", u.calls},
                                 {"example_op", u.example_op}});
  }
  j["unmapped_distinct_kernels"] = r.unmapped.size();
  j["warnings"] = r.warnings;
  return j;
}

std::string coverage_markdown(const IngestResult& r, int top_unmapped) {
  std::string md = "# Trace coverage (atrex ingest)\n\n";
  md += fmt::format("{} trace(s), {} GPU kernels, {:.3f} ms GPU time; mapped to a family: "
                    "**{:.1f}%**; unmapped: {:.1f}% ({} distinct kernels). Rules: `{}`.\n\n",
                    r.traces.size(), r.kernels, r.gpu_us / 1e3, 100 * share(r.mapped_us, r.gpu_us),
                    100 * share(r.unmapped_us, r.gpu_us), r.unmapped.size(), r.rules_file);
  md += fmt::format("Phases: prefill {:.1f}%, decode {:.1f}%, unknown {:.1f}%.\n\n",
                    100 * share(r.phase_us[kPrefill], r.gpu_us), 100 * share(r.phase_us[kDecode], r.gpu_us),
                    100 * share(r.phase_us[kUnknownPhase], r.gpu_us));
  md += "## Traces\n\n| trace | app | kernels | GPU ms | graph-replayed | unlaunched | ambiguous ids | truncated |\n"
        "|---|---|---:|---:|---:|---:|---:|---|\n";
  for (const auto& t : r.traces) {
    md += fmt::format("| `{}` | {} | {} | {:.3f} | {} | {} | {} | {} |\n", fs::path(t.path).filename().string(),
                      t.app, t.kernels, t.gpu_us / 1e3, t.graph_kernels, t.unlaunched_kernels,
                      t.ambiguous_joins, t.truncated ? t.truncation : "no");
  }
  md += "\n## Families\n\n| family | GPU share | GPU ms | kernels | prefill ms | decode ms | shapes | "
        "no-shape ms | in suite |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n";
  std::vector<const FamilyStats*> fams;
  for (const auto& [n, f] : r.families) fams.push_back(&f);
  std::sort(fams.begin(), fams.end(), [](auto* a, auto* b) { return a->gpu_us > b->gpu_us; });
  for (const auto* f : fams) {
    bool in_suite = false;
    for (const auto& op : r.suite) in_suite = in_suite || op.name == f->name;
    md += fmt::format("| {} | {:.1f}% | {:.3f} | {} | {:.3f} | {:.3f} | {} | {:.3f} | {} |\n", f->name,
                      100 * share(f->gpu_us, r.gpu_us), f->gpu_us / 1e3, f->kernels,
                      f->phase_us[kPrefill] / 1e3, f->phase_us[kDecode] / 1e3, f->shapes.size(),
                      f->no_shape_us / 1e3, in_suite ? "yes" : "no");
  }
  md += "\n## Suite\n\n| operator | weight | phase | shapes | GPU time covered |\n|---|---:|---|---:|---:|\n";
  for (const auto& op : r.suite) {
    md += fmt::format("| {} | {:.4f} | {} | {} | {:.1f}% |\n", op.name, op.weight, op.phase,
                      op.shapes.size(), 100 * op.covered_share);
  }
  if (!r.report_only.empty()) {
    md += "\nMapped but not in the suite:\n\n";
    for (const auto& s : r.report_only) md += "- " + s + "\n";
  }
  md += fmt::format("\n## Top unmapped kernels\n\n| kernel | GPU share | GPU ms | calls | launched by |\n"
                    "|---|---:|---:|---:|---|\n");
  for (size_t i = 0; i < r.unmapped.size() && static_cast<int>(i) < top_unmapped; ++i) {
    const auto& u = r.unmapped[i];
    md += fmt::format("| `{}` | {:.2f}% | {:.3f} | {} | {} |\n", u.name.substr(0, 120),
                      100 * share(u.gpu_us, r.gpu_us), u.gpu_us / 1e3, u.calls,
                      u.example_op.empty() ? "-" : "`" + u.example_op + "`");
  }
  if (!r.warnings.empty()) {
    md += "\n## Warnings\n\n";
    for (const auto& w : r.warnings) md += "- " + w + "\n";
  }
  return md;
}

Result<void> write_suite(const IngestResult& r, const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error(fmt::format("{}: cannot create: {}", dir.string(), ec.message()));
  ATREX_TRY(write_json(dir / "coverage.json", coverage_json(r)));
  ATREX_TRY(write_text_file_atomic(dir / "coverage.md", coverage_markdown(r)));
  if (r.suite.empty()) {
    return invalid_input(fmt::format(
        "no suite operator: {} GPU kernels, none in a family atrex defines with a usable shape "
        "(coverage report: {})",
        r.kernels, (dir / "coverage.md").string()));
  }
  const fs::path data = dir / "data";
  if (fs::exists(data, ec)) {
    // A previous ingest's operators would stay without an importance entry: start clean.
    fs::remove_all(data, ec);
    if (ec) return io_error(fmt::format("{}: cannot replace: {}", data.string(), ec.message()));
  }
  fs::create_directories(data, ec);
  Json imp;
  std::vector<std::string> traces;
  for (const auto& t : r.traces) traces.push_back(t.path);
  imp["metadata"] = {{"num_profiles", r.traces.size()},
                     {"frameworks", {"pytorch-profiler"}},
                     {"generator", "atrex ingest (atrex.ingest-coverage/1)"},
                     {"applications", r.apps}};
  imp["operators"] = Json::object();
  for (const auto& op : r.suite) {
    imp["operators"][op.name] = {{"importance_score", op.weight},
                                 {"phase", op.phase},
                                 {"num_profiles", op.num_profiles}};
    const fs::path od = data / op.name;
    fs::create_directories(od, ec);
    if (ec) return io_error(fmt::format("{}: cannot create: {}", od.string(), ec.message()));
    Json shapes = Json::object(), roof = {{"shapes", Json::object()}}, meta;
    meta["source"] = "atrex ingest";
    meta["traces"] = traces;
    meta["family_gpu_time_us"] = r.families.at(op.name).gpu_us;
    meta["covered_share"] = op.covered_share;
    meta["shapes"] = Json::object();
    for (const auto& c : op.shapes) {
      Json entry = {{"input_kwargs", c.shape.input_kwargs}};
      if (!c.shape.init_kwargs.empty()) entry["init_kwargs"] = c.shape.init_kwargs;
      shapes[c.id] = std::move(entry);
      roof["shapes"][c.id] = c.roofline;
      meta["shapes"][c.id] = {{"gpu_time_us", c.shape.gpu_us},
                              {"calls", c.shape.calls},
                              {"phase_gpu_time_us", phase_json(c.shape.phase_us)}};
    }
    roof["source"] = "atrex analytic formulas (ingested suite: no traced counts)";
    ATREX_TRY(write_json(od / "shapes.json", shapes));
    ATREX_TRY(write_json(od / "roofline.json", roof));
    ATREX_TRY(write_json(od / "metadata.json", meta));
  }
  ATREX_TRY(write_json(data / "operator_importance.json", imp));
  // The release layout carries its hardware profiles (configs/hardware/*.yaml), which `roofline`
  // and sweeps look up in the suite folder: the bundled suite's are copied.
  const fs::path hw_from = problems::default_suite_dir() / "configs" / "hardware";
  const fs::path hw_to = dir / "configs" / "hardware";
  if (fs::exists(hw_from, ec)) {
    fs::create_directories(hw_to, ec);
    fs::copy(hw_from, hw_to, fs::copy_options::overwrite_existing | fs::copy_options::recursive, ec);
    if (ec) return io_error(fmt::format("{}: cannot copy hardware profiles: {}", hw_to.string(), ec.message()));
  }
  return ok();
}

}  // namespace atrex::ingest
