// The one error vocabulary of atrex: tl::expected<T, atrex::Error>.
//
// Library exceptions (nlohmann_json, yaml-cpp, std::filesystem) are caught where they are
// raised and converted here. A bad *candidate* is never an Error: it is data in its result
// record (status + reason). Bad *user input* (sweep file, problem data, config) is
// ErrorCode::kInvalidInput and its message names the file, the field and the offending value;
// the CLI maps it to exit code 2.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include <tl/expected.hpp>

namespace atrex {

enum class ErrorCode {
  kInvalidInput,  // user-supplied file/flag is malformed (exit code 2)
  kNotFound,      // a named thing (operator, file, profile) does not exist (exit code 2)
  kIo,            // filesystem or pipe failure
  kUnavailable,   // a service or device is not reachable right now (retryable; exit code 3)
  kTimeout,       // a deadline passed
  kInternal,      // a bug or a broken invariant in atrex itself
};

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
};

template <class T>
using Result = tl::expected<T, Error>;
// The result of an operation that yields nothing but may fail.
using Status = Result<void>;

// Returns Result<void> success.
inline Result<void> ok() { return {}; }

inline tl::unexpected<Error> make_error(ErrorCode code, std::string message) {
  return tl::unexpected<Error>(Error{code, std::move(message)});
}
inline tl::unexpected<Error> invalid_input(std::string message) {
  return make_error(ErrorCode::kInvalidInput, std::move(message));
}
inline tl::unexpected<Error> not_found(std::string message) {
  return make_error(ErrorCode::kNotFound, std::move(message));
}
inline tl::unexpected<Error> io_error(std::string message) {
  return make_error(ErrorCode::kIo, std::move(message));
}
inline tl::unexpected<Error> internal_error(std::string message) {
  return make_error(ErrorCode::kInternal, std::move(message));
}

// "invalid input", "not found", ... for messages and logs.
const char* error_code_name(ErrorCode code);

// Process exit code for an error reaching the CLI (README "Exit codes"): 2 for bad input or
// unknown names, 3 when something the command needs is unavailable here or now (no GPU for a
// GPU backend, a Redis or Slurm that cannot be reached), else 1.
int exit_code_for(const Error& error);

// Prefixes the message with context ("loading sweep.yaml: ...") keeping the code.
Error with_context(Error error, const std::string& context);

// Prints "atrex: internal error: <file>:<line>: <condition> <message>" to stderr and aborts.
[[noreturn]] void assertion_failed(const char* condition, const char* file, int line,
                                   std::string_view message);

}  // namespace atrex

// Returns the error of a Result-valued expression from the enclosing function.
#define ATREX_TRY(expr) ATREX_TRY_IMPL_(ATREX_CONCAT_(atrex_try_result_, __COUNTER__), expr)
#define ATREX_TRY_IMPL_(tmp, expr)                             \
  do {                                                         \
    auto tmp = (expr);                                         \
    if (!tmp) return ::tl::unexpected(std::move(tmp).error()); \
  } while (0)

#define ATREX_CONCAT_INNER_(a, b) a##b
#define ATREX_CONCAT_(a, b) ATREX_CONCAT_INNER_(a, b)
// `ATREX_ASSIGN_OR_RETURN(auto x, f());` declares/assigns x from a Result or returns its error.
#define ATREX_ASSIGN_OR_RETURN(lhs, expr) \
  ATREX_ASSIGN_OR_RETURN_IMPL_(ATREX_CONCAT_(atrex_result_, __COUNTER__), lhs, expr)
#define ATREX_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr)         \
  auto tmp = (expr);                                         \
  if (!tmp) return ::tl::unexpected(std::move(tmp).error()); \
  lhs = std::move(*tmp)

// Invariants of atrex itself, checked in every build type: a broken one aborts the process
// (with the condition, file and line) rather than letting it write a wrong score. Never for
// what the environment or the input controls (STYLE.md "Errors": those are Errors or records).
#define ATREX_ASSERT(cond, ...)                                                        \
  do {                                                                                 \
    if (!(cond)) ::atrex::assertion_failed(#cond, __FILE__, __LINE__, "" __VA_ARGS__); \
  } while (0)
// A switch over an enum that covered every value fell through.
#define ATREX_UNREACHABLE(what) \
  ::atrex::assertion_failed("unreachable", __FILE__, __LINE__, "no case for this " what)
