// Operator group "attention": attention_forward, unified_attention, paged_attention_decode, mla_decode_attention, reshape_and_cache.
// Signatures and distributions of alibaba/atrex-bench data/<op>/{reference.py,input.py}
// (semantics carried over, not code). Not defined yet.
#include "def_helpers.h"

namespace atrex::problems::ops {

void add_attention_operators(std::vector<OperatorDef>& /*ops*/) {}

}  // namespace atrex::problems::ops
