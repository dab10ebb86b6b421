// Operator group "moe_gemm": moe_align_block_size, moe_count_and_sort, moe_topk_gating_softmax, topk_filter, fused_moe, fp8_blockscale_fused_moe, block_scaled_mm.
// Signatures and distributions of alibaba/atrex-bench data/<op>/{reference.py,input.py}
// (semantics carried over, not code). Not defined yet.
#include "def_helpers.h"

namespace atrex::problems::ops {

void add_moe_gemm_operators(std::vector<OperatorDef>& /*ops*/) {}

}  // namespace atrex::problems::ops
