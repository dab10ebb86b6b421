// parse_url and find_header: the parts of atrex/common/http/client.h that need no I/O.
#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <string>

#include <fmt/format.h>

#include "atrex/common/http/client.h"

namespace atrex::http {
namespace {

char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

// ASCII case-insensitive (field names, RFC 9110 §5.1).
bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return lower(x) == lower(y); });
}

// RFC 3986 §3.2.2 reg-name without percent-encoding and sub-delims: what DNS names use.
bool is_host_name(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
           c == '~';
  });
}

// The URL for messages: user info replaced by "***".
std::string printable(std::string_view url) {
  const size_t start = url.find("://");
  const size_t from = start == std::string_view::npos ? 0 : start + 3;
  const size_t end = std::min(url.find_first_of("/?#", from), url.size());
  const size_t at = url.substr(0, end).rfind('@');
  if (at == std::string_view::npos || at < from) return std::string(url);
  return fmt::format("{}***{}", url.substr(0, from), url.substr(at));
}

// The port after a host, digits only; the error is the reason only.
Result<int> parse_port(std::string_view port) {
  if (port.empty()) return invalid_input("empty port");
  const bool digits = port.size() <= 5 && std::all_of(port.begin(), port.end(),
                                                      [](char c) { return c >= '0' && c <= '9'; });
  const int n = digits ? std::stoi(std::string(port)) : 0;
  if (n < 1 || n > 65535)
    return invalid_input(fmt::format("port \"{}\" is not a number in 1..65535", port));
  return n;
}

// host[:port] or [v6][:port] into `out` (its scheme already set); the error is the reason only.
Result<void> parse_authority(std::string_view authority, Url& out) {
  std::string_view rest;  // ":port" or empty
  if (authority.starts_with('[')) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return invalid_input("IPv6 literal has no closing ']'");
    out.host = std::string(authority.substr(1, close - 1));
    unsigned char buf[sizeof(in6_addr)];
    if (::inet_pton(AF_INET6, out.host.c_str(), buf) != 1)
      return invalid_input(fmt::format("\"{}\" is not an IPv6 address", out.host));
    rest = authority.substr(close + 1);
  } else {
    const size_t colon = authority.find(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) rest = authority.substr(colon);
    if (rest.find(':', 1) != std::string_view::npos)
      return invalid_input("an IPv6 address must be written in brackets ([::1])");
  }
  if (out.host.empty()) return invalid_input("no host");
  if (out.host.find(':') == std::string::npos && !is_host_name(out.host))
    return invalid_input(
        fmt::format("host \"{}\" has a character not allowed in a host name", out.host));
  if (rest.empty()) {
    out.port = out.scheme == "https" ? 443 : 80;
    return ok();
  }
  if (!rest.starts_with(':')) return invalid_input("unexpected characters after the IPv6 literal");
  ATREX_ASSIGN_OR_RETURN(out.port, parse_port(rest.substr(1)));
  return ok();
}

}  // namespace

Result<Url> parse_url(std::string_view url) {
  const auto bad = [&](std::string_view why) {
    return invalid_input(fmt::format("URL \"{}\": {}", printable(url), why));
  };
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos) return bad("no scheme (expected http:// or https://)");
  Url out;
  for (char c : url.substr(0, sep)) out.scheme += lower(c);
  if (out.scheme != "http" && out.scheme != "https")
    return bad(fmt::format("scheme \"{}\" is not http or https", out.scheme));
  const std::string_view rest = url.substr(sep + 3);
  const size_t end = std::min(rest.find_first_of("/?#"), rest.size());
  const std::string_view authority = rest.substr(0, end);
  if (authority.find('@') != std::string_view::npos)
    return bad("user info is not supported (send credentials in a header)");
  if (auto parsed = parse_authority(authority, out); !parsed) return bad(parsed.error().message);
  std::string_view target = rest.substr(end);
  target = target.substr(0, target.find('#'));
  if (std::any_of(target.begin(), target.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u <= 0x20 || u >= 0x7f;
      }))
    return bad(
        "the path or query holds a space, control or non-ASCII character (percent-encode it)");
  out.target = target.starts_with('/') ? std::string(target) : "/" + std::string(target);
  return out;
}

std::optional<std::string> find_header(const Headers& headers, std::string_view name) {
  std::optional<std::string> value;
  for (const Header& h : headers) {
    if (!iequals(h.name, name)) continue;
    value = value ? *value + ", " + h.value : h.value;
  }
  return value;
}

}  // namespace atrex::http
