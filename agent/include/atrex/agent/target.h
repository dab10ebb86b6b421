// What an agent is asked to write (docs/python-candidates.md "Agents that write Python"): the
// sweep file's `target` of an openai or cli agent. `cuda` (the default) is atrex's native
// candidate for the sweep's backend (.cu / .cpp / .hip through atrex/candidate.h); `triton` and
// `torch` are Atrex-Bench's own format, a Python module (generated_kernel.py, `class
// Model(torch.nn.Module)` with the reference's signature) whose forward launches Triton kernels,
// or only PyTorch operations (the paper's fallback baseline).
//
// The one place for what a target means to an agent: its name, the candidate's file name and
// extension, the backends that evaluate it, and the text that states the release's format and
// constraints (both the openai prompt and the cli workspace's TASK.md use it).
#pragma once

#include <optional>
#include <string>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/backend.h"

namespace atrex::agent {

enum class Target { kNative, kTriton, kTorch };

const char* target_name(Target t);  // "cuda", "triton", "torch"
// kInvalidInput naming the field when not cuda, triton or torch.
Result<Target> parse_target(const JsonField& f);
// The agent entry's optional `target` into a provider's normalised options `o`; only a
// non-default one is kept, so sweep ids of sweeps without it stay as they were.
Result<void> parse_target_option(const JsonField& agent, Json& o);
// The `target` member of a provider's normalised options (absent: kNative).
Target target_of(const Json& options);
inline bool is_python(Target t) { return t != Target::kNative; }

// The candidate file's extension: ".py" for Python targets, else the backend's.
std::string candidate_extension(Target t, Backend backend);
// The file a cli agent writes in its workspace: Atrex-Bench's generated_kernel.py for Python
// targets, else kernel<the backend's extension>.
std::string workspace_candidate_name(Target t, Backend backend);
// The tag of the candidate's fenced code block: python, cuda, hip or cpp.
const char* candidate_fence(Target t, Backend backend);

// Why `backend` cannot evaluate candidates of target `t` (nullopt: it can): Python candidates
// run on cpu (torch only: no target DSL compiles for the CPU) and cuda; triton needs cuda.
std::optional<std::string> target_unsupported(Target t, Backend backend);

// The release's format and constraints (prompt/*/constraints.md) in atrex's words, for Python
// targets: "one complete Python file, generated_kernel.py, that defines ..." followed by what
// the main compute path must be (Triton kernels launched from forward, or PyTorch only) and the
// rules (no importing or wrapping the reference, no torch.compile, ...). Refers to the
// reference's signature as "given below".
std::string python_format_text(Target t);

// The reference's Python signature for `op`, as Atrex-Bench's reference.py has it: `__init__`
// takes the parameters that size no tensor (the shapes' init_kwargs, e.g. rms_norm's eps, with
// their defaults), `forward` the input tensors in the operator's order, and the outputs come
// back in the operator's order. Empty when atrex has no native definition of `op`.
std::string python_signature(const std::string& op);

}  // namespace atrex::agent
