#include "atrex/common/wire/eval_settings.h"

#include <fmt/format.h>

#include "atrex/common/wire/reader.h"

namespace atrex {

const char* timing_mode_name(TimingMode m) {
  switch (m) {
    case TimingMode::kAuto: return "auto";
    case TimingMode::kCupti: return "cupti";
    case TimingMode::kGraph: return "graph";
    case TimingMode::kEager: return "eager";
  }
  ATREX_UNREACHABLE("TimingMode");
}

Result<TimingMode> parse_timing_mode(std::string_view s) {
  for (TimingMode m :
       {TimingMode::kAuto, TimingMode::kCupti, TimingMode::kGraph, TimingMode::kEager}) {
    if (s == timing_mode_name(m)) return m;
  }
  return invalid_input(fmt::format("expected auto, cupti, graph or eager; got \"{}\"", s));
}

Result<void> read_value(const JsonField& f, TimingMode& out) {
  return read_enum(f, out,
                   {TimingMode::kAuto, TimingMode::kCupti, TimingMode::kGraph, TimingMode::kEager},
                   timing_mode_name, "auto, cupti, graph or eager");
}

const char* roofline_source_name(RooflineSource s) {
  switch (s) {
    case RooflineSource::kReleased: return "released";
    case RooflineSource::kAnalytic: return "analytic";
  }
  ATREX_UNREACHABLE("RooflineSource");
}

Result<void> read_value(const JsonField& f, RooflineSource& out) {
  return read_enum(f, out, {RooflineSource::kReleased, RooflineSource::kAnalytic},
                   roofline_source_name, "released or analytic");
}

Json to_json(const EvalSettings& s) {
  return Json{{"seeds", s.seeds},
              {"atol", s.atol},
              {"rtol", s.rtol},
              {"performance", s.performance},
              {"warmup_iterations", s.warmup_iterations},
              {"min_iterations", s.min_iterations},
              {"max_iterations", s.max_iterations},
              {"min_time_s", s.min_time_s},
              {"max_timing_s", s.max_timing_s},
              {"target_rse", s.target_rse},
              {"timing_mode", timing_mode_name(s.timing_mode)},
              {"shape_timeout_s", s.shape_timeout_s},
              {"compile_timeout_s", s.compile_timeout_s},
              {"roofline", roofline_source_name(s.roofline)},
              {"range_probe", s.range_probe},
              {"unseen_shapes", s.unseen_shapes},
              {"edge_cases", s.edge_cases}};
}

namespace {

// Reads member `key` into `out` (kept when absent and partial) and checks it lies in [lo, hi].
template <class T>
Result<void> read_in(ObjectReader& r, Completeness c, const char* key, T& out, double lo,
                     double hi) {
  if (c == Completeness::kPartial) {
    ATREX_TRY(r.optional(key, out));
  } else {
    ATREX_TRY(r.required(key, out));
  }
  if constexpr (!std::is_same_v<T, bool>) {
    if (r.has(key) && (out < lo || out > hi)) {
      ATREX_ASSIGN_OR_RETURN(JsonField child, r.field().at(key));
      return child.fail(fmt::format("expected {} in [{}, {}]",
                                    std::is_integral_v<T> ? "an integer" : "a number", lo, hi));
    }
  }
  return ok();
}

}  // namespace

Result<EvalSettings> eval_settings_from_json(const JsonField& f, const EvalSettings& base,
                                             Completeness c) {
  EvalSettings s = base;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(read_in(r, c, "seeds", s.seeds, 1, 1000));
  ATREX_TRY(read_in(r, c, "atol", s.atol, 0, 1e9));
  ATREX_TRY(read_in(r, c, "rtol", s.rtol, 0, 1e9));
  ATREX_TRY(read_in(r, c, "performance", s.performance, 0, 1));
  ATREX_TRY(read_in(r, c, "warmup_iterations", s.warmup_iterations, 0, 1e6));
  ATREX_TRY(read_in(r, c, "min_iterations", s.min_iterations, 1, 1e7));
  ATREX_TRY(read_in(r, c, "max_iterations", s.max_iterations, 1, 1e7));
  ATREX_TRY(read_in(r, c, "min_time_s", s.min_time_s, 0, 3600));
  ATREX_TRY(read_in(r, c, "max_timing_s", s.max_timing_s, 0.01, 3600));
  ATREX_TRY(read_in(r, c, "target_rse", s.target_rse, 0, 1));
  ATREX_TRY(read_in(r, c, "shape_timeout_s", s.shape_timeout_s, 0.1, 86400));
  ATREX_TRY(read_in(r, c, "compile_timeout_s", s.compile_timeout_s, 0.1, 86400));
  ATREX_TRY(read_in(r, c, "range_probe", s.range_probe, 0, 1));
  ATREX_TRY(read_in(r, c, "unseen_shapes", s.unseen_shapes, 0, 64));
  ATREX_TRY(read_in(r, c, "edge_cases", s.edge_cases, 0, 1));
  if (c == Completeness::kPartial) {
    ATREX_TRY(r.optional("roofline", s.roofline));
    ATREX_TRY(r.optional("timing_mode", s.timing_mode));
  } else {
    ATREX_TRY(r.required("roofline", s.roofline));
    ATREX_TRY(r.required("timing_mode", s.timing_mode));
  }
  ATREX_TRY(r.finish());
  if (s.max_iterations < s.min_iterations) {
    return invalid_input(
        fmt::format("{}: field \"{}\": max_iterations ({}) is below min_iterations ({})",
                    f.source(), f.path(), s.max_iterations, s.min_iterations));
  }
  return s;
}

}  // namespace atrex
