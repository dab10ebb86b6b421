// A real HTTP/1.1 server on 127.0.0.1 for the HTTP client tests, written with Boost.Beast: plain
// or TLS, on its own thread, on a port the kernel picks (bound to port 0: nothing can take it
// between picking and listening). The test sets the handler; it answers with a Reply that can
// also misbehave the way servers do (never answer, close early, trickle chunks, send garbage).
// Test certificates are made with the openssl command line tool, as for the Redis TLS tests.
#pragma once

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include "atrex/common/http/client.h"

namespace atrex::testing {

// EC P-256 keys (fast to make): a CA; "server.crt" for IP 127.0.0.1 and DNS localhost and
// "other-name.crt" for DNS other.example, both signed by the CA; an unrelated "other-ca.crt".
class HttpCertificates {
 public:
  HttpCertificates()
      : dir_(std::filesystem::temp_directory_path() /
             fmt::format("atrex_http_tls_{}", ::getpid())) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "server.ext") << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
    std::ofstream(dir_ / "other-name.ext") << "subjectAltName=DNS:other.example\n";
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    std::string script = fmt::format(
        "cd {0} && openssl req -x509 {1} -keyout ca.key -out ca.crt -subj /CN=atrex-http-ca -days 2"
        " && openssl req -x509 {1} -keyout other-ca.key -out other-ca.crt -subj /CN=other -days 2",
        dir_.string(), key);
    for (const char* name : {"server", "other-name"}) {
      script += fmt::format(
          " && openssl req -new {1} -keyout {0}.key -out {0}.csr -subj /CN={0}"
          " && openssl x509 -req -in {0}.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out {0}.crt"
          " -days 2 -extfile {0}.ext",
          name, key);
    }
    const std::string log = (dir_ / "openssl.log").string();
    ok_ = std::system(("(" + script + ") > " + log + " 2>&1").c_str()) == 0;
  }
  ~HttpCertificates() { std::filesystem::remove_all(dir_); }
  HttpCertificates(const HttpCertificates&) = delete;
  HttpCertificates& operator=(const HttpCertificates&) = delete;
  bool ok() const { return ok_; }
  std::string operator()(const std::string& name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
  bool ok_ = false;
};

// One set per test binary (the directory is removed at exit).
inline const HttpCertificates& http_certificates() {
  static const HttpCertificates certs;
  return certs;
}

// A request as the server read it.
struct SeenRequest {
  std::string method;
  std::string target;
  http::Headers headers;
  std::string body;
  std::string sni;  // the TLS server name the client sent; empty for none or plain HTTP
  std::optional<std::string> header(std::string_view name) const {
    return http::find_header(headers, name);
  }
};

// What the server does with a request. The defaults answer 200 with an empty body.
struct Reply {
  int status = 200;
  http::Headers headers;
  std::string body;                          // sent with Content-Length (only the length for HEAD)
  std::vector<std::string> chunks;           // when set: Transfer-Encoding: chunked, one chunk each
  std::chrono::milliseconds chunk_delay{0};  // before each chunk
  bool interim_100 = false;                  // a "100 Continue" before the final response
  std::string raw;                           // when set: these bytes instead of a response
  bool hang = false;   // never answer (the connection stays open until the server stops)
  bool close = false;  // close the connection without answering
};
using HttpHandler = std::function<Reply(const SeenRequest&)>;

