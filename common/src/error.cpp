#include "atrex/common/error.h"

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
  return (error.code == ErrorCode::kInvalidInput || error.code == ErrorCode::kNotFound) ? 2 : 1;
}

Error with_context(Error error, const std::string& context) {
  error.message = context + ": " + error.message;
  return error;
}

}  // namespace atrex
