// The rules file of `atrex ingest` (YAML, `version: atrex.ingest-rules/1`): which GPU kernels
// belong to which operator family, how a family's shape parameters come out of the profiler's
// record_shapes data, and how steps are split into prefill and decode. Shipped for the suite's
// 30 families plus dense GEMM, collectives, elementwise and copies: ingest/rules/default.yaml,
// documented field by field in docs/ingest.md.
//
// A kernel takes the family of the FIRST rule that matches it. A rule matches when every
// pattern it has matches (ECMAScript regular expressions, searched, not anchored):
//   kernel: the GPU kernel's name;
//   op:     the name of a cpu_op among the launching op and its enclosing ops (innermost first);
//   scope:  the name of any enclosing range (op, record_function range, "nn.Module: X");
//   runtime: the launching runtime call ("cudaGraphLaunch" for graph-replayed kernels);
// and every `when` condition holds on the extracted parameters. The op or scope range that
// matched is the rule's anchor; parameters are read from the anchor's record_shapes data (or,
// with `from`, from the first (or `nth`) op whose name matches at or under the matched scope
// range when the rule has a `scope`, else under the anchor).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"

namespace atrex::ingest {

struct Pattern {
  std::string text;
  std::regex re;
  bool search(const std::string& s) const { return std::regex_search(s, re); }
};

// Where one shape parameter comes from. Exactly one of: value (a constant), input+dim,
// input+prod (the product of dims [from, to), Python slice rules, negative from the end),
// input+dims (the whole dims list), concrete (Concrete Inputs[i] as a number), dtype (Input
// type[i] as "bf16", "fp16", "fp32", "fp8_e4m3", ...), list (a list of sources), repeat+times
// (a list of `times` copies). Then *mul, /div (exact), +add on integers.
struct ParamSource {
  enum class Kind { kValue, kDim, kProd, kDims, kConcrete, kDtype, kList, kRepeat };
  Kind kind = Kind::kValue;
  Json value;
  int input = 0;
  int dim = 0;
  int from = 0;
  std::optional<int> to;
  std::optional<Pattern> from_op;  // `from`: read from this op under the rule's scope (or anchor)
  int from_nth = 0;                // `nth`: the nth such op in start order (0: the first)
  std::vector<ParamSource> items;  // kList; kRepeat: items[0] = repeat, items[1] = times
  int64_t mul = 1, div = 1, add = 0;
};

struct Condition {
  std::string param;
  std::string op;  // eq ne lt le gt ge
  Json value;
};

struct FamilyRule {
  std::string family;
  std::optional<Pattern> kernel, op, scope, runtime;
  std::vector<std::pair<std::string, ParamSource>> init;   // -> shapes.json init_kwargs
  std::vector<std::pair<std::string, ParamSource>> input;  // -> shapes.json input_kwargs
  std::vector<std::pair<std::string, ParamSource>> hidden; // names starting "_": for `when`
  std::vector<Condition> when;
  std::string where;  // "rules.yaml: families[3]" for messages
};

// Step markers and the tokens-per-step fallback (docs/ingest.md "Phases").
struct PhaseRules {
  Pattern prefill;     // a record_function range name that marks a prefill step
  Pattern decode;      // ... a decode step
  Pattern step;        // a step range (ProfilerStep#N) for the tokens-per-step fallback
  Pattern tokens_op;   // the op whose input holds the step's token ids (aten::embedding)
  int tokens_input = 1;
  // A step whose token input has at most this many tokens per sequence (its last dim) is
  // decode, else prefill.
  int64_t decode_max_tokens = 16;
};

struct Rules {
  std::filesystem::path file;
  std::vector<FamilyRule> rules;
  PhaseRules phases;
  // Families reported in coverage but kept out of the suite even when they have shapes.
  std::vector<std::string> report_only;
};

// Strict: unknown fields, missing fields, a bad regular expression or an unknown source kind are
// kInvalidInput naming the file, the field path ("families[3].kernel") and the value.
Result<Rules> load_rules(const std::filesystem::path& file);
Result<Rules> parse_rules(const Json& doc, const std::filesystem::path& file);

// The shipped rules: $ATREX_INGEST_RULES, else <exe>/../share/atrex/ingest/rules.yaml, else the
// source tree's ingest/rules/default.yaml.
std::filesystem::path default_rules_file();

}  // namespace atrex::ingest
