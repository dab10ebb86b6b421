// The self-contained HTML report: every plot is SVG drawn here (no charting library, no network).
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "atrex/scoring/render.h"

namespace atrex::scoring {
namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                    "#8c564b", "#e377c2", "#17becf", "#bcbd22"};
const char* agent_color(size_t i) { return kPalette[i % std::size(kPalette)]; }

std::string esc(std::string_view s) { return xml_escape(s); }

std::string num(double v) { return fmt::format("{:.4g}", v); }
std::string pct(const std::optional<double>& v) {
  return v ? fmt::format("{:.1f}%", 100 * *v) : "n/a";
}

// A logarithmic axis over whole decades covering [lo, hi], mapped to pixels [p0, p1].
struct LogAxis {
  double lo_exp = 0, hi_exp = 1;
  double p0 = 0, p1 = 1;
  LogAxis(double lo, double hi, double a, double b) : p0(a), p1(b) {
    lo_exp = std::floor(std::log10(lo));
    hi_exp = std::ceil(std::log10(hi));
    if (hi_exp <= lo_exp) hi_exp = lo_exp + 1;
  }
  double map(double v) const {
    return p0 + (std::log10(v) - lo_exp) / (hi_exp - lo_exp) * (p1 - p0);
  }
};

std::string decade_label(double e) {
  const double v = std::pow(10.0, e);
  if (e >= 6) return fmt::format("{:.0f} s", v / 1e6);
  if (e >= 3) return fmt::format("{:.0f} ms", v / 1e3);
  if (e >= 0) return fmt::format("{:.0f} µs", v);
  return fmt::format("{:g} µs", v);
}

struct Point {
  double t_roofline_us, time_us;
  std::string bound, agent, shape;
  size_t agent_index;
  std::optional<double> s_j;
};

// Achieved time against T_roofline, both log, one decade grid for both axes so that the
// diagonal is S_j = 1; the guides below it are S_j = 0.1 and 0.01.
std::string roofline_svg(const std::string& op, const std::vector<Point>& pts) {
  double lo = std::numeric_limits<double>::max(), hi = 0;
  for (const auto& p : pts) {
    lo = std::min({lo, p.t_roofline_us, p.time_us});
    hi = std::max({hi, p.t_roofline_us, p.time_us});
  }
  const double w = 420, h = 360, l = 70, r = 20, t = 20, b = 50;
  LogAxis x(lo, hi, l, w - r), y(lo, hi, h - b, t);
  std::string s = fmt::format(
      "<svg class=\"plot roofline\" data-operator=\"{}\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\">"
      "<title>{}: achieved time vs T_roofline</title>",
      esc(op), w, h, w, h, esc(op));
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" class=\"frame\"/>", l, t,
                   w - l - r, h - t - b);
  for (double e = x.lo_exp; e <= x.hi_exp; e += 1) {
    const double px = x.map(std::pow(10.0, e)), py = y.map(std::pow(10.0, e));
    s += fmt::format("<line class=\"grid\" x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\"/>",
                     px, t, h - b);
    s += fmt::format("<line class=\"grid\" x1=\"{1}\" y1=\"{0:.1f}\" x2=\"{2}\" y2=\"{0:.1f}\"/>",
                     py, l, w - r);
    s += fmt::format("<text class=\"tick\" x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                     px, h - b + 16, decade_label(e));
    s += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>",
                     l - 4, py + 4, decade_label(e));
  }
  // y = x / S for S = 1, 0.1, 0.01, clipped to the box.
  const double a = std::pow(10.0, x.lo_exp), z = std::pow(10.0, x.hi_exp);
  for (double sj : {1.0, 0.1, 0.01}) {
    const double x1 = a, y1 = a / sj;
    const double x2 = std::min(z, z * sj), y2 = std::min(z, z / sj);
    if (y1 > z) continue;
    s += fmt::format(
        "<line class=\"{}\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>"
        "<text class=\"guide-label\" x=\"{:.1f}\" y=\"{:.1f}\">S_j = {:g}</text>",
        sj == 1.0 ? "roofline-line" : "guide", x.map(x1), y.map(y1), x.map(x2), y.map(y2),
        x.map(x2) - 4, y.map(y2) + 12, sj);
  }
  for (const auto& p : pts) {
    const double px = x.map(p.t_roofline_us), py = y.map(p.time_us);
    const std::string title = fmt::format(
        "<title>{} shape {} ({}-bound): {} µs vs T_roofline {} µs, S_j {}</title>", esc(p.agent),
        esc(p.shape), esc(p.bound), num(p.time_us), num(p.t_roofline_us),
        p.s_j ? num(*p.s_j) : "n/a");
    const std::string data =
        fmt::format("class=\"pt {}\" data-agent=\"{}\" data-operator=\"{}\" data-shape=\"{}\" "
                    "data-bound=\"{}\" fill=\"{}\"",
                    esc(p.bound), esc(p.agent), esc(op), esc(p.shape), esc(p.bound),
                    agent_color(p.agent_index));
    if (p.bound == "compute") {
      s += fmt::format("<rect {} x=\"{:.1f}\" y=\"{:.1f}\" width=\"9\" height=\"9\">{}</rect>",
                       data, px - 4.5, py - 4.5, title);
    } else {
      s += fmt::format("<circle {} cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"5\">{}</circle>", data, px, py,
                       title);
    }
  }
  s += fmt::format(
      "<text class=\"axis\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">T_roofline per shape</text>"
      "<text class=\"axis\" transform=\"translate(14 {}) rotate(-90)\" "
      "text-anchor=\"middle\">achieved time (median)</text></svg>",
      (l + w - r) / 2, h - 8, (t + h - b) / 2);
  return s;
}

