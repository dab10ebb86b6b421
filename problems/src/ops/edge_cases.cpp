#include "ops/edge_cases.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <span>

#include "atrex/problems/numeric.h"

namespace atrex::problems::ops {
namespace {

// A value in [0, n) for (seed, stream, i): the counter-based generator of the inputs.
uint64_t draw(uint64_t seed, uint64_t stream, uint64_t i, uint64_t n) {
  return num::mix64(seed ^ num::mix64(stream * 0x9e3779b97f4a7c15ull + i)) % n;
}

// Row r of a [rows, cols] tensor is chosen for an edge case (1 in `every`), the same rows for
// every input of the shape (x and residual of fused_rmsnorm_quant agree).
bool chosen_row(uint64_t seed, int64_t r, uint64_t every) {
  return draw(seed, 0xed6e, static_cast<uint64_t>(r), every) == 0;
}

int64_t last_dim(const TensorDesc& t) { return t.dims.empty() ? 1 : t.dims.back(); }

// Float values rounded to multiples of `step`: with thousands of values per row and a few dozen
// levels, the k-th largest value is shared by many elements (ties at the threshold).
template <class Round>
void round_to_step(const TensorDesc& t, void* data, double step, Round round_dtype) {
  auto* f = static_cast<float*>(data);
  for (int64_t i = 0; i < t.numel(); ++i)
    f[i] = round_dtype(static_cast<float>(std::nearbyint(f[i] / step) * step));
}

void ties_quarter(const ResolvedShape& s, size_t index, uint64_t, void* data) {
  round_to_step(s.inputs[index], data, 0.25, [](float v) { return v; });
}
void ties_half(const ResolvedShape& s, size_t index, uint64_t, void* data) {
  round_to_step(s.inputs[index], data, 0.5, [](float v) { return v; });
}

// Every 4th row (by the seed) all zeros: the quantisers' amax is 0 there.
void zero_rows(const ResolvedShape& s, size_t index, uint64_t seed, void* data) {
  const TensorDesc& t = s.inputs[index];
  const int64_t cols = last_dim(t), rows = t.numel() / std::max<int64_t>(cols, 1);
  const size_t row_bytes = static_cast<size_t>(cols) * dtype_size(t.dtype);
  bool any = false;
  for (int64_t r = 0; r < rows; ++r) {
    if (!chosen_row(seed, r, 4)) continue;
    std::memset(static_cast<uint8_t*>(data) + static_cast<size_t>(r) * row_bytes, 0, row_bytes);
    any = true;
  }
  // Small shapes get one zero row all the same (the same one for every input of the shape).
  if (!any && rows > 0) {
    const int64_t r = static_cast<int64_t>(draw(seed, 0xed6f, 0, static_cast<uint64_t>(rows)));
    std::memset(static_cast<uint8_t*>(data) + static_cast<size_t>(r) * row_bytes, 0, row_bytes);
  }
}

// Expert ids with the odd experts folded onto their even neighbour: half the experts get no
// token (and the even ones twice as many; repeats within a row stay possible, as in randint).
void empty_experts(const ResolvedShape& s, size_t index, uint64_t, void* data) {
  auto* ids = static_cast<int32_t*>(data);
  for (int64_t i = 0; i < s.inputs[index].numel(); ++i) ids[i] &= ~int32_t{1};
}

// A seeded permutation of [0, n).
std::vector<int32_t> permutation(int64_t n, uint64_t seed, uint64_t stream) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(p[static_cast<size_t>(i)],
              p[draw(seed, stream, static_cast<uint64_t>(i), static_cast<uint64_t>(i) + 1)]);
  return p;
}

// Block tables whose entries are a seeded permutation of the cache's physical blocks (the
// reference reads blocks only through the table, so any injective table is valid): a candidate
// that assumes sequence s owns blocks s*max_blocks.. reads the wrong keys. Entries past a
// sequence's needed blocks are rewritten too (they are never read).
void permuted_block_table(const ResolvedShape& s, size_t index, uint64_t seed, void* data,
                          int64_t num_blocks) {
  auto* table = static_cast<int32_t*>(data);
  const int64_t n = s.inputs[index].numel();
  const auto p = permutation(num_blocks, seed, 0xb10c);
  for (int64_t i = 0; i < n; ++i) table[i] = p[static_cast<size_t>(i % num_blocks)];
}

int64_t input_dim0(const ResolvedShape& s, const char* name) {
  for (const auto& t : s.inputs)
    if (t.name == name) return t.dims.at(0);
  return 0;
}

void paged_block_tables(const ResolvedShape& s, size_t index, uint64_t seed, void* data) {
  permuted_block_table(s, index, seed, data, input_dim0(s, "k_cache"));
}
void unified_block_table(const ResolvedShape& s, size_t index, uint64_t seed, void* data) {
  permuted_block_table(s, index, seed, data, input_dim0(s, "k_cache"));
}

// seq_lens below ctx_len, by up to a block and a half (at least 1 token): partial last blocks and
// sequences of unequal length in one batch.
void shorter_seq_lens(const ResolvedShape& s, size_t index, uint64_t seed, void* data) {
  auto* lens = static_cast<int32_t*>(data);
  const int64_t bs = s.params.contains("block_size") ? s.int_param("block_size") : 16;
  for (int64_t i = 0; i < s.inputs[index].numel(); ++i) {
    const auto cut = static_cast<int32_t>(draw(seed, 0x5e9, static_cast<uint64_t>(i),
                                               static_cast<uint64_t>(bs + bs / 2 + 1)));
    lens[i] = std::max(1, lens[i] - cut);
  }
}

// slot_mapping: a seeded permutation of the cache's slots, one token in eight skipped (-1, which
// the reference leaves unwritten): a candidate writing row t to slot t fails.
void permuted_slots(const ResolvedShape& s, size_t index, uint64_t seed, void* data) {
  const TensorDesc& kc = s.inputs[2];  // key_cache [num_blocks, block_size, heads, head_size]
  const int64_t slots = kc.dims.at(0) * kc.dims.at(1);
  const auto p = permutation(slots, seed, 0x5107);
  auto* map = static_cast<int64_t*>(data);
  const int64_t n = s.inputs[index].numel();
  bool skipped = false;
  for (int64_t t = 0; t < n; ++t) {
    const bool skip = draw(seed, 0x5108, static_cast<uint64_t>(t), 8) == 0;
    map[t] = skip ? -1 : p[static_cast<size_t>(t)];
    skipped |= skip;
  }
  if (!skipped && n > 1) map[draw(seed, 0x5109, 0, static_cast<uint64_t>(n))] = -1;
}

struct Entry {
  const char* op;
  EdgeCase edge;
};

const std::vector<Entry>& table() {
  static const std::vector<Entry> kTable = {
      {"topk_filter",
       {"logits", &ties_quarter,
        "logits rounded to multiples of 0.25: ties at the k-th value in every row (all kept)"}},
      {"moe_topk_gating_softmax",
       {"gating_output", &ties_half,
        "gating logits rounded to multiples of 0.5: experts tied at the top-k boundary"}},
      {"fp8_dynamic_per_token_quant", {"x", &zero_rows, "every 4th row all zeros (amax 0)"}},
      {"per_token_group_quant_fp8", {"x", &zero_rows, "every 4th row all zeros (amax 0)"}},
      {"fused_rmsnorm_quant", {"x", &zero_rows, "every 4th row of x all zeros"}},
      {"fused_rmsnorm_quant",
       {"residual", &zero_rows, "the same rows of residual all zeros: x + residual = 0 there"}},
      {"moe_align_block_size",
       {"topk_ids", &empty_experts, "odd experts folded onto even ones: half the experts empty"}},
      {"moe_count_and_sort",
       {"topk_ids", &empty_experts, "odd experts folded onto even ones: half the experts empty"}},
      {"paged_attention_decode",
       {"block_tables", &paged_block_tables,
        "a seeded permutation of the cache's blocks (not s * max_blocks + j)"}},
      {"paged_attention_decode",
       {"seq_lens", &shorter_seq_lens,
        "each below ctx_len by 0 to 1.5 blocks: partial last blocks, unequal lengths"}},
      {"unified_attention",
       {"block_table", &unified_block_table,
        "a seeded permutation of the cache's blocks (not s * max_num_blocks + b)"}},
      {"mla_decode_attention",
       {"seq_lens", &shorter_seq_lens, "each below ctx_len by 0 to 24 tokens: unequal lengths"}},
      {"reshape_and_cache",
       {"slot_mapping", &permuted_slots,
        "a seeded permutation of the cache's slots, 1 token in 8 skipped (-1)"}},
  };
  return kTable;
}

}  // namespace

void attach_edge_cases(std::vector<OperatorDef>& ops) {
  for (const auto& e : table()) {
    auto it = std::find_if(ops.begin(), ops.end(), [&](const auto& d) { return d.name == e.op; });
    if (it == ops.end()) continue;
    it->edge_cases.push_back(e.edge);
  }
}

}  // namespace atrex::problems::ops

namespace atrex::problems {

bool apply_edge_case_cpu(const ResolvedShape& shape, size_t index, uint64_t seed, void* data) {
  bool applied = false;
  for (const auto& e : shape.def->edge_cases) {
    if (e.input != shape.inputs[index].name) continue;
    e.apply(shape, index, seed, data);
    applied = true;
  }
  return applied;
}

}  // namespace atrex::problems
