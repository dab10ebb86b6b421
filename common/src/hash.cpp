#include "atrex/common/hash.h"

#include <openssl/evp.h>

#include <array>
#include <memory>

#include <fmt/format.h>

#include "atrex/common/error.h"

namespace atrex {
namespace {

std::string hex(const unsigned char* digest, unsigned int length) {
  std::string out;
  out.reserve(length * 2);
  for (unsigned int i = 0; i < length; ++i) out += fmt::format("{:02x}", digest[i]);
  return out;
}

std::string digest_hex(std::string_view data, const EVP_MD* md) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  EVP_Digest(data.data(), data.size(), digest.data(), &length, md, nullptr);
  return hex(digest.data(), length);
}

}  // namespace

std::string sha256_hex(std::string_view data) { return digest_hex(data, EVP_sha256()); }

std::string sha256_hex_of_buffers(const std::vector<std::pair<const void*, size_t>>& buffers) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  bool good = ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1;
  for (const auto& [p, n] : buffers) good = good && EVP_DigestUpdate(ctx.get(), p, n) == 1;
  good = good && EVP_DigestFinal_ex(ctx.get(), digest.data(), &length) == 1;
  ATREX_ASSERT(good, "OpenSSL's SHA-256 failed");
  return hex(digest.data(), length);
}

bool is_sha256_hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string sha1_hex(std::string_view data) { return digest_hex(data, EVP_sha1()); }

}  // namespace atrex
