// What the CUPTI traces of a shape's timed calls (cupti_trace.h) say about the candidate: the
// kernel-set check of the timed calls, the target-DSL attribution of their kernel time and the
// kernels that never ran.
// Compiled into every evaluation child; only backends that trace call them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "atrex/common/json_io.h"
#include "atrex/common/wire/child_protocol.h"
#include "cupti_trace.h"
#include "shape_run_support.h"

namespace atrex::runner::child {

// The kernels a timed call launches must be the same (as a multiset of names) in every timed
// call on the same input set (SOL-ExecBench's check): a candidate that skips work or replays a
// cached answer when its inputs repeat launches fewer kernels. `set_of`: call id -> input set.
// A wrong_result failure naming two differing calls, else nullopt.
std::optional<Failure> check_kernel_sets(const std::map<uint64_t, CallTrace>& traces,
                                         const std::map<uint64_t, int>& set_of);

// Target-DSL attribution: the share of the timed calls' kernel time spent in kernels the
// candidate's own library (`library`, its ELF symbols: elf_symbols.h) defines; vendor-library
// kernels make up the rest. Sets resp.dsl_share and resp.timing->kernels, or
// resp.dsl_attribution_error when the library's symbols cannot be read.
void attribute_kernels(ChildShapeResponse& resp, const std::string& library,
                       const std::map<uint64_t, CallTrace>& traces);

// Target-DSL attribution of a Python candidate: its own kernels are the ones Triton compiled in
// this process, i.e. the functions of every .cubin under `triton_cache_dir` (the per-task
// TRITON_CACHE_DIR, loader.h python_triton_cache_dir()); torch's, cuBLAS's and cuDNN's kernels
// make up the rest. A candidate without Triton kernels (a PyTorch fallback) gets dsl_share 0.
Result<std::set<std::string>> triton_kernel_names(const std::string& triton_cache_dir);
void attribute_python_kernels(ChildShapeResponse& resp, const std::string& triton_cache_dir,
                              const std::map<uint64_t, CallTrace>& traces);

// The template a demangled kernel name instantiates: the qualified name without template
// arguments or parameters ("(anonymous namespace)::k<4>(float*)" -> "{anon}::k").
std::string kernel_template(const std::string& key);

// Of the defined kernels (kernel_key names), those that never launched and are not another
// instantiation of a kernel template that did launch; `sibling_instances` (optional) gets the
// count of the latter (a vector-width or alignment fallback of a kernel that ran is not a ghost).
std::vector<std::string> ghost_kernels(const std::vector<std::string>& defined_keys,
                                       const std::set<std::string>& launched_keys,
                                       size_t* sibling_instances = nullptr);

// Ghost kernels: the kernels the candidate's library defines (elf_symbols.h defined_kernels)
// that none of the traced calls launched and that are no instantiation of a launched template
// (ghost_kernels), as resp.unlaunched_kernels (demangled; [] when none), and the number of
// unlaunched instantiations of launched templates as resp.unlaunched_instantiations. A flag,
// not a verdict: a kernel for shapes outside the evaluated ones is legitimate. Nothing is set
// when the library's symbols cannot be read.
void report_unlaunched_kernels(ChildShapeResponse& resp, const std::string& library,
                               const std::map<uint64_t, CallTrace>& traces);

// Work outside the timed calls (docs/evaluation.md "Timing"): of the stray records of a batch of
// traced calls (cupti_trace.h StrayRecord), the first that is not the harness's own between the
// calls, as a rejected failure naming it and where it came from; else nullopt. The harness's
// own work is launched by the tracing thread outside every call's window, and its kernels are
// among `harness_keys` (when it is not empty: kernel_key names of the evaluation child's own
// kernels, defined_kernel_keys("/proc/self/exe")) but not among `candidate_keys` (the candidate
// library's, which could otherwise borrow a harness kernel's name); memcpys and memsets carry no
// name and pass on the first two counts. Foreign: a record launched by another thread, one launched
// inside a call's window without its id (the id taken off the thread), a kernel of any other name.
// Each is work the call's CUPTI span and its event window (which ends on the legacy stream, not on
// a non-blocking one) do not hold: kernels/faults/arena_attacks/cupti_escape_side_stream.cu timed
// a one-block pacer while the real kernel ran beside it.
std::optional<Failure> check_stray_work(const std::vector<StrayRecord>& strays,
                                        const std::set<std::string>& harness_keys,
                                        const std::set<std::string>& candidate_keys);

// The kernel_key names of the kernels the ELF file `path` defines (elf_symbols.h
// defined_kernels), read once per path in this process; empty when it cannot be read or defines
// none. `"/proc/self/exe"`: the evaluation child's own kernels (empty for a stripped executable:
// check_stray_work then goes by the thread and the call windows only).
const std::set<std::string>& defined_kernel_keys(const std::string& path);

}  // namespace atrex::runner::child
