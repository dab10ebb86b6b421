#include "atrex/agent/knowledge_base.h"

#include <algorithm>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "atrex/common/embedded.h"

namespace atrex::agent {

// Provided by the generated source of atrex_embed_files (agent/CMakeLists.txt).
namespace kb_data {
std::span<const EmbeddedFile> embedded_files();
}

namespace {

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

std::vector<std::string> split_list(std::string_view s) {
  std::vector<std::string> out;
  std::stringstream in{std::string(s)};
  for (std::string item; std::getline(in, item, ',');) {
    if (auto t = trim(item); !t.empty()) out.push_back(t);
  }
  return out;
}

Result<Bottleneck> parse_bottleneck(const std::string& s) {
  for (Bottleneck b : {Bottleneck::kMemory, Bottleneck::kCompute, Bottleneck::kLatency}) {
    if (s == bottleneck_name(b)) return b;
  }
  return invalid_input(fmt::format("expected memory, compute or latency, got \"{}\"", s));
}

}  // namespace

const char* bottleneck_name(Bottleneck b) {
  switch (b) {
    case Bottleneck::kMemory: return "memory";
    case Bottleneck::kCompute: return "compute";
    case Bottleneck::kLatency: return "latency";
  }
  ATREX_UNREACHABLE("Bottleneck");
}

std::string_view operator_family(std::string_view op) {
  static const std::map<std::string_view, std::string_view, std::less<>> kFamily = {
      {"rms_norm", "norm"},
      {"fused_add_rms_norm", "norm"},
      {"fused_qk_rmsnorm", "norm"},
      {"gated_rms_norm", "norm"},
      {"l2_norm", "norm"},
      {"layer_norm", "norm"},
      {"silu_and_mul", "elementwise"},
      {"mrope", "elementwise"},
      {"fused_qkv_rope", "elementwise"},
      {"reshape_and_cache", "elementwise"},
      {"moe_sum_reduce", "elementwise"},
      {"fp8_dynamic_per_token_quant", "quant"},
      {"per_token_group_quant_fp8", "quant"},
      {"fused_rmsnorm_quant", "quant"},
      {"attention_forward", "attention"},
      {"mla_decode_attention", "attention"},
      {"paged_attention_decode", "attention"},
      {"unified_attention", "attention"},
      {"block_scaled_mm", "gemm"},
      {"linear_sigmoid_mul", "gemm"},
      {"fused_moe", "gemm"},
      {"fp8_blockscale_fused_moe", "gemm"},
      {"moe_align_block_size", "routing"},
      {"moe_count_and_sort", "routing"},
      {"moe_topk_gating_softmax", "routing"},
      {"topk_filter", "routing"},
      {"causal_conv1d", "recurrent"},
      {"chunk_delta_rule_output", "recurrent"},
      {"chunk_gated_delta_rule_state", "recurrent"},
      {"gated_delta_rule_update", "recurrent"},
  };
  auto it = kFamily.find(op);
  return it == kFamily.end() ? std::string_view{} : it->second;
}

Bottleneck family_bottleneck(std::string_view family) {
  if (family == "gemm") return Bottleneck::kCompute;
  if (family == "routing") return Bottleneck::kLatency;
  return Bottleneck::kMemory;
}

bool KbNote::covers(std::string_view family) const {
  return std::any_of(families.begin(), families.end(),
                     [&](const std::string& f) { return f == family || f == "*"; });
}

bool KbNote::targets(Backend backend) const {
  return std::find(backends.begin(), backends.end(), backend) != backends.end();
}

Result<KbNote> KnowledgeBase::parse(const std::string& path, const std::string& text) {
  KbNote n;
  n.path = path;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  bool ended = false;
  while (std::getline(in, line)) {
    ++line_no;
    if (trim(line) == "---") {
      ended = true;
      break;
    }
    const auto colon = line.find(':');
    const std::string where = fmt::format("{}: line {}", path, line_no);
    if (colon == std::string::npos) return invalid_input(where + ": expected `key: value`");
    const std::string key = trim(std::string_view(line).substr(0, colon));
    const std::string value = trim(std::string_view(line).substr(colon + 1));
    if (key == "title") {
      n.title = value;
    } else if (key == "families") {
      n.families = split_list(value);
    } else if (key == "bottleneck") {
      auto b = parse_bottleneck(value);
      if (!b) return invalid_input(where + ": bottleneck: " + b.error().message);
      n.bottleneck = *b;
    } else if (key == "backends") {
      for (const auto& s : split_list(value)) {
        auto b = parse_backend(s);
        if (!b) return invalid_input(where + ": backends: " + b.error().message);
        n.backends.push_back(*b);
      }
    } else {
      return invalid_input(fmt::format("{}: unknown key \"{}\"", where, key));
    }
  }
  if (!ended) return invalid_input(path + ": the header must end with a line `---`");
  if (n.title.empty() || n.families.empty() || n.backends.empty()) {
    return invalid_input(path + ": the header needs title, families and backends");
  }
  n.body.assign(std::istreambuf_iterator<char>(in), {});
  n.body = trim(n.body);
  return n;
}

KnowledgeBase KnowledgeBase::of(std::vector<KbNote> notes) {
  KnowledgeBase kb;
  kb.notes_ = std::move(notes);
  std::sort(kb.notes_.begin(), kb.notes_.end(),
            [](const KbNote& a, const KbNote& b) { return a.path < b.path; });
  return kb;
}

Result<KnowledgeBase> KnowledgeBase::embedded() {
  std::vector<KbNote> notes;
  for (const EmbeddedFile& f : kb_data::embedded_files()) {
    ATREX_ASSIGN_OR_RETURN(KbNote n, parse(std::string(f.path), std::string(f.content)));
    notes.push_back(std::move(n));
  }
  return of(std::move(notes));
}

std::vector<const KbNote*> KnowledgeBase::select(std::string_view family, Backend backend,
                                                 std::optional<Bottleneck> measured,
                                                 size_t max_notes) const {
  const Bottleneck want = measured.value_or(family_bottleneck(family));
  auto own = [&](const KbNote& n) {
    return std::any_of(n.families.begin(), n.families.end(),
                       [&](const std::string& f) { return f == family; });
  };
  // Rank 0: the family's notes on the bottleneck; 1: its other notes; 2: general notes on the
  // bottleneck; 3: other general notes.
  std::vector<std::pair<int, const KbNote*>> ranked;
  for (const auto& n : notes_) {
    if (!n.targets(backend) || !n.covers(family)) continue;
    const bool on_bottleneck = n.bottleneck == want;
    if (own(n)) {
      ranked.emplace_back(on_bottleneck ? 0 : 1, &n);
    } else {
      ranked.emplace_back(on_bottleneck ? 2 : 3, &n);
    }
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<const KbNote*> out;
  for (const auto& [rank, n] : ranked) {
    if (out.size() >= max_notes) break;
    out.push_back(n);
  }
  return out;
}

}  // namespace atrex::agent
