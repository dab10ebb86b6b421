#include <fmt/format.h>

#include "atrex/scoring/render.h"

namespace atrex::scoring {

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        // XML 1.0 forbids most control characters even as references: drop them.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' && c != '\r') break;
        out += c;
    }
  }
  return out;
}

std::string render_junit(const Report& report, double tolerance) {
  std::string body;
  int all_tests = 0, all_failures = 0, all_skipped = 0;
  for (const auto& a : report.agents) {
    std::string cases;
    int tests = 0, failures = 0, skipped = 0;
    for (const auto& o : a.operators) {
      ++tests;
      cases += fmt::format("    <testcase classname=\"atrex.{}\" name=\"{}\" time=\"0\">",
                           xml_escape(a.agent), xml_escape(o.name));
      const std::string props = fmt::format(
          "<properties><property name=\"s_i\" value=\"{:.6f}\"/><property name=\"weight\" "
          "value=\"{:.6f}\"/><property name=\"shapes_correct\" value=\"{}/{}\"/></properties>",
          o.s_i, o.weight, o.shapes_correct, o.shapes_evaluated);
      cases += props;
      if (!o.attempted) {
        ++skipped;
        cases += "<skipped message=\"not attempted\"/>";
      } else if (o.shapes_correct == 0) {
        ++failures;
        cases += fmt::format("<failure type=\"no_correct_candidate\" message=\"no correct "
                             "candidate\">{}</failure>",
                             xml_escape(o.first_error));
      } else if (o.baseline_s_i && o.s_i < *o.baseline_s_i * (1 - tolerance)) {
        ++failures;
        cases += fmt::format(
            "<failure type=\"regression\" message=\"S_i {:.4f} under the baseline's {:.4f}\"/>",
            o.s_i, *o.baseline_s_i);
      }
      cases += "</testcase>\n";
    }
    body += fmt::format(
        "  <testsuite name=\"atrex.{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\">\n"
        "    <properties><property name=\"s_agg\" value=\"{:.6f}\"/><property name=\"sweep_id\" "
        "value=\"{}\"/></properties>\n{}  </testsuite>\n",
        xml_escape(a.agent), tests, failures, skipped, a.s_agg, xml_escape(a.sweep_id), cases);
    all_tests += tests;
    all_failures += failures;
    all_skipped += skipped;
  }
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"atrex {}\" tests=\"{}\" "
      "failures=\"{}\" errors=\"0\" skipped=\"{}\">\n{}</testsuites>\n",
      xml_escape(report.context.sweep_name), all_tests, all_failures, all_skipped, body);
}

}  // namespace atrex::scoring
