// Content hashes (OpenSSL SHA-256): candidate identity, compile-cache keys, task ids.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace atrex {

// Lower-case hex SHA-256 of `data` (64 characters).
std::string sha256_hex(std::string_view data);
// Lower-case hex SHA-256 of `buffers` (pointer, bytes), one after the other, as if concatenated
// (the judge's digest of a call's outputs, common/include/atrex/common/wire/judge_messages.h).
std::string sha256_hex_of_buffers(const std::vector<std::pair<const void*, size_t>>& buffers);
// Whether `s` is what sha256_hex / sha256_hex_of_buffers return: 64 lower-case hex digits.
bool is_sha256_hex(std::string_view s);
// SHA-1 (hex), for Redis script ids (EVALSHA) only.
std::string sha1_hex(std::string_view data);

}  // namespace atrex
