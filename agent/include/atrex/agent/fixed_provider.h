// The `fixed` provider: no agent at all. It proposes one given kernel per operator, once, so a
// sweep of `fixed` agents re-measures a fixed set of kernels (the nightly regression sweep,
// sweeps/nightly.yaml; docs/reports.md "Nightly"). The loop then evaluates it (the quick
// evaluation) and, when correct, gives it the full evaluation as any agent's best candidate.
//
// Sweep-file option `kernels:` (required) names where the kernel of each operator comes from:
//   reference     the embedded reference candidates (kernels/reference/<op>/naive.cpp for the
//                 cpu backend, naive.cu for cuda and hip);
//   RESULTS DIR   a sweep's results folder (it holds manifest.json and kernels/index.json,
//                 atrex.kernels/1): per operator the kernel of the agent with the highest S_i
//                 (S_i > 0) in that sweep, its sha256 checked against the index;
//   FOLDER        <FOLDER>/<op>/<file>: exactly one file per operator whose extension is the
//                 backend's (.cpp, .cu, .hip) or .py.
// A relative path is relative to the sweep file. An operator without a kernel there ends its
// (agent, operator) with an error naming the place looked at (kNotFound), as the search
// provider does for an operator without templates.
#pragma once

#include <memory>
#include <string>

#include "atrex/agent/provider.h"
#include "atrex/agent/provider_registry.h"

namespace atrex::agent {

struct FixedKernel {
  std::string source;
  std::string file_name;
  Json provenance;  // {"kernels": where, "file": path, and for a results folder "agent", "s_i"}
};

// The kernel of `op` for `backend` from `kernels` (as the option above, already absolute).
// Errors: kNotFound (no kernel for op), kInvalidInput (an index that does not read, a file whose
// sha256 differs from the index's, two candidate files for op), kIo.
Result<FixedKernel> find_fixed_kernel(const std::string& kernels, const std::string& op,
                                      Backend backend);

Result<std::shared_ptr<ProviderFactory>> make_fixed_provider_factory();

}  // namespace atrex::agent
