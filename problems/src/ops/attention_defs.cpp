// Operator group "attention": attention_forward, unified_attention, paged_attention_decode,
// mla_decode_attention, reshape_and_cache. Signatures and distributions of alibaba/atrex-bench
// data/<op>/{reference.py,input.py} (semantics carried over, not code); docs/operators/attention.md
// explains every choice.
#include "attention_cache_ops.h"
#include "attention_decode_ops.h"
#include "attention_inputs.h"
#include "attention_ops.h"
#include "def_helpers.h"

namespace atrex::problems::ops {
namespace {

namespace in = attention_inputs;

Result<void> check_heads(int64_t q_heads, int64_t kv_heads, int64_t head_dim, int64_t max_dim) {
  if (kv_heads < 1 || q_heads % kv_heads != 0) {
    return invalid_input(
        fmt::format("{} query heads are not a multiple of {} kv heads", q_heads, kv_heads));
  }
  if (head_dim > max_dim)
    return invalid_input(fmt::format("head dim {} exceeds the reference's {}", head_dim, max_dim));
  return ok();
}

Result<void> resolve_attention_forward(ResolvedShape& s) {
  ATREX_ASSIGN_OR_RETURN(const auto lens, in::seq_lens_of(s));
  ATREX_TRY(check_heads(1, 1, s.int_param("head_dim"), kAttnMaxHeadDim));
  for (size_t i = 0; i < 3; ++i) s.inputs[i].dims[0] = lens.sum;  // q, k, v
  s.inputs[3].dims[0] = s.inputs[4].dims[0] = lens.count + 1;     // cu_seqlens_q, cu_seqlens_k
  s.outputs[0].dims[0] = lens.sum;
  return ok();
}

Result<void> resolve_unified_attention(ResolvedShape& s) {
  ATREX_ASSIGN_OR_RETURN(const auto lens, in::seq_lens_of(s));
  const int64_t num_seqs = s.int_param("num_seqs"), bs = s.int_param("block_size");
  if (lens.count != num_seqs) {
    return invalid_input(
        fmt::format("\"seq_lens\" has {} entries, num_seqs is {}", lens.count, num_seqs));
  }
  if (bs < 1) return invalid_input("\"block_size\" must be positive");
  ATREX_TRY(check_heads(s.int_param("num_query_heads"), s.int_param("num_kv_heads"),
                        s.int_param("head_size"), kAttnMaxHeadDim));
  const int64_t max_blocks = in::ceil_div(lens.max, bs) + 2;  // input.py's max_num_blocks
  s.inputs[0].dims[0] = s.outputs[0].dims[0] = lens.sum;
  s.inputs[1].dims[0] = s.inputs[2].dims[0] = max_blocks * num_seqs + 64;  // num_blocks
  s.inputs[3].dims[0] = num_seqs + 1;
  s.inputs[5].dims[1] = max_blocks;
  return ok();
}

Result<void> resolve_paged_attention_decode(ResolvedShape& s) {
  const std::string dtype = s.params.at("dtype").get<std::string>();
  if (dtype != "bf16" && dtype != "fp16") {
    return invalid_input(
        fmt::format("parameter \"dtype\": expected \"bf16\" or \"fp16\"; got \"{}\"", dtype));
  }
  const int64_t head = s.int_param("head_size"), bs = s.int_param("block_size"),
                ctx = s.int_param("ctx_len");
  ATREX_TRY(check_heads(s.int_param("num_query_heads"), s.int_param("num_kv_heads"), head,
                        kAttnMaxHeadDim));
  if (head % 8 != 0)
    return invalid_input(fmt::format("head_size {} is not a multiple of x = 8", head));
  if (bs < 1 || ctx < 1) return invalid_input("\"block_size\" and \"ctx_len\" must be positive");
  const DType dt = dtype == "fp16" ? DType::kF16 : DType::kBF16;
  s.inputs[0].dtype = s.inputs[1].dtype = s.inputs[2].dtype = s.outputs[0].dtype = dt;
  const int64_t max_blocks = in::ceil_div(ctx, bs);
  s.inputs[1].dims[0] = s.inputs[2].dims[0] =
      max_blocks * s.int_param("num_seqs") + 16;  // num_blocks
  s.inputs[1].dims[4] = 8;                        // x = 16 bytes / 2-byte element
  s.inputs[3].dims[1] = max_blocks;
  return ok();
}

Result<void> resolve_mla_decode_attention(ResolvedShape& s) {
  const int64_t rank = s.int_param("kv_lora_rank"), qk = rank + s.int_param("qk_rope_head_dim");
  if (rank < 1) return invalid_input("\"kv_lora_rank\" must be positive");
  ATREX_TRY(check_heads(1, 1, qk, kMlaMaxQkDim));
  ATREX_TRY(check_heads(1, 1, rank, kMlaMaxVDim));
  s.inputs[0].dims[2] = qk;
  s.inputs[1].dims = {s.int_param("batch_size") * s.int_param("ctx_len"), 1, qk};
  return ok();
}

Result<void> resolve_reshape_and_cache(ResolvedShape& s) {
  if (s.params.at("shape").size() != 3)
    return invalid_input("parameter \"shape\": expected [num_tokens, num_heads, head_size]");
  const int64_t bs = s.int_param("block_size");
  if (bs < 1) return invalid_input("\"block_size\" must be positive");
  const int64_t num_blocks = in::ceil_div(s.inputs[0].dims[0], bs);
  s.inputs[2].dims[0] = s.inputs[3].dims[0] = s.outputs[0].dims[0] = s.outputs[1].dims[0] =
      num_blocks;
  return ok();
}

// Attention FLOPs: 2·d per (query, key, head) for q·k and 2·d_v for p·v (softmax not counted,
// as FlopCounterMode does). Bytes: what any correct kernel must move: q once, the KV rows the
// queries attend (not the cache's padding blocks), the block-table entries used, out once.
RooflineCounts attention_forward_roofline(const ResolvedShape& s) {
  const double hd = static_cast<double>(s.int_param("num_heads") * s.int_param("head_dim"));
  double w = 0;
  for (int64_t i = 0; i + 1 < s.inputs[3].dims[0]; ++i)
    w += 4 * hd * std::pow(static_cast<double>(in::seq_len(s, i)), 2);
  return RooflineCounts{{{"bf16", w}}, input_bytes(s), output_bytes(s)};
}

RooflineCounts unified_attention_roofline(const ResolvedShape& s) {
  const double hq_d =
      static_cast<double>(s.int_param("num_query_heads") * s.int_param("head_size"));
  const double kv_row_bytes =
      2.0 * static_cast<double>(s.int_param("num_kv_heads") * s.int_param("head_size"));
  double w = 0, read = static_cast<double>(s.inputs[0].bytes() + s.inputs[3].bytes() +
                                           s.inputs[4].bytes());
  for (int64_t i = 0; i < s.int_param("num_seqs"); ++i) {
    const double l = static_cast<double>(in::seq_len(s, i));
    w += 4 * hq_d * l * (l + 1) / 2;  // causal: query p attends p + 1 keys
    read += 2 * l * kv_row_bytes +
            4.0 * static_cast<double>(in::ceil_div(in::seq_len(s, i), s.int_param("block_size")));
  }
  return RooflineCounts{{{"bf16", w}}, read, output_bytes(s)};
}

RooflineCounts paged_attention_decode_roofline(const ResolvedShape& s) {
  const double b = static_cast<double>(s.int_param("num_seqs")),
               l = static_cast<double>(s.int_param("ctx_len"));
  const double d = static_cast<double>(s.int_param("head_size"));
  const double w = 4 * b * static_cast<double>(s.int_param("num_query_heads")) * d * l;
  const double kv = 2 * b * l * static_cast<double>(s.int_param("num_kv_heads")) * d * 2;
  const double read =
      static_cast<double>(s.inputs[0].bytes() + s.inputs[3].bytes() + s.inputs[4].bytes()) + kv;
  return RooflineCounts{{{std::string(dtype_name(s.inputs[0].dtype)), w}}, read, output_bytes(s)};
}

RooflineCounts mla_decode_attention_roofline(const ResolvedShape& s) {
  const double rows = static_cast<double>(s.int_param("batch_size") * s.int_param("ctx_len") *
                                          s.int_param("nhead"));
  const double w =
      2 * rows * static_cast<double>(s.inputs[0].dims[2] + s.int_param("kv_lora_rank"));
  return RooflineCounts{{{"bf16", w}}, input_bytes(s), output_bytes(s)};
}

// Only the key/value rows and slot_mapping are read, and only the mapped slots written: the
// outputs already hold the rest of the caches (initial_from).
RooflineCounts reshape_and_cache_roofline(const ResolvedShape& s) {
  const double rows = static_cast<double>(s.inputs[0].bytes() + s.inputs[1].bytes());
  return RooflineCounts{{{"bf16", 0.0}}, rows + static_cast<double>(s.inputs[4].bytes()), rows};
}

}  // namespace

void add_attention_operators(std::vector<OperatorDef>& ops) {
  const char* kRandn = "randn";
  ops.push_back(OperatorDef{
      .name = "attention_forward",
      .semantics = "Varlen prefill attention (no mask): for each sequence s (tokens "
                   "cu_seqlens_q[s]..cu_seqlens_q[s+1], "
                   "keys cu_seqlens_k[s]..cu_seqlens_k[s+1]) and head h, out = softmax(q k^T / "
                   "sqrt(head_dim)) v, computed "
                   "in fp32 from bf16 inputs and rounded once to bf16. Default tolerances.",
      .params = {int_param("num_heads", "heads of q, k and v"),
                 int_param("head_dim", "head dim (<= 256)"),
                 int_list_param("seq_lens", "tokens per sequence; q and k share them")},
      .inputs = {{.name = "q",
                  .dtype = DType::kBF16,
                  .dims = {"=sum(seq_lens)", "num_heads", "head_dim"},
                  .distribution = normal(),
                  .doc = kRandn},
                 {.name = "k",
                  .dtype = DType::kBF16,
                  .dims = {"=sum(seq_lens)", "num_heads", "head_dim"},
                  .distribution = normal(),
                  .doc = kRandn},
                 {.name = "v",
                  .dtype = DType::kBF16,
                  .dims = {"=sum(seq_lens)", "num_heads", "head_dim"},
                  .distribution = normal(),
                  .doc = kRandn},
                 {.name = "cu_seqlens_q",
                  .dtype = DType::kI32,
                  .dims = {"=len(seq_lens)+1"},
                  .doc = "[0, cumsum(seq_lens)]",
                  .generate = &in::cu_seqlens},
                 {.name = "cu_seqlens_k",
                  .dtype = DType::kI32,
                  .dims = {"=len(seq_lens)+1"},
                  .doc = "[0, cumsum(seq_lens)] (same as cu_seqlens_q)",
                  .generate = &in::cu_seqlens}},
      .outputs = {{.name = "out",
                   .dtype = DType::kBF16,
                   .dims = {"=sum(seq_lens)", "num_heads", "head_dim"},
                   .doc = "attention output, q's layout"}},
      .reference_cpu = &cpu_ref<attention_forward_reference<CpuExec>>,
      .resolve = &resolve_attention_forward,
      .analytic = &attention_forward_roofline});
  ops.push_back(OperatorDef{
      .name = "unified_attention",
      .semantics = "vLLM unified (paged, varlen) attention. Sequence s has query tokens "
                   "cu_seqlens_q[s]..cu_seqlens_q[s+1] "
                   "and seqused_k[s] keys, key j at slot block_table[s, j / block_size] * "
                   "block_size + j % block_size of "
                   "k_cache/v_cache [num_blocks, block_size, num_kv_heads, head_size]; query head "
                   "h uses kv head "
                   "h / (num_query_heads / num_kv_heads). Causal (query position p attends keys "
                   "0..p) when the sequence's "
                   "q_len == kv_len, which input.py always produces. softmax(q k^T / "
                   "sqrt(head_size)) v in fp32, rounded "
                   "once to bf16. out is bf16 as reference.py returns it and roofline.json counts "
                   "it (metadata.json says "
                   "fp32). Default tolerances.",
      .params = {int_param("num_seqs", "sequences"),
                 int_list_param("seq_lens", "tokens per sequence (q and kv)"),
                 int_param("num_query_heads", "query heads"),
                 int_param("num_kv_heads", "kv heads (GQA)"),
                 int_param("head_size", "head dim (<= 256)"),
                 int_param("block_size", "tokens per cache block")},
      .inputs =
          {{.name = "q",
            .dtype = DType::kBF16,
            .dims = {"=sum(seq_lens)", "num_query_heads", "head_size"},
            .distribution = normal(),
            .doc = kRandn},
           {.name = "k_cache",
            .dtype = DType::kBF16,
            .dims = {"=max_num_blocks*num_seqs+64", "block_size", "num_kv_heads", "head_size"},
            .distribution = normal(),
            .doc = "randn; max_num_blocks = ceil(max(seq_lens) / block_size) + 2"},
           {.name = "v_cache",
            .dtype = DType::kBF16,
            .dims = {"=max_num_blocks*num_seqs+64", "block_size", "num_kv_heads", "head_size"},
            .distribution = normal(),
            .doc = kRandn},
           {.name = "cu_seqlens_q",
            .dtype = DType::kI32,
            .dims = {"=num_seqs+1"},
            .doc = "[0, cumsum(seq_lens)]",
            .generate = &in::cu_seqlens},
           {.name = "seqused_k",
            .dtype = DType::kI32,
            .dims = {"num_seqs"},
            .doc = "seq_lens",
            .generate = &in::seq_lens_copy},
           {.name = "block_table",
            .dtype = DType::kI32,
            .dims = {"num_seqs", "=max_num_blocks"},
            .doc = "row s: s * max_num_blocks + b for the blocks s needs, then 0",
            .generate = &in::unified_block_table}},
      .outputs = {{.name = "out",
                   .dtype = DType::kBF16,
                   .dims = {"=sum(seq_lens)", "num_query_heads", "head_size"},
                   .doc = "attention output"}},
      .reference_cpu = &cpu_ref<unified_attention_reference<CpuExec>>,
      .resolve = &resolve_unified_attention,
      .analytic = &unified_attention_roofline});
  ops.push_back(OperatorDef{
      .name = "paged_attention_decode",
      .semantics = "Decode attention over the legacy paged cache: one query row per sequence; key "
                   "j of sequence s at "
                   "position j % block_size of block block_tables[s, j / block_size], with k_cache "
                   "[num_blocks, "
                   "num_kv_heads, head_size/8, block_size, 8] and v_cache [num_blocks, "
                   "num_kv_heads, head_size, "
                   "block_size]; keys j < seq_lens[s]; query head h uses kv head h / "
                   "(num_query_heads / num_kv_heads). "
                   "softmax(q k^T / sqrt(head_size)) v in fp32, rounded once to `dtype` (bf16 or "
                   "fp16: query, caches and "
                   "out all take it). Default tolerances.",
      .params = {int_param("num_seqs", "sequences (one query token each)"),
                 int_param("ctx_len", "keys per sequence"),
                 int_param("num_query_heads", "query heads"),
                 int_param("num_kv_heads", "kv heads (GQA)"),
                 int_param("head_size", "head dim (multiple of 8, <= 256)"),
                 optional_int_param("block_size", 16, "tokens per cache block"),
                 string_param("dtype", "bf16", "\"bf16\" or \"fp16\": query, caches and out")},
      .inputs = {{.name = "query",
                  .dtype = DType::kBF16,
                  .dims = {"num_seqs", "num_query_heads", "head_size"},
                  .doc = "randn in `dtype`",
                  .generate = &in::randn_resolved_dtype},
                 {.name = "k_cache",
                  .dtype = DType::kBF16,
                  .dims = {"=num_blocks", "num_kv_heads", "head_size/8", "block_size", "=8"},
                  .doc =
                      "randn in `dtype`; num_blocks = ceil(ctx_len / block_size) * num_seqs + 16",
                  .generate = &in::randn_resolved_dtype},
                 {.name = "v_cache",
                  .dtype = DType::kBF16,
                  .dims = {"=num_blocks", "num_kv_heads", "head_size", "block_size"},
                  .doc = "randn in `dtype`",
                  .generate = &in::randn_resolved_dtype},
                 {.name = "block_tables",
                  .dtype = DType::kI32,
                  .dims = {"num_seqs", "=ceil(ctx_len/block_size)"},
                  .doc = "block_tables[s, j] = s * ceil(ctx_len / block_size) + j",
                  .generate = &in::paged_block_tables},
                 {.name = "seq_lens",
                  .dtype = DType::kI32,
                  .dims = {"num_seqs"},
                  .doc = "ctx_len each",
                  .generate = &in::seq_lens_ctx_len}},
      .outputs = {{.name = "out",
                   .dtype = DType::kBF16,
                   .dims = {"num_seqs", "num_query_heads", "head_size"},
                   .doc = "attention output in `dtype`"}},
      .reference_cpu = &cpu_ref<paged_attention_decode_reference<CpuExec>>,
      .resolve = &resolve_paged_attention_decode,
      .analytic = &paged_attention_decode_roofline,
      .roofline_notes =
          "Q_read counts the attended KV rows only; roofline.json reads the whole cache, "
          "including its 16 spare blocks (up to 66% more on 1-sequence shapes). W is keyed fp16 on "
          "fp16 shapes (roofline.json keys all bf16)"});
  ops.push_back(OperatorDef{
      .name = "mla_decode_attention",
      .semantics = "Absorbed-MLA decode: sequence b owns kv_cache rows sum(seq_lens[:b]) .. + "
                   "seq_lens[b] (one latent "
                   "head shared by all nhead query heads); keys are whole rows (kv_lora_rank + "
                   "qk_rope_head_dim), values "
                   "their first kv_lora_rank elements. out = softmax(q k^T / sqrt(kv_lora_rank + "
                   "qk_rope_head_dim)) v in "
                   "fp32, rounded once to bf16. Default tolerances.",
      .params = {int_param("batch_size", "sequences"), int_param("ctx_len", "keys per sequence"),
                 int_param("nhead", "query heads"),
                 int_param("kv_lora_rank", "latent (value) dim, <= 512"),
                 int_param("qk_rope_head_dim", "rope dim; key dim = kv_lora_rank + this, <= 576")},
      .inputs = {{.name = "q",
                  .dtype = DType::kBF16,
                  .dims = {"batch_size", "nhead", "=kv_lora_rank+qk_rope_head_dim"},
                  .distribution = normal(),
                  .doc = kRandn},
                 {.name = "kv_cache",
                  .dtype = DType::kBF16,
                  .dims = {"=batch_size*ctx_len", "=1", "=kv_lora_rank+qk_rope_head_dim"},
                  .distribution = normal(),
                  .doc = kRandn},
                 {.name = "seq_lens",
                  .dtype = DType::kI32,
                  .dims = {"batch_size"},
                  .doc = "ctx_len each",
                  .generate = &in::seq_lens_ctx_len}},
      .outputs = {{.name = "out",
                   .dtype = DType::kBF16,
                   .dims = {"batch_size", "nhead", "kv_lora_rank"},
                   .doc = "attention output"}},
      .reference_cpu = &cpu_ref<mla_decode_attention_reference<CpuExec>>,
      .resolve = &resolve_mla_decode_attention,
      .analytic = &mla_decode_attention_roofline,
      .roofline_notes =
          "W counts the two matmuls, 2·B·H·L·(576 + 512), 21% below roofline.json, whose trace "
          "adds B·H·(L+1)·576 (no matmul of the reference has that size); Q matches"});
  ops.push_back(OperatorDef{
      .name = "reshape_and_cache",
      .semantics = "KV-cache write (vLLM reshape_and_cache_flash): key_cache/value_cache "
                   "[num_blocks, block_size, "
                   "num_heads, head_size] start as the input caches (zeros) and row t of key/value "
                   "is copied to slot "
                   "slot_mapping[t] (skipped when negative). Bit-exact copy; compared with the "
                   "default tolerances.",
      .params = {int_list_param("shape", "[num_tokens, num_heads, head_size]"),
                 optional_int_param("block_size", 16, "tokens per cache block")},
      .inputs = {{.name = "key",
                  .dtype = DType::kBF16,
                  .dims = {"shape[0]", "shape[1]", "shape[2]"},
                  .distribution = normal(),
                  .doc = kRandn},
                 {.name = "value",
                  .dtype = DType::kBF16,
                  .dims = {"shape[0]", "shape[1]", "shape[2]"},
                  .distribution = normal(),
                  .doc = kRandn},
                 {.name = "key_cache",
                  .dtype = DType::kBF16,
                  .dims = {"=ceil(shape[0]/block_size)", "block_size", "shape[1]", "shape[2]"},
                  .doc = "zeros",
                  .generate = &in::zeros},
                 {.name = "value_cache",
                  .dtype = DType::kBF16,
                  .dims = {"=ceil(shape[0]/block_size)", "block_size", "shape[1]", "shape[2]"},
                  .doc = "zeros",
                  .generate = &in::zeros},
                 {.name = "slot_mapping",
                  .dtype = DType::kI64,
                  .dims = {"shape[0]"},
                  .doc = "arange(num_tokens)",
                  .generate = &in::arange_i64}},
      .outputs =
          {{.name = "key_cache",
            .dtype = DType::kBF16,
            .dims = {"=ceil(shape[0]/block_size)", "block_size", "shape[1]", "shape[2]"},
            .doc = "starts as the input key_cache (not poisoned); the mapped slots are written",
            .initial_from = "key_cache"},
           {.name = "value_cache",
            .dtype = DType::kBF16,
            .dims = {"=ceil(shape[0]/block_size)", "block_size", "shape[1]", "shape[2]"},
            .doc = "starts as the input value_cache (not poisoned); the mapped slots are written",
            .initial_from = "value_cache"}},
      .reference_cpu = &cpu_ref<reshape_and_cache_reference<CpuExec>>,
      .resolve = &resolve_reshape_and_cache,
      .analytic = &reshape_and_cache_roofline,
      .roofline_notes =
          "Q counts key/value/slot_mapping read and the mapped rows written (the outputs start as "
          "the caches); roofline.json also reads both caches (the reference's clone, ~2x Q_read) "
          "and "
          "writes both in full (16x the mapped rows on the 1-token shape 0)"});
}

}  // namespace atrex::problems::ops
