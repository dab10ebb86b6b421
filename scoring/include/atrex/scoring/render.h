// Renderers of the report model beside report.h's Markdown: a self-contained HTML page (no
// network: inline CSS, inline SVG plots drawn here, a few lines of inline JS for sorting) and
// JUnit XML for CI systems.
#pragma once

#include <string>
#include <string_view>

#include "atrex/scoring/report.h"

namespace atrex::scoring {

// `text` escaped for HTML/XML text and attribute values (& < > " ').
std::string xml_escape(std::string_view text);

// The HTML report: headline table and S_agg bars per agent, weight vs S_i per agent, the
// correctness-illusion table, one roofline plot per operator (achieved time vs T_roofline per
// shape, log axes; memory-bound shapes as circles, compute-bound as squares; the diagonal is
// S_j = 1) and the per-shape table (sortable: click a header). Every plot point carries
// data-agent / data-operator / data-shape / data-bound attributes.
std::string render_html(const Report& report);

// JUnit XML: one <testsuite> per agent, one <testcase> per suite operator (classname
// "atrex.<agent>", name the operator). Failure: attempted without a correct shape ("no correct
// candidate"), or, with a baseline, S_i under the baseline's by more than `regression_tolerance`
// (relative). Not attempted: <skipped/>.
std::string render_junit(const Report& report, double regression_tolerance = 0.05);

}  // namespace atrex::scoring
