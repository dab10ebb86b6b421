#include "atrex/ingest/ingest.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "atrex/problems/operator.h"
#include "classify.h"
#include "join.h"

namespace atrex::ingest {
namespace fs = std::filesystem;

namespace {

// Which application each trace belongs to (index into `apps`). Exactly one, or kInvalidInput.
Result<std::vector<int>> assign_apps(const std::vector<fs::path>& traces, const Apps& apps) {
  std::vector<int> out;
  for (const auto& t : traces) {
    const std::string name = t.filename().string();
    int found = -1;
    for (size_t a = 0; a < apps.apps.size(); ++a) {
      for (const auto& g : apps.apps[a].traces) {
        if (fnmatch(g.c_str(), name.c_str(), 0) != 0 && fnmatch(g.c_str(), t.c_str(), 0) != 0) continue;
        if (found >= 0 && found != static_cast<int>(a)) {
          return invalid_input(fmt::format(
              "{}: trace \"{}\" matches the traces of both \"{}\" and \"{}\"", apps.file.string(),
              name, apps.apps[found].name, apps.apps[a].name));
        }
        found = static_cast<int>(a);
      }
    }
    if (found < 0) {
      return invalid_input(fmt::format("{}: trace \"{}\" matches no application's \"traces\"",
                                       apps.file.string(), name));
    }
    out.push_back(found);
  }
  return out;
}

struct Accumulator {
  IngestResult& result;
  const Rules& rules;
  size_t napps;
  std::unordered_map<std::string, UnmappedKernel> unmapped;
  std::unordered_map<std::string, std::map<std::string, int64_t>> no_shape_reasons;
  std::vector<PhaseTimes> app_phase_us;

