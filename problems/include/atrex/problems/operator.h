// Native operator definitions: atrex's per-operator tensor signature (names, dtypes, symbolic
// dims over the shape's kwargs), input distributions (those of the Atrex-Bench input.py),
// tolerances, and a reference with the semantics of the Atrex-Bench reference.py. One
// definition serves both backends: the reference and the input generator are written once as
// host/device functors (src/ops/*.h) and run by a CPU executor here and a CUDA executor in
// atrex_problems_cuda (cuda_ops.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/problems/dtype.h"
#include "atrex/problems/suite.h"

namespace atrex::problems {

// How one input tensor is drawn. Values follow the arithmetic of the Atrex input.py:
// `torch.randn(dtype) * scale + offset` rounds to the tensor dtype after each step, so
// sample = round(round(round(n) * scale) + offset) with n ~ N(0, 1) (or U(lo, hi)).
struct Distribution {
  enum Kind : int { kNormal = 0, kUniform = 1 };
  Kind kind = kNormal;
  double scale = 1.0;   // kNormal: multiplier
  double offset = 0.0;  // kNormal: added after scaling
  double lo = 0.0;      // kUniform
  double hi = 1.0;      // kUniform
};

struct ResolvedShape;
struct CompareResult;

// Fills a structured input (ids, slot mappings, sequence lengths, ...) on the host: `data` is
// the tensor's bytes, and every one of them must be written (the CUDA backend draws into
// uninitialised host memory, then copies it to the device). Used instead of `distribution`
// when set.
using CpuGenerateFn = void (*)(const ResolvedShape& shape, size_t index, uint64_t seed, void* data);

// Compares output `index` when elementwise allclose does not fit (a valid prefix given by
// another output, order-free sets, ...). Buffers are host copies in ResolvedShape layout;
// `inputs` are the pristine inputs.
using OutputCompareFn = CompareResult (*)(const ResolvedShape& shape, size_t index,
                                          std::span<const void* const> candidate_outputs,
                                          std::span<const void* const> reference_outputs,
                                          std::span<const void* const> inputs, double atol,
                                          double rtol);

struct TensorSpec {
  std::string name;
  DType dtype = DType::kBF16;
  // Symbolic dims over the shape's parameters: "token_count", "shape[1]/2", "top_k*2". A dim
  // written "=<formula>" is computed by OperatorDef::resolve (the text is documentation).
  std::vector<std::string> dims;
  Distribution distribution;         // inputs: how elements are drawn
  std::string doc;                   // how it is drawn / what it holds, for `problems show`
  CpuGenerateFn generate = nullptr;  // inputs: structured generator instead of `distribution`
  // Outputs: the name of an input this output starts as (the reference updates it in place,
  // e.g. a KV cache). Such an output is initialised with that input's values instead of
  // being poisoned, for the reference and the candidate alike.
  std::string initial_from;
  OutputCompareFn compare = nullptr;  // outputs: custom comparison
};

enum class ParamKind { kInt, kFloat, kBool, kString, kIntList };

struct ParamSpec {
  std::string name;
  ParamKind kind = ParamKind::kInt;
  bool required = true;
  Json default_value;  // when not required
  std::string doc;
};

// Concrete tensor: dims evaluated for one shape. Row-major, contiguous.
struct TensorDesc {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<int64_t> dims;
  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
};

struct OperatorDef;

// One operator at one shape, validated: concrete tensors and parameter values.
struct ResolvedShape {
  const OperatorDef* def = nullptr;
  std::string shape_id;
  std::vector<TensorDesc> inputs;
  std::vector<TensorDesc> outputs;
  Json params = Json::object();  // the shape's kwargs with defaults filled in
  int64_t int_param(std::string_view name) const;
  double float_param(std::string_view name) const;
};

// Reference on the host: `in[i]` / `out[i]` point at tensors laid out as ResolvedShape says.
using CpuReferenceFn = void (*)(const ResolvedShape& shape, std::span<const void* const> in,
                                std::span<void* const> out);

// Fills dims written "=..." and checks cross-parameter constraints after generic resolution.
using ResolveFn = Result<void> (*)(ResolvedShape& shape);

// Analytical roofline counts of one shape: FLOPs by dtype ("bf16", "fp8_e4m3", "fp32", ...)
// and the minimum compulsory traffic (each input read once, each output written once).
using AnalyticRooflineFn = RooflineCounts (*)(const ResolvedShape& shape);

// The range probe of the correctness gate (docs/evaluation.md "Range probe"): one more input
// set per shape in which the named inputs are drawn as usual and multiplied by 2^exponent. A
// power of two is exact in bf16, fp16 and fp32 while the values stay in range, and the
// operator is chosen so that its outputs stay well defined (a norm is invariant to the scale of
// its input, a product scales with it): sums of squares, products and accumulations then leave
// the fp16 range (65504) while fp32 arithmetic is as exact as on the usual inputs, so a
// candidate that computes in fp16 where the operator's policy says fp32 fails. Opt-in per
// operator (`exponent` 0: no probe); only floating inputs drawn from a distribution (never
// integer/index inputs, structured generators or fp8 tensors with scales).
struct RangeProbe {
  int exponent = 0;
  std::vector<std::string> inputs;  // input names to scale
  std::string why;                  // why this exponent exposes fp16 arithmetic here
  bool enabled() const { return exponent != 0 && !inputs.empty(); }
};

// Dimensions the unseen-shape check may change (docs/evaluation.md "Unseen shapes"): besides
// its hot shapes, a candidate is checked for correctness on shapes derived from them with a
// free dimension set to a value no hot shape of the operator has. A free dimension is one the
// operator's semantics puts no constraint on beyond its range (a token or row count), so an
// honest candidate is correct at any value; `param` is an integer parameter or an element of
// an integer-list parameter ("shape[0]").
struct FreeDim {
  std::string param;
  int64_t min_value = 1;  // the smallest value the operator accepts
};

// The edge-case input set of the correctness gate (docs/evaluation.md "Edge-case inputs"): one
// more input set per shape, drawn as for a seed, in which the named inputs are then rewritten on
// the host into the operator's edge cases, the ones random draws never produce: ties at the k-th
// value for the top-k operators, all-zero rows for the quantisers, experts without tokens for
// the routing operators, non-identity block tables and slot mappings and shorter, partial last
// blocks for the paged attentions. Checked like a seed, never timed; every rewrite keeps the
// input within the operator's documented domain (the reference's semantics decide the answer).
// `apply` rewrites input `index` of `shape` (host memory, bytes() long) for `seed`.
using EdgeCaseFn = void (*)(const ResolvedShape& shape, size_t index, uint64_t seed, void* data);
struct EdgeCase {
  std::string input;  // the input tensor's name
  EdgeCaseFn apply = nullptr;
  std::string what;  // what the rewrite produces, for `problems show` and the docs
};

// A reduced shape (docs/sweeps.md "Reduced shapes"): atrex's own shape of an operator with the
// structure of its hot shapes (the same parameters, dtypes and routing; model dimensions cut
// down) and sizes a CPU evaluates in seconds, for the operators none of whose released shapes
// does (GEMMs of several GFLOP judged in fp64, gigabytes of fp8 expert weights, 17M-element
// norms). Never a hot shape: `all` never selects one, it has no released roofline (T_roofline
// comes from the analytic counts), and its id is "reduced-<k>" (Suite::load attaches them to
// OperatorInfo::reduced_shapes). A sweep's shape rule with `reduced: true` evaluates them in
// place of released shapes over its cap.
struct ReducedShape {
  std::string kwargs;  // {"init_kwargs": {...}, "input_kwargs": {...}}, as a shapes.json entry
  std::string why;     // why no released shape fits a CPU run
};

struct OperatorDef {
  std::string name;
  std::string semantics;  // one paragraph: what the reference computes, dtypes of arithmetic
  std::vector<ParamSpec> params;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  CpuReferenceFn reference_cpu = nullptr;
  ResolveFn resolve = nullptr;
  AnalyticRooflineFn analytic = nullptr;  // for `atrex roofline --audit`
  // Tolerances that replace the sweep's for this operator (e.g. fp8 outputs, where one
  // quantisation step exceeds rtol). Each override is documented in `semantics`.
  std::optional<double> atol;
  std::optional<double> rtol;
  // Why `analytic` differs from the released roofline.json where it does (shown by the audit).
  std::string roofline_notes;
  RangeProbe range_probe;          // off unless set (see RangeProbe)
  std::vector<FreeDim> free_dims;  // empty: no unseen-shape check (see FreeDim)
  std::vector<EdgeCase> edge_cases;  // empty: no edge-case input set (see EdgeCase)
  std::vector<ReducedShape> reduced_shapes;  // attached by name (ops/reduced_shapes.cpp)
};

// Evaluates dims and checks parameters. Errors (kInvalidInput) name operator, shape, parameter.
Result<ResolvedShape> resolve_shape(const OperatorDef& def, const Shape& shape);

// Draws input `index` of `shape` for `seed` into host memory `data` (bytes() long), with the
// input's structured generator when it has one, else its distribution. `scale_exponent`: the
// drawn values are multiplied by 2^scale_exponent (the range probe; distribution inputs only).
void generate_input_cpu(const ResolvedShape& shape, size_t index, uint64_t seed, void* data,
                        int scale_exponent = 0);

// Rewrites host input `index` of `shape` in place into its edge-case form for `seed` (EdgeCase);
// false (and `data` untouched) when the operator defines none for that input. Deterministic in
// (shape, index, seed), like the generators.
bool apply_edge_case_cpu(const ResolvedShape& shape, size_t index, uint64_t seed, void* data);

// The exponent the range probe scales input `index` of `def` by (0: not scaled).
int range_probe_exponent(const OperatorDef& def, size_t index);

// Multiplies `n` elements of `dtype` at `data` by 2^exponent in place (bf16, fp16, fp32, fp64;
// exact unless a value leaves the type's range). kInvalidInput for other dtypes.
Result<void> scale_by_power_of_two(DType dtype, void* data, int64_t n, int exponent);

// The operators atrex evaluates natively, and lookup by name.
std::span<const OperatorDef> native_operators();
const OperatorDef* find_native_operator(std::string_view name);
// Like find_native_operator, but kNotFound lists what is covered.
Result<const OperatorDef*> require_native_operator(std::string_view name);

// The operator's primary dtype ("bf16", "fp8_e4m3", ...) for every suite operator, native or
// not: agent-visible facts of the Atrex-Bench input.py generators. Empty when unknown.
std::string_view operator_primary_dtype(std::string_view op);

// Stream id of input `index` for the counter-based generator: distinct per tensor.
inline uint64_t input_stream_id(size_t index) { return 0x5eed0000ull + index; }

// Runs f(i) for i in [0, n) on all host cores (a simple static partition).
void parallel_for_cpu(int64_t n, const std::function<void(int64_t, int64_t)>& range_fn);

}  // namespace atrex::problems
