/*
 * atrex/candidate_util.h — optional header-only helpers for C++ candidates (ABI version 1).
 *
 * A candidate needs only atrex/candidate.h; this header removes the boilerplate every kernel
 * repeats, so that a candidate source is its kernel: tensor lookup and validation with one
 * error message, the exported error-message symbol, the widest usable vector width, bf16/fp16
 * conversions on the host, and a small fork-join over rows for CPU candidates. It compiles as
 * C++17 with g++/clang (cpu), nvcc (cuda) and hipcc (hip); nothing in it runs on the device.
 *
 *   #include "atrex/candidate_util.h"
 *   ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT
 *   ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
 *     atrex::cand::Tensors t(launch, "rms_norm");
 *     const DLTensor* x = t.input("x", atrex::cand::kBF16, 2);     // bf16 [T, H]
 *     const DLTensor* w = t.input("weight", atrex::cand::kBF16, 1); // bf16 [H]
 *     const DLTensor* o = t.output("out", atrex::cand::kBF16, 2);   // bf16 [T, H]
 *     if (!t.ok() || !t.same_dims(x, o) || !t.dim_is(w, 0, x->shape[1])) return t.failed();
 *     ...
 *   }
 *
 * Messages are kept in a per-thread buffer and returned by atrex_candidate_error_message()
 * (candidate.h); the runner copies them into the result record.
 */
#ifndef ATREX_CANDIDATE_UTIL_H_
#define ATREX_CANDIDATE_UTIL_H_

#ifndef __cplusplus
#error "atrex/candidate_util.h is C++ (C++17 or later); C candidates use atrex/candidate.h alone"
#endif

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <thread>
#include <type_traits>
#include <utility>

#include "atrex/candidate.h"

namespace atrex {
namespace cand {

/* ---- error messages ---------------------------------------------------------------------- */

// The message of the last failed call on this thread ("" when none).
inline char* error_buffer() {
  static thread_local char buffer[512] = {0};
  return buffer;
}

// Records a printf-style message and returns 1 (the entry point's failure code).
[[gnu::format(printf, 1, 2)]] inline int fail(const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::vsnprintf(error_buffer(), 512, format, args);
  va_end(args);
  return 1;
}

/* ---- element types ----------------------------------------------------------------------- */

// The DLPack element types of candidate.h, as comparable values.
struct DType {
  uint8_t code;
  uint8_t bits;
  const char* name;
};
inline constexpr DType kBF16{kDLBfloat, 16, "bf16"};
inline constexpr DType kF16{kDLFloat, 16, "fp16"};
inline constexpr DType kF32{kDLFloat, 32, "fp32"};
inline constexpr DType kI32{kDLInt, 32, "int32"};
inline constexpr DType kI64{kDLInt, 64, "int64"};
inline constexpr DType kU8{kDLUInt, 8, "uint8"};
inline constexpr DType kFP8E4M3{ATREX_DL_FLOAT8_E4M3FN, 8, "fp8_e4m3"};

inline bool is(const DLTensor* t, DType d) {
  return t && t->dtype.code == d.code && t->dtype.bits == d.bits && t->dtype.lanes == 1;
}

/* ---- tensor lookup and validation ---------------------------------------------------------- */

// Looks up the launch's tensors by name and checks dtype and rank; the first failure is kept
// (with the operator's name) and every later check passes through, so a candidate checks all
// it needs and then asks ok() once.
class Tensors {
 public:
  Tensors(const AtrexLaunch* launch, const char* op) : launch_(launch), op_(op) {}

  const DLTensor* input(const char* name, DType dtype, int ndim) {
    return check(atrex_input(launch_, name), "input", name, dtype, ndim);
  }
  const DLTensor* output(const char* name, DType dtype, int ndim) {
    return check(atrex_output(launch_, name), "output", name, dtype, ndim);
  }
  // a and b have the same dims.
  bool same_dims(const DLTensor* a, const DLTensor* b) {
    if (!ok_ || !a || !b) return false;
    bool same = a->ndim == b->ndim;
    for (int32_t i = 0; same && i < a->ndim; ++i) same = a->shape[i] == b->shape[i];
    if (!same) return failure("%s: tensors of different dims where the same are expected", op_);
    return true;
  }
  // t's dimension i is `expected`.
  bool dim_is(const DLTensor* t, int i, int64_t expected) {
    if (!ok_ || !t) return false;
    if (i >= t->ndim || t->shape[i] != expected) {
      return failure("%s: dimension %d is %lld, expected %lld", op_, i,
                     static_cast<long long>(i < t->ndim ? t->shape[i] : -1),
                     static_cast<long long>(expected));
    }
    return true;
  }
  bool ok() const { return ok_; }
  // The entry point's return value after a failed check (the message is recorded).
  int failed() const { return 1; }