  FamilyStats& family(const std::string& name) {
    auto& f = result.families[name];
    if (f.name.empty()) {
      f.name = name;
      f.app_phase_us.assign(napps, PhaseTimes{});
    }
    return f;
  }
};

void ingest_file(const TraceFile& file, const StringPool& names, int app, detail::Classifier& cls,
                 Accumulator& acc, TraceSummary& sum) {
  const detail::FileIndex idx = detail::build_index(file, names);
  cls.begin_file(file, idx);
  std::set<std::string> families_here;
  for (const auto& r : file.ranges) sum.ops_with_shapes += r.inputs >= 0;
  for (uint32_t k = 0; k < file.kernels.size(); ++k) {
    const GpuKernel& kern = file.kernels[k];
    const detail::KernelClass c = cls.classify(k);
    const double us = kern.dur_us;
    sum.gpu_us += us;
    ++sum.kernels;
    sum.phase_us[c.phase] += us;
    acc.app_phase_us[app][c.phase] += us;
    const int32_t call = idx.kernel_runtime[k];
    if (call >= 0 && idx.runtime_is_graph[call]) ++sum.graph_kernels;
    if (c.rule < 0) {
      auto& u = acc.unmapped[names.get(kern.name)];
      if (u.name.empty()) u.name = names.get(kern.name);
      u.gpu_us += us;
      ++u.calls;
      if (u.example_op.empty() && c.launch_op >= 0) u.example_op = names.get(file.ranges[c.launch_op].name);
      continue;
    }
    const std::string& fam_name = acc.rules.rules[c.rule].family;
    FamilyStats& fam = acc.family(fam_name);
    families_here.insert(fam_name);
    fam.gpu_us += us;
    ++fam.kernels;
    fam.phase_us[c.phase] += us;
    fam.app_phase_us[app][c.phase] += us;
    if (!c.shape->ok) {
      fam.no_shape_us += us;
      ++fam.no_shape_kernels;
      ++acc.no_shape_reasons[fam_name][c.shape->reason];
      continue;
    }
    ShapeTime& st = fam.shapes[c.shape->key];
    if (st.calls == 0) {
      st.init_kwargs = c.shape->init;
      st.input_kwargs = c.shape->input;
    }
    st.gpu_us += us;
    ++st.calls;
    st.phase_us[c.phase] += us;
  }
  for (const auto& f : families_here) ++acc.result.families[f].num_traces;
  sum.unlaunched_kernels = idx.unlaunched;
  sum.ambiguous_joins = idx.ambiguous;
  sum.joins_by_device_map = idx.by_device_map;
  sum.joins_by_lag = idx.by_lag;
}

std::string phase_label(const PhaseTimes& t) {
  const bool p = t[kPrefill] > 0, d = t[kDecode] > 0;
  if (p && !d) return "prefill";
  if (d && !p) return "decode";
  return "prefill/decode";
}

// Eq. 3 (ingest.h step 5). Weights over the suite's operators, normalised to 1.
void weigh(IngestResult& r, const Apps& apps, const std::vector<PhaseTimes>& app_phase_us) {
  double total = 0;
  for (auto& op : r.suite) {
    const FamilyStats& f = r.families.at(op.name);
    double w = 0;
    for (size_t a = 0; a < apps.apps.size(); ++a) {
      const App& app = apps.apps[a];
      const PhaseTimes& t = app_phase_us[a];
      const double t_all = t[0] + t[1] + t[2];
      if (!(t_all > 0)) continue;
      if (app.phase_share) {
        for (int p = 0; p < 2; ++p) {
          if (t[p] > 0) w += app.card_hours * (*app.phase_share)[p] * f.app_phase_us[a][p] / t[p];
        }
      } else {
        // The traces' own phase mix: pi_p = T_p / T, so the sum is T_f / T.
        for (int p = 0; p < kNumPhases; ++p) w += app.card_hours * f.app_phase_us[a][p] / t_all;
      }
    }
    op.weight = w;
    total += w;
  }
  for (auto& op : r.suite) op.weight = total > 0 ? op.weight / total : 0;
  std::stable_sort(r.suite.begin(), r.suite.end(),
                   [](const SuiteOperator& a, const SuiteOperator& b) { return a.weight > b.weight; });
  for (size_t a = 0; a < apps.apps.size(); ++a) {
    const auto& app = apps.apps[a];
    if (!app.phase_share) continue;
    for (int p = 0; p < 2; ++p) {
      if ((*app.phase_share)[p] > 0 && !(app_phase_us[a][p] > 0)) {
        r.warnings.push_back(fmt::format(
            "application \"{}\": apps.yaml gives {} a share of {}, but its traces have no {} GPU "
            "time: that share carries no weight",
            app.name, phase_name(p), (*app.phase_share)[p], phase_name(p)));
      }
    }
    if (app_phase_us[a][kUnknownPhase] > 0) {
      r.warnings.push_back(fmt::format(
          "application \"{}\": {:.1f} µs of GPU time has no phase (no step marker, no token "
          "count) and is not weighted under the apps.yaml phase mix",
          app.name, app_phase_us[a][kUnknownPhase]));
    }
  }
}

// Hot shapes of one native family, validated against the native operator.
SuiteOperator choose_shapes(const FamilyStats& f, const problems::OperatorDef& def,
                            const IngestOptions& o) {
  SuiteOperator op;
  op.name = f.name;
  op.phase = phase_label(f.phase_us);
  op.num_profiles = f.num_traces;
  std::vector<const ShapeTime*> order;
  double shaped_us = 0;
  for (const auto& [key, s] : f.shapes) {
    order.push_back(&s);
    shaped_us += s.gpu_us;
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const ShapeTime* a, const ShapeTime* b) { return a->gpu_us > b->gpu_us; });
  double chosen_us = 0;
  for (const ShapeTime* s : order) {
    if (static_cast<int>(op.shapes.size()) >= o.max_shapes) break;
    if (!op.shapes.empty() && chosen_us >= o.shape_coverage * shaped_us) break;
    problems::Shape shape;
    shape.id = std::to_string(op.shapes.size());
    shape.init_kwargs = s->init_kwargs;
    shape.input_kwargs = s->input_kwargs;
    shape.params = s->input_kwargs;
    for (auto& [k, v] : s->init_kwargs.items()) shape.params[k] = v;
    auto resolved = problems::resolve_shape(def, shape);
    if (!resolved) {
      ++op.dropped_shapes;
      if (op.first_drop_reason.empty()) op.first_drop_reason = resolved.error().message;
      continue;
    }
    const problems::RooflineCounts c = def.analytic(*resolved);
    Json roof = {{"semantic_W_flops", c.w_flops_by_dtype},
                 {"semantic_Q_read_bytes", c.q_read_bytes},
                 {"semantic_Q_write_bytes", c.q_write_bytes}};
    op.shapes.push_back({shape.id, *s, std::move(roof)});
    chosen_us += s->gpu_us;
  }
  op.covered_share = f.gpu_us > 0 ? chosen_us / f.gpu_us : 0;
  return op;
}

}  // namespace

