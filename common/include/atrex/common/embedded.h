// A file compiled into the binary by cmake/AtrexEmbed.cmake (default sweep, kernel templates).
#pragma once

#include <optional>
#include <span>
#include <string_view>

namespace atrex {

struct EmbeddedFile {
  std::string_view path;     // path relative to the embedding component's BASE folder
  std::string_view content;  // the bytes, not NUL-terminated
};

// Finds `path` in `files`; nullopt when absent.
inline std::optional<std::string_view> find_embedded(std::span<const EmbeddedFile> files,
                                                     std::string_view path) {
  for (const auto& f : files) {
    if (f.path == path) return f.content;
  }
  return std::nullopt;
}

}  // namespace atrex