 private:
  const DLTensor* check(const DLTensor* t, const char* role, const char* name, DType dtype,
                        int ndim) {
    if (!ok_) return t;
    if (!t) {
      failure("%s: missing %s tensor \"%s\"", op_, role, name);
    } else if (!is(t, dtype) || t->ndim != ndim) {
      failure("%s: %s \"%s\": expected %s with %d dims (got type code %d/%d bits, %d dims)", op_,
              role, name, dtype.name, ndim, t->dtype.code, t->dtype.bits, t->ndim);
    }
    return t;
  }
  [[gnu::format(printf, 2, 3)]] bool failure(const char* format, ...) {
    va_list args;
    va_start(args, format);
    std::vsnprintf(error_buffer(), 512, format, args);
    va_end(args);
    ok_ = false;
    return false;
  }

  const AtrexLaunch* launch_;
  const char* op_;
  bool ok_ = true;
};

/* ---- vector width ------------------------------------------------------------------------ */

inline bool aligned(const void* p, int bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

// The widest power-of-two vector width v <= max_vec (elements of `elem_bytes` each) such that
// `row_elems` % v == 0 and every pointer is v*elem_bytes aligned; 1 is the scalar fallback.
inline int pick_vector_width(int max_vec, int64_t row_elems, int elem_bytes,
                             std::initializer_list<const void*> pointers) {
  int v = max_vec;
  for (; v > 1; v /= 2) {
    bool fits = row_elems % v == 0;
    for (const void* p : pointers) fits = fits && aligned(p, v * elem_bytes);
    if (fits) break;
  }
  return v < 1 ? 1 : v;
}

// Calls f(std::integral_constant<int, V>{}) for the V in {8, 4, 2, 1} equal to `v`, limited to
// V <= MaxVec (wider instantiations are never made): a runtime width picks a compiled kernel.
template <int MaxVec, class F>
void dispatch_vector_width(int v, F&& f) {
  if constexpr (MaxVec >= 8) {
    if (v == 8) return f(std::integral_constant<int, 8>{});
  }
  if constexpr (MaxVec >= 4) {
    if (v == 4) return f(std::integral_constant<int, 4>{});
  }
  if constexpr (MaxVec >= 2) {
    if (v == 2) return f(std::integral_constant<int, 2>{});
  }
  return f(std::integral_constant<int, 1>{});
}

/* ---- host conversions (cpu candidates; device code has cuda_bf16.h / hip_bf16.h) ---------- */

inline float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest even; NaN stays a quiet NaN. Branch-free so that loops vectorise.
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// fp8 e4m3fn (OCP FP8: bias 7, 3 mantissa bits, no infinities; 0x7f / 0xff are NaN) to float.
inline float fp8_e4m3_to_float(uint8_t v) {
  const uint32_t e = (v >> 3) & 15u, m = v & 7u;
  uint32_t u;
  if ((v & 0x7fu) == 0x7fu) {
    u = 0x7fc00000u;
  } else if (e) {
    u = ((e + 120u) << 23) | (m << 20);
  } else {
    const float sub = static_cast<float>(m) * 0.001953125f;  // m * 2^-9
    std::memcpy(&u, &sub, sizeof u);
  }
  u |= static_cast<uint32_t>(v & 0x80u) << 24;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/* ---- fork-join over rows (cpu candidates) -------------------------------------------------- */

// Runs body(begin, end) over [0, rows) in contiguous chunks: at most `max_threads` of them and
// none with less than `min_work` units of work (rows * work_per_row; starting a thread costs
// tens of microseconds). The calling thread takes the first chunk; a chunk whose thread cannot
// be started runs inline. Threads live only for this call. max_threads <= 16.
template <class Body>
void parallel_rows(int64_t rows, int64_t work_per_row, int max_threads, int64_t min_work,
                   const Body& body) {
  if (rows <= 0) return;
  int64_t n = min_work > 0 ? rows * work_per_row / min_work : rows;
  if (n > max_threads) n = max_threads;
  if (n > 16) n = 16;
  if (n > rows) n = rows;
  if (n < 1) n = 1;
  const int64_t chunk = (rows + n - 1) / n;
  std::thread pool[16];
  int started = 0;
  for (int64_t t = 1; t < n; ++t) {
    const int64_t b = t * chunk, e = b + chunk < rows ? b + chunk : rows;
    if (b >= e) break;
    try {
      pool[started] = std::thread(body, b, e);
      ++started;
    } catch (...) {
      body(b, e);
    }
  }
  body(int64_t{0}, chunk < rows ? chunk : rows);
  for (int i = 0; i < started; ++i) pool[i].join();
}

}  // namespace cand
}  // namespace atrex

// Defines the optional atrex_candidate_error_message() (candidate.h) returning the message of
// the last atrex::cand::fail() or failed Tensors check on the calling thread.
#define ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT                               \
  ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message(void) { \
    return ::atrex::cand::error_buffer();                                  \
  }

#endif /* ATREX_CANDIDATE_UTIL_H_ */