Result<IngestResult> ingest(const IngestOptions& o) {
  if (o.traces.empty()) return invalid_input("ingest: no trace files given");
  if (!(o.shape_coverage > 0 && o.shape_coverage <= 1)) {
    return invalid_input(fmt::format("--shape-coverage {}: expected a share in (0, 1]", o.shape_coverage));
  }
  if (o.max_shapes < 1) return invalid_input(fmt::format("--max-shapes {}: expected >= 1", o.max_shapes));
  const fs::path rules_file = o.rules_file.empty() ? default_rules_file() : o.rules_file;
  ATREX_ASSIGN_OR_RETURN(Rules rules, load_rules(rules_file));
  Apps apps;
  if (o.apps_file) {
    ATREX_ASSIGN_OR_RETURN(apps, load_apps(*o.apps_file));
  } else {
    apps.apps.push_back(App{"all-traces", 1.0, {"*"}, std::nullopt});
  }
  ATREX_ASSIGN_OR_RETURN(std::vector<int> app_of, assign_apps(o.traces, apps));
  IngestResult r;
  r.rules_file = rules_file.string();
  for (const auto& a : apps.apps) r.apps.push_back(a.name);
  Accumulator acc{r, rules, apps.apps.size(), {}, {}, std::vector<PhaseTimes>(apps.apps.size())};
  for (size_t i = 0; i < o.traces.size(); ++i) {
    // One trace at a time: its records are freed before the next is read (bounded memory).
    TraceSet set;
    ATREX_TRY(read_trace(o.traces[i], set));
    const TraceFile& file = set.files.back();
    detail::Classifier file_cls(rules, set.names);
    TraceSummary sum;
    sum.path = file.path.string();
    sum.app = apps.apps[app_of[i]].name;
    sum.truncated = file.truncated;
    sum.truncation = file.truncation;
    sum.bytes_read = file.bytes_read;
    sum.repairs = file.repairs;
    sum.events = file.events_seen;
    sum.events_skipped = file.events_skipped;
    sum.first_skip_reason = file.first_skip_reason;
    ingest_file(file, set.names, app_of[i], file_cls, acc, sum);
    if (file.truncated) r.warnings.push_back(fmt::format("{}: truncated: {}", sum.path, file.truncation));
    if (sum.repairs > 0) {
      r.warnings.push_back(fmt::format("{}: {} invalid bytes or escapes in strings repaired",
                                       sum.path, sum.repairs));
    }
    r.traces.push_back(std::move(sum));
  }
  for (const auto& t : r.traces) {
    r.gpu_us += t.gpu_us;
    r.kernels += t.kernels;
    for (int p = 0; p < kNumPhases; ++p) r.phase_us[p] += t.phase_us[p];
  }
  for (auto& [name, u] : acc.unmapped) {
    r.unmapped_us += u.gpu_us;
    r.unmapped.push_back(std::move(u));
  }
  std::sort(r.unmapped.begin(), r.unmapped.end(), [](const UnmappedKernel& a, const UnmappedKernel& b) {
    return a.gpu_us != b.gpu_us ? a.gpu_us > b.gpu_us : a.name < b.name;
  });
  for (auto& [name, f] : r.families) {
    r.mapped_us += f.gpu_us;
    int64_t best = 0;
    for (const auto& [reason, n] : acc.no_shape_reasons[name]) {
      if (n > best) {
        best = n;
        f.no_shape_reason = reason;
      }
    }
    const bool report_only = std::find(rules.report_only.begin(), rules.report_only.end(), name) !=
                             rules.report_only.end();
    const problems::OperatorDef* def = problems::find_native_operator(name);
    if (report_only || def == nullptr) {
      r.report_only.push_back(fmt::format("{}: {}", name, report_only ? "listed in report_only"
                                                                       : "not an operator atrex defines"));
      continue;
    }
    SuiteOperator op = choose_shapes(f, *def, o);
    if (op.shapes.empty()) {
      r.report_only.push_back(fmt::format(
          "{}: no usable shape ({})", name,
          op.dropped_shapes > 0 ? "rejected by the operator: " + op.first_drop_reason
                                : "no kernel had shape data: " + f.no_shape_reason));
      continue;
    }
    r.suite.push_back(std::move(op));
  }
  weigh(r, apps, acc.app_phase_us);
  return r;
}

}  // namespace atrex::ingest