namespace http_server_detail {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

struct State {
  mutable std::mutex mu;
  std::condition_variable cv;
  HttpHandler handler;
  std::vector<SeenRequest> seen;
  bool silent = false;  // accept connections, never read from them
};

inline auto token(beast::error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

inline asio::awaitable<void> hold_forever() {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  timer.expires_at(asio::steady_timer::time_point::max());
  beast::error_code ec;
  co_await timer.async_wait(token(ec));
}

template <class Stream>
asio::awaitable<void> write_chunked(Stream& s, const Reply& r, beast::error_code& ec) {
  bhttp::response<bhttp::empty_body> res;
  res.result(static_cast<unsigned>(r.status));
  for (const auto& h : r.headers) res.insert(h.name, h.value);
  res.chunked(true);
  bhttp::response_serializer<bhttp::empty_body> sr(res);
  co_await bhttp::async_write_header(s, sr, token(ec));
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (const std::string& chunk : r.chunks) {
    if (ec) co_return;
    timer.expires_after(r.chunk_delay);
    co_await timer.async_wait(token(ec));
    co_await asio::async_write(s, bhttp::make_chunk(asio::buffer(chunk)), token(ec));
  }
  if (!ec) co_await asio::async_write(s, bhttp::make_chunk_last(), token(ec));
}

template <class Stream>
asio::awaitable<void> write_reply(Stream& s, const Reply& r, bool head, beast::error_code& ec) {
  if (!r.raw.empty()) {
    co_await asio::async_write(s, asio::buffer(r.raw), token(ec));
    co_return;
  }
  if (r.interim_100) {
    bhttp::response<bhttp::empty_body> interim(bhttp::status::continue_, 11);
    co_await bhttp::async_write(s, interim, token(ec));
    if (ec) co_return;
  }
  if (!r.chunks.empty()) {
    co_await write_chunked(s, r, ec);
    co_return;
  }
  bhttp::response<bhttp::string_body> res;
  res.result(static_cast<unsigned>(r.status));
  for (const auto& h : r.headers) res.insert(h.name, h.value);
  res.content_length(r.body.size());
  if (!head) res.body() = r.body;
  bhttp::response_serializer<bhttp::string_body> sr(res);
  if (head) {
    co_await bhttp::async_write_header(s, sr, token(ec));
  } else {
    co_await bhttp::async_write(s, sr, token(ec));
  }
}

// Requests on one connection until the client closes it (HTTP/1.1 keep-alive).
template <class Stream>
asio::awaitable<void> serve(Stream& s, State& st, std::string sni) {
  beast::flat_buffer buffer;
  for (;;) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.body_limit(256u << 20);
    beast::error_code ec;
    co_await bhttp::async_read(s, buffer, parser, token(ec));
    if (ec) co_return;
    auto msg = parser.release();
    SeenRequest seen{std::string(msg.method_string().data(), msg.method_string().size()),
                     std::string(msg.target().data(), msg.target().size()),
                     {},
                     msg.body(),
                     sni};
    for (const auto& f : msg) {
      seen.headers.push_back({std::string(f.name_string().data(), f.name_string().size()),
                              std::string(f.value().data(), f.value().size())});
    }
    HttpHandler handler;
    {
      std::lock_guard lock(st.mu);
      st.seen.push_back(seen);
      handler = st.handler;
    }
    st.cv.notify_all();
    const Reply reply = handler ? handler(seen) : Reply{};
    if (reply.hang) co_await hold_forever();
    if (reply.hang || reply.close) co_return;
    co_await write_reply(s, reply, msg.method() == bhttp::verb::head, ec);
    if (ec || !msg.keep_alive()) co_return;
  }
}

inline asio::awaitable<void> connection(tcp::socket socket, asio::ssl::context* tls, State& st) {
  if (st.silent) co_return co_await hold_forever();
  if (!tls) co_return co_await serve(socket, st, "");
  asio::ssl::stream<tcp::socket> stream(std::move(socket), *tls);
  beast::error_code ec;
  co_await stream.async_handshake(asio::ssl::stream_base::server, token(ec));
  if (ec) co_return;  // the client refused our certificate, or spoke plain HTTP
  const char* sni = SSL_get_servername(stream.native_handle(), TLSEXT_NAMETYPE_host_name);
  co_await serve(stream, st, sni ? sni : "");
}

inline asio::awaitable<void> accept_loop(tcp::acceptor acceptor, asio::ssl::context* tls,
                                         State& st) {
  for (;;) {
    beast::error_code ec;
    tcp::socket socket = co_await acceptor.async_accept(token(ec));
    if (ec) co_return;
    asio::co_spawn(acceptor.get_executor(), connection(std::move(socket), tls, st), asio::detached);
  }
}

}  // namespace http_server_detail

struct HttpServerOptions {
  std::string cert_file;  // with key_file: serve https (else http)
  std::string key_file;
  bool silent = false;  // accept connections and never read or answer
};

class HttpServer {
 public:
  using Options = HttpServerOptions;
  explicit HttpServer(Options options = {}) {
    namespace d = http_server_detail;
    state_.silent = options.silent;
    https_ = !options.cert_file.empty();
    try {
      if (https_) {
        tls_.emplace(d::asio::ssl::context::tls_server);
        tls_->use_certificate_chain_file(options.cert_file);
        tls_->use_private_key_file(options.key_file, d::asio::ssl::context::pem);
      }
      d::tcp::acceptor acceptor(io_, {d::asio::ip::make_address("127.0.0.1"), 0});
      port_ = acceptor.local_endpoint().port();
      d::asio::co_spawn(io_, d::accept_loop(std::move(acceptor), tls_ ? &*tls_ : nullptr, state_),
                        d::asio::detached);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "test HTTP server: " << e.what();
      port_ = 0;
      return;
    }
    thread_ = std::thread([this] { io_.run(); });
  }
  ~HttpServer() {
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  bool ok() const { return port_ != 0; }
  int port() const { return port_; }
  // http[s]://127.0.0.1:<port><target>
  std::string url(std::string_view target = "/") const {
    return fmt::format("{}://127.0.0.1:{}{}", https_ ? "https" : "http", port_, target);
  }
  void set_handler(HttpHandler handler) {
    std::lock_guard lock(state_.mu);
    state_.handler = std::move(handler);
  }
  std::vector<SeenRequest> requests() const {
    std::lock_guard lock(state_.mu);
    return state_.seen;
  }
  // Waits until `n` requests have been read, at most `within`; false when they have not.
  bool wait_for_requests(size_t n, std::chrono::milliseconds within) {
    std::unique_lock lock(state_.mu);
    return state_.cv.wait_for(lock, within, [&] { return state_.seen.size() >= n; });
  }

 private:
  // Destroyed in reverse: the I/O context (and the connections it holds) before the state and
  // the TLS context those use.
  http_server_detail::State state_;
  std::optional<http_server_detail::asio::ssl::context> tls_;
  http_server_detail::asio::io_context io_{1};
  std::thread thread_;
  int port_ = 0;
  bool https_ = false;
};

}  // namespace atrex::testing
