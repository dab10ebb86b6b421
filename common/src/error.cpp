#include "atrex/common/error.h"

#include <cstdio>
#include <cstdlib>

namespace atrex {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidInput: return "invalid input";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kIo: return "i/o error";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kInternal: return "internal error";
  }
  return "unknown error";
}

int exit_code_for(const Error& error) {
  switch (error.code) {
    case ErrorCode::kInvalidInput:
    case ErrorCode::kNotFound: return 2;
    case ErrorCode::kUnavailable: return 3;
    default: return 1;
  }
}

Error with_context(Error error, const std::string& context) {
  error.message = context + ": " + error.message;
  return error;
}

void assertion_failed(const char* condition, const char* file, int line, std::string_view message) {
  std::fprintf(stderr, "atrex: internal error: %s:%d: assertion `%s` failed%s%.*s\n", file, line,
               condition, message.empty() ? "" : ": ", static_cast<int>(message.size()),
               message.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace atrex
