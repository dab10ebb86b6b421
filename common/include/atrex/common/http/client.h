// A small synchronous HTTP/1.1 client for http:// and https:// URLs, over Boost.Beast and
// Boost.Asio (Debian libboost-dev 1.74, header-only) and OpenSSL. It is what the
// OpenAI-compatible chat-completions provider POSTs its JSON through (vLLM, SGLang, OpenRouter).
//
// One request per connection (no keep-alive pool: a chat completion takes seconds, a connection
// milliseconds), one deadline for the whole exchange (DNS, connect, TLS handshake, request,
// response). HTTPS verifies the server's certificate chain and its name (DNS name or IP address,
// RFC 6125 / RFC 9110 §4.3.4) and sends SNI for names (RFC 6066 §3), as curl does.
//
// Sources: RFC 9110 (HTTP semantics), RFC 9112 (HTTP/1.1 messages), RFC 3986 (URLs); Boost.Beast
// docs, "HTTP client, asynchronous, SSL" example
// (https://www.boost.org/doc/libs/1_74_0/libs/beast/doc/html/beast/examples.html).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "atrex/common/error.h"

namespace atrex::http {

// An http:// or https:// URL split for connecting (RFC 3986 §3).
struct Url {
  std::string scheme;  // "http" or "https" (lower case)
  std::string host;    // DNS name or IP address; an IPv6 literal without its brackets
  int port = 0;        // 1..65535; 80 for http, 443 for https when the URL names none
  std::string target;  // path and query, as sent in the request line; "/" when the URL has none
};

// Parses http[s]://host[:port][/path][?query][#fragment]. IPv6 literal hosts are written in
// brackets (http://[::1]:8000/v1). The fragment is dropped: it is never sent (RFC 9110 §7.1).
// Errors: kInvalidInput naming the URL and what is wrong (no or another scheme, no host, a
// character not allowed in a host name, a bad IPv6 literal, a port that is empty, not a number or
// outside 1..65535, user info — credentials go in a header — or a space or control character that
// should be percent-encoded). User info is shown as "***" in the message. Pure: thread-safe.
Result<Url> parse_url(std::string_view url);

struct Header {
  std::string name;
  std::string value;
};
using Headers = std::vector<Header>;

// The value of field `name`, compared ASCII case-insensitively (RFC 9110 §5.1); several field
// lines with that name are joined with ", " (RFC 9110 §5.3; not meaningful for Set-Cookie).
// nullopt when absent. Pure: thread-safe.
std::optional<std::string> find_header(const Headers& headers, std::string_view name);

struct Request {
  std::string method = "GET";  // a token (RFC 9110 §9.1), case-sensitive: "GET", "POST", ...
  std::string url;             // parsed with parse_url
  // Sent as given, in order. Host and User-Agent are added unless present here; Content-Length
  // is always the client's (set for a non-empty body, and for POST, PUT and PATCH).
  Headers headers;
  std::string body;
  std::chrono::milliseconds timeout{60'000};       // the whole exchange, DNS and connect included
  std::uint64_t max_response_bytes = 64ull << 20;  // response body after chunked decoding
};

struct Response {
  int status = 0;  // 4xx and 5xx are responses like any other (429 with Retry-After, ...)
  Headers headers;
  std::string body;  // chunked transfer coding removed; content codings (gzip) left as sent
  std::optional<std::string> header(std::string_view name) const {
    return find_header(headers, name);
  }
};

struct TlsOptions {
  // PEM file of the CAs the server's chain must end in; empty = OpenSSL's default paths
  // (Debian: /etc/ssl/certs, from the ca-certificates package).
  std::string ca_file;
  bool insecure = false;  // skip chain and name verification (tests only)
};

// A client holds the TLS context (trusted CAs loaded once). Copies share it. Thread-safe: send()
// may be called from several threads at once, each call has its own connection and I/O context.
class Client {
 public:
  // Errors: kInvalidInput naming a CA file that cannot be loaded, with OpenSSL's reason.
  static Result<Client> create(TlsOptions tls = {});

  // Sends `request` and waits for the whole response (or the request's timeout). An HTTP error
  // status is not an Error: the Response carries it. Error messages name the method and the URL
  // without its query (it may hold a key) and never contain a header value.
  // Errors:
  //  - kInvalidInput: a bad URL, method or header name; a header value with CR, LF or NUL; a
  //    Content-Length or Transfer-Encoding header (the client frames the body); timeout <= 0.
  //  - kUnavailable (worth retrying): DNS failure, connection refused or reset, the connection
  //    closed before the whole response, "timed out after N ms (<phase>)", a failed TLS handshake
  //    with OpenSSL's reason ("certificate verify failed ... (IP address mismatch)").
  //  - kIo: a response that is not HTTP/1.x, a body over max_response_bytes, headers over 64 KiB.
  // A DNS lookup still running at the deadline cannot be interrupted (getaddrinfo): send() then
  // returns the timeout when the lookup ends.
  Result<Response> send(const Request& request) const;

 private:
  struct State;
  explicit Client(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;  // shared by copies; the TLS context is read-only after create()
};

// One request through a Client made for `tls` (its errors, plus create()'s).
Result<Response> send(const Request& request, const TlsOptions& tls = {});

}  // namespace atrex::http
