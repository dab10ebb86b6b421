// The compile gate's sandbox (docs/evaluation.md "Sandbox"; runner-private): the compiler runs on
// the candidate's source, so what the source can make it read or write is the candidate's reach
// (attack round 3, 2026-12-06: an assembler `.incbin` of the suite's hidden roofline.json and
// metadata.json put them into the candidate's object, an 80 MiB `.fill` wrote past every child's
// file limit, `#include "/dev/zero"` grows cc1plus without bound, and `/proc/self/environ` holds
// the runner's environment). In bwrap, like the evaluation children: the toolchain and the ABI
// headers read-only, a private work folder of the compile cache (the source alone, and the
// object written back) as the only writable path besides a scratch tmpfs, no network, a cleaned
// environment, and limits on address space and file size.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "atrex/common/process/subprocess.h"

namespace atrex::runner {

struct SandboxedCompile {
  std::vector<std::string> argv;           // bwrap ... -- compiler args...
  std::map<std::string, std::string> env;  // clean_child_environment + the compiler's folder on PATH
};

// `command` (the compiler and its arguments; its files inside `work`) wrapped in bwrap: read-only
// /usr, the toolchain folders (bin, lib, lib64, libexec, include, nvvm, targets, share, llvm,
// amdgcn, .info) of the compiler's own tree (a CUDA toolkit under /usr/local, through its links
// too; never the whole tree: ~/bin/g++ must not bind the home folder),
// /etc/alternatives (Debian's c++ is a link through it), `include_dir` and the folders of
// LD_LIBRARY_PATH; `work` read-write; a 2 GiB scratch tmpfs at /tmp (nvcc's intermediates).
SandboxedCompile sandboxed_compile(const std::filesystem::path& bwrap,
                                   const std::vector<std::string>& command,
                                   const std::filesystem::path& work,
                                   const std::filesystem::path& include_dir);

// The compiler's limits, sandboxed or not: 6 GiB of address space (the heaviest template,
// attention_forward's flash_mma.cu under nvcc, peaks at 225 MB resident) and 64 MiB per file,
// the evaluation children's (its object is 1.2 MB; a larger one fails the compile gate).
const ResourceLimits& compile_limits();

}  // namespace atrex::runner
