// Content hashes (OpenSSL SHA-256): candidate identity, compile-cache keys, task ids.
#pragma once

#include <string>
#include <string_view>

namespace atrex {

// Lower-case hex SHA-256 of `data` (64 characters).
std::string sha256_hex(std::string_view data);
// SHA-1 (hex), for Redis script ids (EVALSHA) only.
std::string sha1_hex(std::string_view data);

}  // namespace atrex
