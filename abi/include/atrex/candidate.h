/*
 * atrex/candidate.h — the atrex candidate ABI, version 1.
 *
 * A candidate is ONE source file (.cu for the cuda backend, .hip for hip, .cpp for cpu) that
 * includes this header (and, through it, DLPack's dlpack/dlpack.h) and exports one C-linkage
 * entry point:
 *
 *     ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch);
 *
 * It needs nothing else from atrex. The runner compiles it into a shared object
 * (nvcc / hipcc / c++ with -shared -fPIC), loads it in a child process, and calls the entry
 * point with the operator's inputs and pre-allocated outputs for one shape.
 *
 * Contract (what the runner guarantees and checks):
 *   - Tensors are DLPack DLTensors (DLPack v0.6+): row-major and contiguous (strides == NULL),
 *     byte_offset == 0, on the backend's device (kDLCPU, kDLCUDA or kDLROCM). Element types:
 *       bf16  {kDLBfloat, 16, 1}    fp16 {kDLFloat, 16, 1}   fp32 {kDLFloat, 32, 1}
 *       int32 {kDLInt, 32, 1}       int64 {kDLInt, 64, 1}    uint8 {kDLUInt, 8, 1}
 *       fp8 e4m3 (OCP "fn" variant) {ATREX_DL_FLOAT8_E4M3FN, 8, 1}
 *   - Inputs and outputs come in the order of the operator's signature (`atrex problems show
 *     OP`) and carry their names; look them up by name with atrex_input()/atrex_output().
 *   - Inputs are READ-ONLY: the runner verifies after every call that they are bit-identical.
 *   - Outputs are separate buffers, POISONED (NaN / sentinel bytes) before every call: every
 *     element must be written. Nothing survives between calls: no caching of results.
 *   - `params` holds the shape's init_kwargs and input_kwargs (e.g. token_count, hidden_size,
 *     eps) by name; look them up with atrex_param_int() etc.
 *   - `stream` is the cudaStream_t / hipStream_t to launch on (NULL for cpu). All work must be
 *     enqueued on it (or complete before the call returns); timing covers the device.
 *   - Return 0 on success. Any other value fails the shape; atrex_set_error_message() text, if
 *     any, is kept in the result record.
 *   - The call may be made many times, with fresh inputs at new addresses each time.
 *
 * Errors that kill the process (segfault, illegal address, abort, hang) are contained: the
 * shape is recorded as `crashed` or `timeout` and evaluation continues.
 *
 * Source: docs/architecture.md §4 (Candidate ABI); DLPack: https://dmlc.github.io/dlpack/latest/
 */
#ifndef ATREX_CANDIDATE_H_
#define ATREX_CANDIDATE_H_

#include <stdint.h>
#include <string.h>

#include <dlpack/dlpack.h>

#define ATREX_CANDIDATE_ABI_VERSION 1u

/* fp8 e4m3fn travels with the DLPack 1.x type code (kDLFloat8_e4m3fn); DLPack 0.6 has none. */
#define ATREX_DL_FLOAT8_E4M3FN 10