std::string s_agg_svg(const Report& rep) {
  double top = 0;
  for (const auto& a : rep.agents) top = std::max(top, a.s_agg);
  top = std::max(top * 1.15, 1e-3);
  const double row = 28, l = 160, w = 640, h = 30 + row * static_cast<double>(rep.agents.size());
  std::string s = fmt::format(
      "<svg class=\"plot s-agg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "xmlns=\"http://www.w3.org/2000/svg\"><title>S_agg per agent</title>",
      w, h, w, h);
  for (size_t i = 0; i < rep.agents.size(); ++i) {
    const auto& a = rep.agents[i];
    const double y = 10 + row * static_cast<double>(i), bw = (w - l - 80) * a.s_agg / top;
    s += fmt::format(
        "<text class=\"tick\" x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>"
        "<rect class=\"bar\" data-agent=\"{}\" data-value=\"{:.6f}\" x=\"{}\" y=\"{:.1f}\" "
        "width=\"{:.1f}\" height=\"{}\" fill=\"{}\"><title>{}: S_agg {:.5f}</title></rect>"
        "<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\">{:.5f}</text>",
        l - 6, y + 15, esc(a.agent), esc(a.agent), a.s_agg, l, y, std::max(bw, 1.0), row - 8,
        agent_color(i), esc(a.agent), a.s_agg, l + std::max(bw, 1.0) + 4, y + 15, a.s_agg);
  }
  return s + "</svg>";
}

// Weight vs S_i: where an agent's score comes from (heavy operators right).
std::string weight_svg(const Report& rep) {
  double wmax = 0;
  for (const auto& a : rep.agents)
    for (const auto& o : a.operators) wmax = std::max(wmax, o.weight);
  wmax = std::max(wmax * 1.1, 1e-3);
  const double w = 640, h = 320, l = 60, r = 20, t = 20, b = 45;
  auto px = [&](double v) { return l + v / wmax * (w - l - r); };
  auto py = [&](double v) { return h - b - std::min(v, 1.0) * (h - t - b); };
  std::string s = fmt::format(
      "<svg class=\"plot weight-si\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "xmlns=\"http://www.w3.org/2000/svg\"><title>weight vs S_i per agent</title>"
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" class=\"frame\"/>",
      w, h, w, h, l, t, w - l - r, h - t - b);
  for (int i = 0; i <= 4; ++i) {
    const double v = i / 4.0;
    s += fmt::format(
        "<line class=\"grid\" x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\"/>"
        "<text class=\"tick\" x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5:g}</text>"
        "<text class=\"tick\" x=\"{6:.1f}\" y=\"{7}\" text-anchor=\"middle\">{8:.3f}</text>",
        l, py(v), w - r, l - 4, py(v) + 4, v, px(wmax * v), h - b + 16, wmax * v);
  }
  for (size_t i = 0; i < rep.agents.size(); ++i) {
    for (const auto& o : rep.agents[i].operators) {
      if (!o.attempted) continue;
      s += fmt::format(
          "<circle class=\"pt\" data-agent=\"{}\" data-operator=\"{}\" cx=\"{:.1f}\" "
          "cy=\"{:.1f}\" r=\"5\" fill=\"{}\"><title>{} {}: weight {:.4f}, S_i {:.4f}</title>"
          "</circle>",
          esc(rep.agents[i].agent), esc(o.name), px(o.weight), py(o.s_i), agent_color(i),
          esc(rep.agents[i].agent), esc(o.name), o.weight, o.s_i);
    }
  }
  s += fmt::format(
      "<text class=\"axis\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">operator weight</text>"
      "<text class=\"axis\" transform=\"translate(14 {}) rotate(-90)\" "
      "text-anchor=\"middle\">S_i</text></svg>",
      (l + w - r) / 2, h - 8, (t + h - b) / 2);
  return s;
}

