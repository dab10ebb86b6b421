// HTTP/1.1 over Beast: one io_context per send(), the exchange as a C++20 coroutine, and one
// deadline for all of it: io_context::run_until stops at the deadline, the socket is closed, and
// the operation then in flight completes with an error that is reported as the timeout.
#include "atrex/common/http/client.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <exception>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace atrex::http {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace ssl = boost::asio::ssl;
using tcp = asio::ip::tcp;
using WireRequest = bhttp::request<bhttp::string_body>;

namespace {

constexpr std::uint32_t kMaxHeaderBytes = 64 * 1024;

// RFC 9110 §5.6.2: token = 1*tchar.
bool is_token(std::string_view s) {
  static constexpr std::string_view kExtra = "!#$%&'*+-.^_`|~";
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || kExtra.find(c) != std::string_view::npos;
  });
}

bool is_ip_literal(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 ||
         ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// Host field value (RFC 9110 §7.2): the port only when it is not the scheme's default.
std::string host_field(const Url& u) {
  const bool v6 = u.host.find(':') != std::string::npos;
  const std::string host = v6 ? "[" + u.host + "]" : u.host;
  const bool default_port = u.port == (u.scheme == "https" ? 443 : 80);
  return default_port ? host : fmt::format("{}:{}", host, u.port);
}

// The request as Beast sends it; kInvalidInput for what cannot go on the wire as given.
Result<WireRequest> wire_request(const Request& r, const Url& u) {
  if (!is_token(r.method))
    return invalid_input(
        fmt::format("HTTP method \"{}\" is not a token (RFC 9110 §9.1)", r.method));
  WireRequest req;
  req.version(11);
  const bhttp::verb verb = bhttp::string_to_verb(r.method);
  if (verb == bhttp::verb::unknown) {
    req.method_string(r.method);
  } else {
    req.method(verb);
  }
  req.target(u.target);
  for (const Header& h : r.headers) {
    if (!is_token(h.name))
      return invalid_input(fmt::format("HTTP header name \"{}\" is not a token", h.name));
    if (h.value.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos)
      return invalid_input(fmt::format("HTTP header {}: value holds CR, LF or NUL", h.name));
    if (beast::iequals(h.name, "Content-Length") || beast::iequals(h.name, "Transfer-Encoding"))
      return invalid_input(fmt::format("HTTP header {} is set by the client", h.name));
  }
  if (!find_header(r.headers, "Host")) req.set(bhttp::field::host, host_field(u));
  if (!find_header(r.headers, "User-Agent")) req.set(bhttp::field::user_agent, "atrex");
  for (const Header& h : r.headers) req.insert(h.name, h.value);
  // RFC 9110 §8.6: Content-Length for content, and for methods whose requests carry content.
  if (!r.body.empty() || r.method == "POST" || r.method == "PUT" || r.method == "PATCH")
    req.content_length(r.body.size());
  req.body() = r.body;
  return req;
}

// The state of one send(): outlives the io_context run it is used by.
struct Exchange {
  const Request& request;
  Url url;
  std::string where;  // "POST https://host:port/path" (no query: it may hold a key)
  const char* phase = "resolving";
  bool timed_out = false;
  Result<Response> result = internal_error("HTTP exchange did not finish");
};

Error failure(const Exchange& x, std::string_view step, const beast::error_code& ec) {
  if (x.timed_out) {
    return Error{ErrorCode::kUnavailable, fmt::format("{}: timed out after {} ms ({})", x.where,
                                                      x.request.timeout.count(), x.phase)};
  }
  if (ec == bhttp::error::body_limit) {
    return Error{ErrorCode::kIo, fmt::format("{}: response body larger than max_response_bytes "
                                             "({} bytes)",
                                             x.where, x.request.max_response_bytes)};
  }
  if (ec == bhttp::error::header_limit) {
    return Error{ErrorCode::kIo,
                 fmt::format("{}: response header larger than {} bytes", x.where, kMaxHeaderBytes)};
  }
  // Beast's own category, other than the connection ending early: the response is malformed.
  if (ec.category() == beast::error_code(bhttp::error::end_of_stream).category() &&
      ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
    return Error{ErrorCode::kIo, fmt::format("{}: malformed response: {}", x.where, ec.message())};
  }
  return Error{ErrorCode::kUnavailable, fmt::format("{}: {}: {}", x.where, step, ec.message())};
}

// Asks for SNI (names only, RFC 6066 §3) and, unless insecure, for the certificate to match the
// host: a DNS name or an IP address in subjectAltName (RFC 6125; no partial wildcards, as curl).
Result<void> expect_peer(ssl::stream<tcp::socket>& stream, const Url& url, bool insecure) {
  SSL* s = stream.native_handle();
  const bool ip = is_ip_literal(url.host);
  if (!ip && SSL_set_tlsext_host_name(s, url.host.c_str()) != 1)
    return internal_error(fmt::format("TLS: cannot set SNI to \"{}\"", url.host));
  if (insecure) return ok();
  X509_VERIFY_PARAM* param = SSL_get0_param(s);
  X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  const int set = ip ? X509_VERIFY_PARAM_set1_ip_asc(param, url.host.c_str())
                     : X509_VERIFY_PARAM_set1_host(param, url.host.c_str(), 0);
  if (set != 1) return internal_error(fmt::format("TLS: cannot verify \"{}\"", url.host));
  return ok();
}

// Resolves the host and connects to its addresses in turn (asio::async_connect).
asio::awaitable<Result<void>> connect(tcp::socket& socket, tcp::resolver& resolver, Exchange& x) {
  beast::error_code ec;
  x.phase = "resolving";
  const auto endpoints = co_await resolver.async_resolve(
      x.url.host, std::to_string(x.url.port), tcp::resolver::numeric_service,
      asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return tl::unexpected(failure(x, "resolve", ec));
  x.phase = "connecting";
  co_await asio::async_connect(socket, endpoints, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return tl::unexpected(failure(x, "connect", ec));
  socket.set_option(tcp::no_delay(true), ec);  // the request goes out in a few small writes
  co_return ok();
}

asio::awaitable<Result<void>> handshake(ssl::stream<tcp::socket>& stream, Exchange& x,
                                        bool insecure) {
  if (auto set = expect_peer(stream, x.url, insecure); !set) co_return set;
  x.phase = "TLS handshake";
  beast::error_code ec;
  co_await stream.async_handshake(ssl::stream_base::client,
                                  asio::redirect_error(asio::use_awaitable, ec));
  if (!ec) co_return ok();
  Error e = failure(x, "TLS handshake failed", ec);
  const long verify = SSL_get_verify_result(stream.native_handle());
  if (!x.timed_out && verify != X509_V_OK)
    e.message += fmt::format(" ({})", X509_verify_cert_error_string(verify));
  co_return tl::unexpected(std::move(e));
}

Response to_response(bhttp::response<bhttp::string_body>&& res) {
  Response out;
  out.status = static_cast<int>(res.result_int());
  for (const auto& f : res) {
    out.headers.push_back({std::string(f.name_string().data(), f.name_string().size()),
                           std::string(f.value().data(), f.value().size())});
  }
  out.body = std::move(res.body());
  return out;
}

// Reads one response: the header first, then the body. Beast 1.74's async_read parses eagerly
// and then loses the body_limit error that a Content-Length over the limit raises when the body
// arrives with the header (boostorg/beast#2183); reading the header alone raises it.
template <class Stream>
asio::awaitable<beast::error_code> read_response(Stream& stream, beast::flat_buffer& buffer,
                                                 bhttp::response_parser<bhttp::string_body>& parser,
                                                 const Exchange& x) {
  beast::error_code ec;
  co_await bhttp::async_read_header(stream, buffer, parser,
                                    asio::redirect_error(asio::use_awaitable, ec));
  if (!ec && !parser.is_done()) {
    co_await bhttp::async_read(stream, buffer, parser,
                               asio::redirect_error(asio::use_awaitable, ec));
  }
  if (!ec && parser.get().body().size() > x.request.max_response_bytes)
    ec = bhttp::error::body_limit;
  co_return ec;
}

// Writes the request and reads the final response; interim 1xx responses are skipped (RFC 9110
// §15.2). A response to HEAD has no body whatever its Content-Length says (RFC 9110 §9.3.2).
template <class Stream>
asio::awaitable<Result<Response>> round_trip(Stream& stream, WireRequest& req, Exchange& x) {
  beast::error_code ec;
  x.phase = "sending the request";
  co_await bhttp::async_write(stream, req, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return tl::unexpected(failure(x, "send", ec));
  x.phase = "waiting for the response";
  beast::flat_buffer buffer;
  for (;;) {
    bhttp::response_parser<bhttp::string_body> parser;
    parser.header_limit(kMaxHeaderBytes);
    parser.body_limit(x.request.max_response_bytes);
    parser.skip(req.method() == bhttp::verb::head);
    ec = co_await read_response(stream, buffer, parser, x);
    if (ec) co_return tl::unexpected(failure(x, "read", ec));
    const unsigned status = parser.get().result_int();
    if (status >= 100 && status < 200 && status != 101) continue;
    co_return to_response(parser.release());
  }
}

template <class Stream>
asio::awaitable<void> exchange(Stream& stream, tcp::resolver& resolver, WireRequest& req,
                               Exchange& x, bool insecure) {
  auto connected = co_await connect(beast::get_lowest_layer(stream), resolver, x);
  if (!connected) {
    x.result = tl::unexpected(std::move(connected).error());
    co_return;
  }
  if constexpr (std::is_same_v<Stream, ssl::stream<tcp::socket>>) {
    auto shaken = co_await handshake(stream, x, insecure);
    if (!shaken) {
      x.result = tl::unexpected(std::move(shaken).error());
      co_return;
    }
  }
  x.result = co_await round_trip(stream, req, x);
}

// Runs the exchange until it ends or the deadline passes; at the deadline the socket is closed
// and the resolver cancelled, so the operation in flight ends (reported as the timeout).
template <class Stream>
void drive(asio::io_context& io, Stream& stream, tcp::resolver& resolver, WireRequest& req,
           Exchange& x, bool insecure, std::chrono::steady_clock::time_point deadline) {
  asio::co_spawn(io, exchange(stream, resolver, req, x, insecure), [&x](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      x.result = internal_error(fmt::format("{}: {}", x.where, ex.what()));
    } catch (...) {
      x.result = internal_error(fmt::format("{}: unknown exception", x.where));
    }
  });
  io.run_until(deadline);
  if (io.stopped()) return;
  x.timed_out = true;
  beast::error_code ignored;
  beast::get_lowest_layer(stream).close(ignored);
  resolver.cancel();
  io.restart();
  io.run();
}

std::string where(const Request& r, const Url& u) {
  const bool v6 = u.host.find(':') != std::string::npos;
  return fmt::format("{} {}://{}:{}{}", r.method, u.scheme, v6 ? "[" + u.host + "]" : u.host,
                     u.port, u.target.substr(0, u.target.find('?')));
}

}  // namespace

struct Client::State {
  ssl::context tls_context{ssl::context::tls_client};
  TlsOptions tls;
};

Result<Client> Client::create(TlsOptions tls) {
  auto state = std::make_shared<State>();
  SSL_CTX_set_min_proto_version(state->tls_context.native_handle(), TLS1_2_VERSION);
  beast::error_code ec;
  if (tls.ca_file.empty()) {
    state->tls_context.set_default_verify_paths(ec);
  } else {
    state->tls_context.load_verify_file(tls.ca_file, ec);
  }
  if (ec) {
    return invalid_input(fmt::format("TLS CA file \"{}\": {}",
                                     tls.ca_file.empty() ? "(system default)" : tls.ca_file,
                                     ec.message()));
  }
  state->tls_context.set_verify_mode(tls.insecure ? ssl::verify_none : ssl::verify_peer);
  state->tls = std::move(tls);
  return Client(std::move(state));
}

Result<Response> Client::send(const Request& request) const {
  ATREX_ASSIGN_OR_RETURN(Url url, parse_url(request.url));
  std::string at = where(request, url);
  Exchange x{.request = request, .url = std::move(url), .where = std::move(at)};
  if (request.timeout.count() <= 0)
    return invalid_input(
        fmt::format("{}: timeout {} ms is not positive", x.where, request.timeout.count()));
  auto req = wire_request(request, x.url);
  if (!req) return tl::unexpected(with_context(std::move(req).error(), x.where));
  const auto deadline = std::chrono::steady_clock::now() + request.timeout;
  try {
    asio::io_context io(1);
    tcp::resolver resolver(io);
    if (x.url.scheme == "https") {
      ssl::stream<tcp::socket> stream(io, state_->tls_context);
      drive(io, stream, resolver, *req, x, state_->tls.insecure, deadline);
    } else {
      tcp::socket stream(io);
      drive(io, stream, resolver, *req, x, false, deadline);
    }
  } catch (const std::exception& e) {
    return internal_error(fmt::format("{}: {}", x.where, e.what()));
  }
  return std::move(x.result);
}

Result<Response> send(const Request& request, const TlsOptions& tls) {
  ATREX_ASSIGN_OR_RETURN(Client client, Client::create(tls));
  return client.send(request);
}

}  // namespace atrex::http