#ifdef __cplusplus
#define ATREX_CANDIDATE_EXPORT extern "C" __attribute__((visibility("default")))
extern "C" {
#else
#define ATREX_CANDIDATE_EXPORT __attribute__((visibility("default")))
#endif

/* Kinds of named parameter. */
typedef enum AtrexParamKind {
  ATREX_PARAM_INT = 0,     /* int_value */
  ATREX_PARAM_FLOAT = 1,   /* float_value */
  ATREX_PARAM_BOOL = 2,    /* int_value: 0 or 1 */
  ATREX_PARAM_STRING = 3,  /* string_value */
  ATREX_PARAM_INT_LIST = 4 /* int_list[0 .. int_list_length) */
} AtrexParamKind;

typedef struct AtrexParam {
  const char* name;
  int32_t kind; /* AtrexParamKind */
  int64_t int_value;
  double float_value;
  const char* string_value;
  const int64_t* int_list;
  int64_t int_list_length;
} AtrexParam;

/* tensor.data may differ from one call to the next (timed calls' inputs are views the runner
 * moves): read it at every call, never keep it from an earlier one. */
typedef struct AtrexNamedTensor {
  const char* name;
  DLTensor tensor;
} AtrexNamedTensor;

typedef struct AtrexLaunch {
  uint32_t abi_version;      /* ATREX_CANDIDATE_ABI_VERSION of the runner */
  const char* operator_name; /* e.g. "rms_norm" */
  const char* shape_id;      /* Atrex shape id, e.g. "3" (do not specialise on it) */
  const AtrexNamedTensor* inputs;
  int32_t num_inputs;
  const AtrexNamedTensor* outputs; /* tensor.data is writable */
  int32_t num_outputs;
  const AtrexParam* params;
  int32_t num_params;
  void* stream; /* cudaStream_t / hipStream_t; NULL on cpu */
} AtrexLaunch;

/* The entry point's symbol name and type. */
#define ATREX_CANDIDATE_ENTRY_POINT "atrex_candidate_run"
typedef int (*AtrexCandidateRunFn)(const AtrexLaunch* launch);

/* Optional: a candidate may export this to return a message explaining a non-zero return. */
#define ATREX_CANDIDATE_ERROR_SYMBOL "atrex_candidate_error_message"
typedef const char* (*AtrexCandidateErrorFn)(void);

/* ---- helpers (header-only, no atrex library needed) ---------------------------------- */

/* The input tensor called `name`, or NULL. */
static inline const DLTensor* atrex_input(const AtrexLaunch* launch, const char* name) {
  for (int32_t i = 0; i < launch->num_inputs; ++i) {
    if (strcmp(launch->inputs[i].name, name) == 0) return &launch->inputs[i].tensor;
  }
  return (const DLTensor*)0;
}

/* The output tensor called `name`, or NULL. */
static inline const DLTensor* atrex_output(const AtrexLaunch* launch, const char* name) {
  for (int32_t i = 0; i < launch->num_outputs; ++i) {
    if (strcmp(launch->outputs[i].name, name) == 0) return &launch->outputs[i].tensor;
  }
  return (const DLTensor*)0;
}

/* The parameter called `name`, or NULL. */
static inline const AtrexParam* atrex_param(const AtrexLaunch* launch, const char* name) {
  for (int32_t i = 0; i < launch->num_params; ++i) {
    if (strcmp(launch->params[i].name, name) == 0) return &launch->params[i];
  }
  return (const AtrexParam*)0;
}

/* Integer parameter (INT or BOOL), or `fallback` when absent. */
static inline int64_t atrex_param_int(const AtrexLaunch* launch, const char* name,
                                      int64_t fallback) {
  const AtrexParam* p = atrex_param(launch, name);
  if (!p) return fallback;
  if (p->kind == ATREX_PARAM_INT || p->kind == ATREX_PARAM_BOOL) return p->int_value;
  if (p->kind == ATREX_PARAM_FLOAT) return (int64_t)p->float_value;
  return fallback;
}

/* Floating-point parameter (FLOAT or INT), or `fallback` when absent. */
static inline double atrex_param_float(const AtrexLaunch* launch, const char* name,
                                       double fallback) {
  const AtrexParam* p = atrex_param(launch, name);
  if (!p) return fallback;
  if (p->kind == ATREX_PARAM_FLOAT) return p->float_value;
  if (p->kind == ATREX_PARAM_INT || p->kind == ATREX_PARAM_BOOL) return (double)p->int_value;
  return fallback;
}

/* Number of elements of a tensor. */
static inline int64_t atrex_numel(const DLTensor* t) {
  int64_t n = 1;
  for (int32_t i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATREX_CANDIDATE_H_ */