std::string legend(const Report& rep) {
  std::string s = "<p class=\"legend\">";
  for (size_t i = 0; i < rep.agents.size(); ++i) {
    s += fmt::format("<span><i style=\"background:{}\"></i>{}</span>", agent_color(i),
                     esc(rep.agents[i].agent));
  }
  return s + "<span>● memory-bound</span><span>■ compute-bound</span></p>";
}

std::string illusion_section(const Report& rep) {
  std::string s =
      "<h2 id=\"illusion\">Correctness illusion</h2><p>Operators whose final candidate is correct "
      "on every evaluated shape but whose GPU time is mostly outside the candidate's own kernels "
      "(target-DSL share under the threshold): correct, but a fallback to a vendor library or "
      "to PyTorch.</p>"
      "<table class=\"illusion\"><thead><tr><th>agent</th><th>correct operators</th><th>share "
      "measured</th><th>fallbacks</th><th>illusion rate</th><th>fallback operators</th></tr>"
      "</thead><tbody>";
  bool any_measured = false;
  for (const auto& a : rep.agents) {
    int measured = 0;
    for (const auto& o : a.operators) {
      if (o.status == "correct" && o.dsl_share) ++measured;
    }
    const std::string names = fallback_operators(a);
    any_measured = any_measured || measured > 0;
    s += fmt::format(
        "<tr data-agent=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td></tr>",
        esc(a.agent), esc(a.agent), a.operators_correct, measured, a.operators_fallback,
        measured ? fmt::format("{:.1f}%", 100.0 * a.operators_fallback / measured) : "n/a",
        esc(names.empty() ? "-" : names));
  }
  s += "</tbody></table>";
  if (!any_measured) {
    s += "<p class=\"note\">No target-DSL share was measured (CPU backend, or CUPTI unavailable): "
         "the illusion cannot be judged from these records.</p>";
  }
  return s;
}

std::string shape_table(const Report& rep) {
  const bool base = !rep.baselines.empty();
  std::string s = fmt::format(
      "<h2 id=\"shapes\">Per-shape detail</h2><p>Click a column header to sort.</p>"
      "<table class=\"sortable\" id=\"shape-table\"><thead><tr><th>agent</th><th>operator</th>"
      "<th>shape</th><th>status</th><th>bound</th><th>time µs</th><th>T_roofline µs</th>"
      "<th>S_j</th><th>RSE</th>{}</tr></thead><tbody>",
      base ? "<th>baseline µs</th><th>time / baseline</th>" : "");
  auto cell = [](const std::optional<double>& v) {
    return v ? fmt::format("<td data-v=\"{:.9g}\">{}</td>", *v, num(*v))
             : std::string("<td data-v=\"\">-</td>");
  };
  for (const auto& a : rep.agents) {
    for (const auto& o : a.operators) {
      for (const auto& d : o.shapes) {
        s += fmt::format(
            "<tr><td>{}</td><td>{}</td><td data-v=\"{}\">{}</td><td title=\"{}\">{}</td>"
            "<td>{}</td>{}<td data-v=\"{:.9g}\">{}</td>{}<td data-v=\"{:.6g}\"{}>{:.1f}%{}</td>",
            esc(a.agent), esc(o.name), esc(d.shape_id), esc(d.shape_id), esc(d.error),
            esc(d.status), esc(d.bound), cell(d.time_us_median), d.t_roofline_us,
            num(d.t_roofline_us), cell(d.s_j), d.relative_standard_error,
            d.noisy ? " class=\"noisy\" title=\"above the sweep's target relative standard "
                      "error: the time is noisier than asked\""
                    : "",
            100 * d.relative_standard_error, d.noisy ? " (noisy)" : "");
        if (base) {
          std::optional<double> ratio;
          if (d.time_us_median && d.baseline_time_us_median && *d.baseline_time_us_median > 0)
            ratio = *d.time_us_median / *d.baseline_time_us_median;
          s += cell(d.baseline_time_us_median) + cell(ratio);
        }
        s += "</tr>";
      }
    }
  }
  return s + "</tbody></table>";
}

