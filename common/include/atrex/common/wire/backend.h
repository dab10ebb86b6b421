// The backend a candidate is built for and runs on (DESIGN.md §4 "Candidate ABI"): one type
// instead of strings compared across the code. On the wire and in sweep files it is spelled
// "cpu", "cuda" or "hip".
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "atrex/common/error.h"
#include "atrex/common/json_io.h"

namespace atrex {

enum class Backend {
  kCpu,   // host C++ (.cpp), built with the system compiler, timed with steady_clock
  kCuda,  // CUDA (.cu), built with nvcc for the runner GPU's arch
  kHip,   // HIP (.hip), built with hipcc; runs only on an AMD GPU
};

inline constexpr std::array<Backend, 3> kAllBackends = {Backend::kCpu, Backend::kCuda,
                                                        Backend::kHip};

// "cpu", "cuda", "hip".
const char* backend_name(Backend b);
// The inverse of backend_name(); kInvalidInput "expected cpu, cuda or hip; got "<s>"".
Result<Backend> parse_backend(std::string_view s);

// A backend, or `auto` (chosen from the machine or the file): what flags and sweep files say.
struct BackendChoice {
  std::optional<Backend> backend;  // nullopt = auto
  bool is_auto() const { return !backend; }
};
// "auto", "cpu", "cuda" or "hip"; kInvalidInput names `what` (the flag or field) and the value.
Result<BackendChoice> parse_backend_choice(std::string_view s, std::string_view what);
std::string backend_choice_name(const BackendChoice& c);

// Source file extension of a backend: ".cpp", ".cu", ".hip".
const char* source_extension(Backend b);
// The backend a file's extension implies (.cu, .hip, .cpp/.cc/.cxx); nullopt when none does.
std::optional<Backend> backend_for_extension(std::string_view extension);
// Name of the evaluation child executable of a backend: "atrex-eval-cpu", ...
std::string eval_child_name(Backend b);
// True for the backends that need a GPU (cuda, hip).
inline bool is_gpu_backend(Backend b) { return b != Backend::kCpu; }

Result<void> read_value(const JsonField& f, Backend& out);
// nlohmann_json serialises the enum by this (ADL), so Json{{"backend", b}} is "cuda", not 1.
inline void to_json(Json& j, Backend b) { j = backend_name(b); }

}  // namespace atrex
