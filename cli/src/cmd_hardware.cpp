// `atrex roofline` (evaluator side: reads the hidden roofline counts) and `atrex hardware`.
#include <cctype>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "atrex/problems/hardware.h"
#include "atrex/runner/evaluator.h"
#include "atrex/runner/gpu_measure.h"
#include "atrex/runner/host_measure.h"
#include "atrex/problems/roofline.h"
#include "atrex/problems/roofline_audit.h"
#include "cli.h"

namespace atrex::cli {
namespace {

double peak(const problems::HardwareProfile& p, const char* path) {
  auto it = p.p_peak_flops_per_s.find(path);
  return it == p.p_peak_flops_per_s.end() ? 0.0 : it->second;
}

int roofline(const GlobalOptions& g, const std::string& hw_name, const std::string& op_name) {
  auto suite = load_suite(g);
  if (!suite) return fail(suite.error());
  if (!op_name.empty()) {
    if (auto op = suite->require(op_name); !op) return fail(op.error());
  }
  // host-cpu is this machine's measured profile, as the evaluator scores the cpu backend with:
  // read from the cache, measured now when there is none for this CPU.
  auto hw = hw_name == "host-cpu" ? runner::cached_host_profile()
                                  : [&]() -> Result<problems::HardwareProfile> {
    ATREX_ASSIGN_OR_RETURN(auto profiles, problems::load_default_hardware_profiles(suite->dir()));
    return problems::find_hardware_profile(profiles, hw_name);
  }();
  if (!hw) return fail(hw.error());
  Json rows = Json::array();
  if (!g.json) {
    fmt::print(
        "hardware {}: HBM {:.2f} TB/s, bf16 {:.0f} TFLOP/s, fp8 {:.0f} TFLOP/s, fp32 {:.1f} "
        "TFLOP/s\n",
        hw->name, hw->hbm_bytes_per_s / 1e12, peak(*hw, "bf16_tc") / 1e12,
        peak(*hw, "fp8_e4m3_tc") / 1e12, peak(*hw, "fp32_strict") / 1e12);
    if (hw_name == "host-cpu") fmt::print("  {} (kept in {})\n", hw->source_doc, hw->file.string());
    fmt::print("{:<28} {:>5} {:>12} {:>11} {:>11} {:>11} {:>12}  {}\n", "operator", "shape",
               "W (GFLOP)", "Q (MB)", "T_comp us", "T_mem us", "T_roofline", "bound");
  }
  for (const auto& op : suite->operators()) {
    if (!op_name.empty() && op.name != op_name) continue;
    for (const auto& s : op.shapes) {
      auto counts = suite->roofline(op.name, s.id);
      if (!counts) return fail(counts.error());
      auto t = problems::roofline_time(*counts, *hw);
      if (!t) return fail(t.error());
      double w = 0;
      for (const auto& [_, f] : counts->w_flops_by_dtype) w += f;
      const double q = counts->q_read_bytes + counts->q_write_bytes;
      if (g.json) {
        rows.push_back(Json{{"operator", op.name},
                            {"shape_id", s.id},
                            {"w_flops", counts->w_flops_by_dtype},
                            {"q_read_bytes", counts->q_read_bytes},
                            {"q_write_bytes", counts->q_write_bytes},
                            {"t_compute_us", t->compute_s * 1e6},
                            {"t_memory_us", t->memory_s * 1e6},
                            {"t_roofline_us", t->roofline_s * 1e6},
                            {"bound", t->bound}});
      } else {
        fmt::print("{:<28} {:>5} {:>12.4f} {:>11.3f} {:>11.3f} {:>11.3f} {:>12.3f}  {}\n", op.name,
                   s.id, w / 1e9, q / 1e6, t->compute_s * 1e6, t->memory_s * 1e6,
                   t->roofline_s * 1e6, t->bound);
      }
    }
  }
  if (g.json) {
    fmt::print("{}\n", Json{{"schema", "atrex.roofline/1"},
                            {"hardware", hw->name},
                            {"hardware_source", hw->source_doc},
                            {"hardware_file", hw->file.string()},
                            {"shapes", rows}}
                           .dump(2));
  }
  return 0;
}

std::string pct(double d) { return std::isfinite(d) ? fmt::format("{:+.1f}%", 100 * d) : "inf"; }

int roofline_audit(const GlobalOptions& g, const std::string& op_name, bool show_shapes) {
  auto suite = load_suite(g);
  if (!suite) return fail(suite.error());
  if (!op_name.empty()) {
    if (auto op = suite->require(op_name); !op) return fail(op.error());
  }
  auto audit = problems::audit_roofline(*suite);
  if (!audit) return fail(audit.error());
  Json rows = Json::array();
  if (!g.json) {
    fmt::print(
        "analytical W/Q (atrex) against the released roofline.json; flagged: a shape differing by "
        "more than 5%\n");
    fmt::print("{:<30} {:>7} {:>11} {:>11} {:>8}  {}\n", "operator", "shapes", "max |dW|",
               "max |dQ|", "flagged", "reason");
  }
  for (const auto& a : *audit) {
    if (!op_name.empty() && a.op != op_name) continue;
    if (g.json) {
      Json shapes = Json::array();
      for (const auto& s : a.shapes) {
        shapes.push_back(Json{{"shape_id", s.shape_id},
                              {"w_released", s.w_released},
                              {"w_analytic", s.w_analytic},
                              {"q_released", s.q_released},
                              {"q_analytic", s.q_analytic},
                              {"w_diff", s.w_diff},
                              {"q_diff", s.q_diff},
                              {"flagged", s.flagged}});
      }
      rows.push_back(Json{{"operator", a.op},
                          {"has_formula", a.has_formula},
                          {"flagged", a.flagged},
                          {"max_abs_w_diff", a.max_abs_w_diff},
                          {"max_abs_q_diff", a.max_abs_q_diff},
                          {"notes", a.notes},
                          {"shapes", shapes}});
      continue;
    }
    if (!a.has_formula) {
      fmt::print("{:<30} {:>7} {:>11} {:>11} {:>8}  no analytic formula yet\n", a.op, "-", "-", "-",
                 "-");
      continue;
    }
    fmt::print("{:<30} {:>7} {:>11} {:>11} {:>8}  {}\n", a.op, a.shapes.size(),
               pct(a.max_abs_w_diff), pct(a.max_abs_q_diff), a.flagged,
               a.flagged ? (a.notes.empty() ? "(no explanation recorded)" : a.notes) : "");
    if (show_shapes) {
      for (const auto& s : a.shapes) {
        fmt::print("    shape {:>4}: W {:.4g} vs {:.4g} ({}), Q {:.4g} vs {:.4g} ({}){}\n",
                   s.shape_id, s.w_analytic, s.w_released, pct(s.w_diff), s.q_analytic,
                   s.q_released, pct(s.q_diff), s.flagged ? "  FLAG" : "");
      }
    }
  }
  if (g.json)
    fmt::print("{}\n", Json{{"schema", "atrex.roofline-audit/1"}, {"operators", rows}}.dump(2));
  return 0;
}

Json profile_json(const problems::HardwareProfile& p) {
  return Json{{"name", p.name},
              {"arch", p.arch},
              {"p_peak", p.p_peak_flops_per_s},
              {"hbm_bytes_per_s", p.hbm_bytes_per_s},
              {"l2_bytes", p.l2_bytes},
              {"file", p.file.string()},
              {"source", p.source_doc},
              {"retrieved_at", p.retrieved_at}};
}

// host-cpu is no bundled file: this machine's measured profile, from the cache when it was
// measured on this CPU model (the one the evaluator uses), else measured on first use.
int hardware_list(const GlobalOptions& g) {
  auto suite = load_suite(g);
  if (!suite) return fail(suite.error());
  auto profiles = problems::load_default_hardware_profiles(suite->dir());
  if (!profiles) return fail(profiles.error());
  const auto cached = runner::load_cached_host_profile();
  const std::string cpu = runner::host_cpu_model();
  const bool host_cached = cached && !cached->match.empty() && cached->match.front() == cpu;
  const std::string cache_file = runner::host_profile_cache_file().string();
  if (g.json) {
    Json a = Json::array();
    for (const auto& p : *profiles) a.push_back(profile_json(p));
    Json host =
        host_cached ? profile_json(*cached) : Json{{"name", "host-cpu"}, {"file", cache_file}};
    host["cached"] = host_cached;  // false: measured on first use (or `atrex hardware measure`)
    a.push_back(host);
    fmt::print("{}\n", Json{{"schema", "atrex.hardware/1"}, {"profiles", a}}.dump(2));
    return 0;
  }
  fmt::print("{:<16} {:<8} {:>9} {:>9} {:>9} {:>9}  {}\n", "profile", "arch", "HBM TB/s", "bf16 TF",
             "fp8 TF", "fp32 TF", "file");
  auto row = [](const problems::HardwareProfile& p) {
    fmt::print("{:<16} {:<8} {:>9.2f} {:>9.1f} {:>9.1f} {:>9.1f}  {}\n", p.name,
               p.arch.empty() ? "-" : p.arch, p.hbm_bytes_per_s / 1e12, peak(p, "bf16_tc") / 1e12,
               peak(p, "fp8_e4m3_tc") / 1e12, peak(p, "fp32_strict") / 1e12, p.file.string());
  };
  for (const auto& p : *profiles) row(p);
  if (host_cached) {
    row(*cached);
    fmt::print("  host-cpu: {}, {} (cached; `atrex hardware measure` refreshes it)\n",
               cached->source_doc, cached->retrieved_at);
  } else {
    const std::string why =
        cached ? fmt::format("the cached profile in {} is of another CPU ({})", cache_file,
                             cached->match.empty() ? "unknown" : cached->match.front())
               : fmt::format("not measured yet; kept in {} once measured", cache_file);
    fmt::print(
        "host-cpu         (measured on demand: {}; `atrex hardware measure`, or `hardware: auto` "
        "on a CPU-only "
        "machine)\n",
        why);
  }
  return 0;
}

// `atrex hardware measure --backend cuda`: the GPU's copy bandwidth and GEMM rate per dtype path.
int gpu_measure(const GlobalOptions& g, const std::string& out, std::string name, int device) {
  fmt::print(stderr,
             "measuring GPU {} (copy bandwidth, cuBLASLt GEMM rate per dtype; about a minute)...\n",
             device);
  auto m = runner::run_cuda_bench("measure", device);
  if (!m) return fail(m.error());
  if (name.empty() || name == "host-cpu") {
    std::string gpu = (*m)["device"].value("name", "gpu");
    for (auto& c : gpu) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    name = "measured-" + gpu;
  }
  auto p = runner::gpu_profile(*m, name);
  if (!p) return fail(p.error());
  if (g.json) {
    fmt::print(
        "{}\n",
        Json{{"schema", "atrex.hardware-measure/1"}, {"name", p->name}, {"measurement", *m}}.dump(
            2));
  } else {
    fmt::print("{} ({}): copy {:.2f} TB/s (read+write), L2 {:.0f} MiB\n", p->name, p->arch,
               p->hbm_bytes_per_s / 1e12, p->l2_bytes / (1 << 20));
    for (const auto& [path, rate] : p->p_peak_flops_per_s)
      fmt::print("  {:<14} {:>8.1f} TFLOP/s\n", path, rate / 1e12);
    fmt::print("{}\n", p->notes);
  }
  if (!out.empty()) {
    auto w = write_text_file_atomic(out, problems::hardware_profile_yaml(*p));
    if (!w) return fail(w.error());
    fmt::print(stderr, "wrote {} (put its folder in ATREX_HARDWARE_DIR to score against it)\n",
               out);
  }
  return 0;
}

// Whether a new measurement may replace the cached host-cpu profile: not on a loaded host
// (the 1-minute load average at or above half the hardware threads, taken before measuring:
// the figures would be low), and not when a figure differs from the cached one by more than
// the measurement's own spread (at least 2%), unless `force`. "" when it may, else why not.
std::string refuse_replacing(const problems::HardwareProfile& cached,
                             const runner::HostCeilings& now, std::optional<double> load) {
  std::vector<std::string> why;
  if (load && *load >= 0.5) {
    why.push_back(fmt::format("the host is loaded (load average {:.2f} per hardware thread, at "
                              "or above 0.5): the figures would be low",
                              *load));
  }
  auto compare = [&](const char* what, double old_v, double new_v, double spread,
                     const char* unit, double scale) {
    if (old_v <= 0) return;
    const double diff = std::abs(new_v - old_v) / old_v;
    const double allowed = std::max(spread, 0.02);
    if (diff > allowed) {
      why.push_back(fmt::format("{} {:.1f} {} differs from the cached {:.1f} {} by {:.1f}%, more "
                                "than the measurement's spread of {:.1f}%",
                                what, new_v / scale, unit, old_v / scale, unit, 100 * diff,
                                100 * allowed));
    }
  };
  compare("copy", cached.hbm_bytes_per_s, now.copy_bytes_per_s, now.copy_spread, "GB/s", 1e9);
  auto f = cached.p_peak_flops_per_s.find("fp32_strict");
  if (f != cached.p_peak_flops_per_s.end())
    compare("fp32 FMA", f->second, now.fp32_flops_per_s, now.fp32_spread, "GFLOP/s", 1e9);
  return fmt::format("{}", fmt::join(why, "; "));
}

int hardware_measure(const GlobalOptions& g, const std::string& out, const std::string& name,
                     const std::string& backend, int device, bool force) {
  const bool gpu =
      backend == "cuda" || (backend == "auto" && runner::probe_environment().has_gpu());
  if (gpu) return gpu_measure(g, out, name, device);
  const auto load = runner::host_load_per_thread();
  fmt::print(stderr, "measuring this host's CPU (copy bandwidth, fp32 FMA rate)...\n");
  const runner::HostCeilings c = runner::measure_host_ceilings();
  problems::HardwareProfile p = runner::host_profile(c, name);
  std::string refused;
  bool replaced = false;
  if (name == "host-cpu") {
    // The cached profile that `hardware: auto` uses on the cpu backend (scores of earlier runs
    // were computed against it): replaced only by figures that are not within noise of it.
    const auto cached = runner::load_cached_host_profile();
    const bool same_cpu = cached && !cached->match.empty() && cached->match.front() == c.cpu_name;
    if (same_cpu) refused = refuse_replacing(*cached, c, load);
    if (refused.empty() || force) {
      auto written = runner::write_cached_host_profile(p);
      if (!written) return fail(written.error());
      p = *written;
      replaced = true;
    }
  }
  const double copy = c.copy_bytes_per_s, fma = c.fp32_flops_per_s;
  if (g.json) {
    fmt::print("{}\n", Json{{"schema", "atrex.hardware-measure/1"},
                            {"name", p.name},
                            {"cpu", c.cpu_name},
                            {"copy_bytes_per_s", copy},
                            {"copy_spread", c.copy_spread},
                            {"fp32_flops_per_s", fma},
                            {"fp32_spread", c.fp32_spread},
                            {"load_per_thread", load ? Json(*load) : Json(nullptr)},
                            {"cached", replaced},
                            {"refused", refused},
                            {"source", p.source_doc},
                            {"file", replaced ? p.file.string() : ""}}
                           .dump(2));
  } else {
    fmt::print("{}: copy {:.1f} GB/s (read+write; spread {:.1f}% over the passes), fp32 FMA "
               "{:.1f} GFLOP/s (spread {:.1f}%){}\n{}\n",
               p.name, copy / 1e9, 100 * c.copy_spread, fma / 1e9, 100 * c.fp32_spread,
               load ? fmt::format("; load {:.2f} per hardware thread before measuring", *load)
                    : "",
               p.source_doc);
    if (replaced) fmt::print("cached as {}{}\n", p.file.string(),
                             refused.empty() ? "" : " (--force: " + refused + ")");
  }
  if (!out.empty()) {
    auto w = write_text_file_atomic(out, problems::hardware_profile_yaml(p));
    if (!w) return fail(w.error());
    fmt::print(stderr, "wrote {}\n", out);
  }
  if (!replaced && !refused.empty()) {
    fmt::print(stderr,
               "atrex: the cached profile {} was kept: {}; `--force` replaces it anyway\n",
               runner::host_profile_cache_file().string(), refused);
    return 1;
  }
  return 0;
}

}  // namespace

void add_roofline_command(CLI::App& app, GlobalOptions& g, int& rc) {
  static std::string hw, op;
  static bool audit = false, shapes = false;
  auto* r = app.add_subcommand("roofline",
                               "T_roofline per shape for a hardware profile (evaluator side), or "
                               "--audit: analytical W/Q against the released roofline.json");
  r->add_option("--hardware", hw,
                "Hardware profile (see `atrex hardware list`); required without --audit");
  r->add_option("--operator", op, "Only this operator");
  r->add_flag("--audit", audit,
              "Compare atrex's analytical W/Q with the released counts; flag > 5% differences");
  r->add_flag("--shapes", shapes, "With --audit: one line per shape");
  r->add_flag("--json", g.json,
              "Machine-readable output (atrex.roofline/1, atrex.roofline-audit/1)");
  r->callback([&] {
    if (audit) {
      rc = roofline_audit(g, op, shapes);
    } else if (hw.empty()) {
      rc = fail(
          Error{ErrorCode::kInvalidInput, "roofline: --hardware is required (or pass --audit)"});
    } else {
      rc = roofline(g, hw, op);
    }
  });
}

void add_hardware_commands(CLI::App& app, GlobalOptions& g, int& rc) {
  auto* h = app.add_subcommand("hardware",
                               "Hardware profiles (peak FLOP/s per dtype path, memory bandwidth)");
  h->require_subcommand(1);
  auto* l = h->add_subcommand("list", "List the known profiles");
  l->add_flag("--json", g.json, "Machine-readable output");
  l->callback([&] { rc = hardware_list(g); });
  static std::string out, name = "host-cpu";
  static std::string backend = "auto";
  static int device = 0;
  static bool force = false;
  auto* m = h->add_subcommand(
      "measure",
      "Measure this machine's ceilings: GPU (copy bandwidth, GEMM rate per dtype) or "
      "CPU (copy bandwidth, fp32 FMA rate); writes a hardware profile. On the CPU, the cached "
      "host-cpu profile is not replaced when the host is loaded or a figure differs from it by "
      "more than the measurement's spread (exit code 1), unless --force");
  m->add_option("--out", out, "Write the profile as YAML to this file");
  m->add_option("--name", name, "Profile name (GPU default: measured-<GPU name>)")
      ->capture_default_str();
  m->add_option("--backend", backend, "auto (the GPU when there is one), cuda or cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  m->add_option("--device", device, "GPU index (cuda)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1023));
  m->add_flag("--force", force,
              "Replace the cached host-cpu profile even on a loaded host or with figures outside "
              "the spread");
  m->add_flag("--json", g.json, "Machine-readable output");
  m->callback([&] { rc = hardware_measure(g, out, name, backend, device, force); });
}

}  // namespace atrex::cli