constexpr const char* kStyle = R"(
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px}
th{background:#f3f3f3}td[data-v]{text-align:right}.sortable th{cursor:pointer}
.banner{background:#fff3cd;border:1px solid #e0c060;padding:8px 12px}
.warn{color:#8a5a00}.plots{display:flex;flex-wrap:wrap;gap:12px}
.plots figure{margin:0;border:1px solid #eee;padding:4px}figcaption{font-weight:600}
svg .frame{fill:none;stroke:#888}svg .grid{stroke:#eee}svg .tick{font-size:11px;fill:#444}
svg .axis{font-size:12px;fill:#222}svg .roofline-line{stroke:#000;stroke-width:1.5}
svg .guide{stroke:#999;stroke-dasharray:4 3}svg .guide-label{font-size:10px;fill:#666;text-anchor:end}
svg .pt{stroke:#000;stroke-width:.6;fill-opacity:.8}
.legend span{margin-right:14px}.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}
)";

// Sorting: numbers by data-v when present, else text; a second click reverses.
constexpr const char* kScript = R"(
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('th').forEach(function (th, col) {
    th.addEventListener('click', function () {
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var dir = th.dataset.dir === 'asc' ? -1 : 1;
      th.dataset.dir = dir === 1 ? 'asc' : 'desc';
      var key = function (row) {
        var c = row.cells[col];
        if (c.dataset.v !== undefined && c.dataset.v !== '') return parseFloat(c.dataset.v);
        if (c.dataset.v === '') return Infinity;
        return c.textContent;
      };
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        return (x < y ? -1 : x > y ? 1 : 0) * dir;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
// Self-check read by tests in a headless browser: how many plot points have a laid-out box.
var drawn = 0;
document.querySelectorAll('svg.plot .pt, svg.plot .bar').forEach(function (el) {
  var b = el.getBBox();
  if (b.width > 0 && b.height > 0) drawn++;
});
document.body.dataset.pointsDrawn = String(drawn);
document.body.dataset.ready = 'yes';
)";

// First thing in <head>: counts script errors into <html data-script-errors>, so that a page
// whose script failed says so in its DOM (read by tests through `chromium --dump-dom`).
constexpr const char* kErrorProbe =
    "window.addEventListener('error',function(e){var h=document.documentElement;"
    "h.dataset.scriptErrors=String((+h.dataset.scriptErrors||0)+1);"
    "h.dataset.lastError=String(e.message);});";

}  // namespace

std::string render_html(const Report& rep) {
  const ReportContext& ctx = rep.context;
  std::string h = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><script>{}</script>"
      "<title>atrex report: {}</title><style>{}</style></head><body>\n<h1>atrex sweep report: "
      "{}</h1>\n",
      kErrorProbe, esc(ctx.sweep_name), kStyle, esc(ctx.sweep_name.empty() ? ctx.sweep_id : ctx.sweep_name));
  if (rep.partial) {
    h += "<p class=\"banner\" id=\"partial\"><b>Partial results:</b> some (agent, operator) "
         "pairs have no final evaluation yet (an interrupted or running sweep); their S_i count "
         "as 0 and S_agg is a lower bound.</p>\n";
  }
  h += "<ul>";
  for (const auto& s : rep.sweeps) {
    h += fmt::format(
        "<li>sweep <code>{}</code> ({}, {}): hardware profile <code>{}</code>, backend {}, "
        "device {}; {} of {} final markers, {} records scored, {} duplicates dropped</li>",
        esc(s.sweep_id), esc(s.name), esc(s.status), esc(s.hardware), esc(s.backend),
        esc(s.device), s.finals_found, s.finals_expected, s.records_read, s.duplicates_dropped);
  }
  for (const auto& s : rep.sweeps) {
    for (size_t i = 0; i < s.builds.size(); ++i) {
      h += fmt::format("<li>{} <code>{}</code>: {}</li>", i == 0 ? "built by" : "resumed by",
                       esc(s.sweep_id), esc(s.builds[i]));
    }
  }
  for (const auto& b : rep.baselines) {
    h += fmt::format("<li>baseline <b>{}</b>: <code>{}</code> (sweep {})</li>", esc(b.label),
                     esc(b.source), esc(b.sweep_id));
  }
  h += fmt::format("<li>created {}</li></ul>\n", esc(ctx.created_at));
  for (const auto& w : rep.warnings) h += fmt::format("<p class=\"warn\">⚠ {}</p>\n", esc(w));
  h += "<h2>Agents</h2><table class=\"sortable\" id=\"agent-table\"><thead><tr><th>agent</th>"
       "<th>provider</th><th>S_agg</th><th>correctness rate</th><th>target-DSL adoption</th>"
       "<th>operators correct</th><th>tokens</th><th>cost USD</th></tr></thead><tbody>";
  for (const auto& a : rep.agents) {
    h += fmt::format(
        "<tr><td>{}</td><td>{}</td><td data-v=\"{:.6f}\">{:.5f}</td><td data-v=\"{:.4f}\">"
        "{:.1f}%</td><td>{}</td><td>{}/{}</td><td data-v=\"{}\">{}</td>"
        "<td data-v=\"{:.4f}\">{:.4f}</td></tr>",
        esc(a.agent), esc(a.provider), a.s_agg, a.s_agg, a.correctness_rate,
        100 * a.correctness_rate, pct(a.dsl_adoption_rate), a.operators_correct,
        a.operators_attempted, a.usage.prompt_tokens + a.usage.completion_tokens,
        a.usage.prompt_tokens + a.usage.completion_tokens, a.usage.cost_usd, a.usage.cost_usd);
  }
  h += "</tbody></table>\n<h2>S_agg per agent</h2>" + s_agg_svg(rep);
  h += "\n<h2>Weight vs S_i per agent</h2>" + legend(rep) + weight_svg(rep);
  h += "\n" + illusion_section(rep);
  h += "\n<h2 id=\"roofline\">Roofline per operator</h2><p>Achieved time (median) against "
       "T_roofline for each evaluated shape, both log scale. The diagonal is the roofline "
       "(S_j = 1); points above it are slower. Circles: memory-bound shapes; squares: "
       "compute-bound.</p>" +
       legend(rep) + "<div class=\"plots\">";
  std::vector<std::string> ops;
  for (const auto& a : rep.agents) {
    for (const auto& o : a.operators) {
      if (!o.shapes.empty() && std::find(ops.begin(), ops.end(), o.name) == ops.end())
        ops.push_back(o.name);
    }
  }
  for (const auto& op : ops) {
    std::vector<Point> pts;
    for (size_t i = 0; i < rep.agents.size(); ++i) {
      for (const auto& o : rep.agents[i].operators) {
        if (o.name != op) continue;
        for (const auto& d : o.shapes) {
          if (d.time_us_median && *d.time_us_median > 0 && d.t_roofline_us > 0) {
            pts.push_back(Point{d.t_roofline_us, *d.time_us_median, d.bound,
                                rep.agents[i].agent, d.shape_id, i, d.s_j});
          }
        }
      }
    }
    h += fmt::format("<figure><figcaption>{}</figcaption>", esc(op));
    h += pts.empty() ? "<p>no timed shape (none correct)</p>" : roofline_svg(op, pts);
    h += "</figure>";
  }
  h += "</div>\n" + shape_table(rep);
  h += fmt::format("\n<script>{}</script>\n</body></html>\n", kScript);
  return h;
}

}  // namespace atrex::scoring
