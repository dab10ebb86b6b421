// What an agent is asked to write (docs/python-candidates.md "Agents that write Python"): the
// sweep file's `target` of an openai or cli agent. `cuda` (the default) is atrex's native
// candidate for the sweep's backend (.cu / .cpp / .hip through atrex/candidate.h); `triton` and
// `torch` are Atrex-Bench's own format, a Python module (generated_kernel.py, `class
// Model(torch.nn.Module)` with the reference's signature) whose forward launches Triton kernels,
// or only PyTorch operations (the paper's fallback baseline).
#pragma once

#include <string>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/backend.h"

namespace atrex::agent {

enum class Target { kNative, kTriton, kTorch };

const char* target_name(Target t);  // "cuda", "triton", "torch"
// kInvalidInput naming the field when not cuda, triton or torch.
Result<Target> parse_target(const JsonField& f);
// The `target` member of a provider's normalised options (absent: kNative).
Target target_of(const Json& options);
inline bool is_python(Target t) { return t != Target::kNative; }

// The candidate file's extension: ".py" for Python targets, else the backend's.
std::string candidate_extension(Target t, Backend backend);

// The reference's Python signature for `op`, as Atrex-Bench's reference.py has it: `__init__`
// takes the parameters that size no tensor (the shapes' init_kwargs, e.g. rms_norm's eps, with
// their defaults), `forward` the input tensors in the operator's order, and the outputs come
// back in the operator's order. Empty when atrex has no native definition of `op`.
std::string python_signature(const std::string& op);

}  // namespace atrex::agent
