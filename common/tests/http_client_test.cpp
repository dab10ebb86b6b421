// atrex::http over plain HTTP against a real Beast server on loopback (http_server.h): what the
// server reads and what the client gets back, HTTP error statuses as responses, chunked and
// interim responses, the whole-request deadline, refused connections, response size limits, URL
// errors, and no header value or URL query in any error message.
#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "atrex/common/http/client.h"
#include "atrex/common/local_redis.h"
#include "http_server.h"

namespace atrex {
namespace {
using http::Request;
using std::chrono::milliseconds;
using testing::HttpServer;
using testing::Reply;
using testing::SeenRequest;

constexpr char kSecret[] = "sk-atrex-secret-0123456789";

std::chrono::steady_clock::duration time_of(const auto& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::steady_clock::now() - start;
}

TEST(HttpUrl, SplitsSchemeHostPortAndTargetWithDefaults) {
  auto u = http::parse_url("HTTPS://api.example.com/v1/chat/completions?x=1#frag");
  ASSERT_TRUE(u) << u.error().message;
  EXPECT_EQ(u->scheme, "https");
  EXPECT_EQ(u->host, "api.example.com");
  EXPECT_EQ(u->port, 443);
  EXPECT_EQ(u->target, "/v1/chat/completions?x=1");  // the fragment is never sent
  u = http::parse_url("http://10.0.0.7");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->port, 80);
  EXPECT_EQ(u->target, "/");
  u = http::parse_url("http://[::1]:8000?q=2");
  ASSERT_TRUE(u) << u.error().message;
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 8000);
  EXPECT_EQ(u->target, "/?q=2");
  u = http::parse_url("https://[2001:db8::5]/v1");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "2001:db8::5");
  EXPECT_EQ(u->port, 443);
}

TEST(HttpUrl, BadUrlsAreInvalidInputNamingTheUrlAndTheReason) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "no scheme"},
      {"localhost:8000/v1", "no scheme"},
      {"ftp://host/x", "scheme \"ftp\""},
      {"http://", "no host"},
      {"http://:8080/", "no host"},
      {"http://host:/", "empty port"},
      {"http://host:http/", "port \"http\""},
      {"http://host:0/", "1..65535"},
      {"http://host:65536/", "1..65535"},
      {"http://[::1/", "closing ']'"},
      {"http://[not-v6]:80/", "not an IPv6 address"},
      {"http://::1:80/", "brackets"},
      {"http://ho st/", "not allowed in a host name"},
      {"http://host/a b", "percent-encode"},
  };
  for (const auto& [url, why] : cases) {
    auto u = http::parse_url(url);
    ASSERT_FALSE(u) << url;
    EXPECT_EQ(u.error().code, ErrorCode::kInvalidInput) << url;
    EXPECT_NE(u.error().message.find("\"" + url + "\""), std::string::npos) << u.error().message;
    EXPECT_NE(u.error().message.find(why), std::string::npos) << u.error().message;
  }
  // Credentials belong in a header; the message does not repeat them.
  auto u = http::parse_url(fmt::format("https://user:{}@host/v1", kSecret));
  ASSERT_FALSE(u);
  EXPECT_EQ(u.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(u.error().message.find("https://***@host/v1"), std::string::npos) << u.error().message;
  EXPECT_EQ(u.error().message.find(kSecret), std::string::npos) << u.error().message;
}

TEST(HttpUrl, SendRejectsABadUrlAsInvalidInput) {
  auto r = http::send(Request{.url = "htp://127.0.0.1/"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(r.error().message.find("htp://127.0.0.1/"), std::string::npos);
}

TEST(HttpClient, GetRoundTripCarriesTargetHeadersAndBody) {
  HttpServer server;
  ASSERT_TRUE(server.ok());
  server.set_handler([](const SeenRequest&) {
    return Reply{.status = 200, .headers = {{"X-Reply", "yes"}}, .body = "hello"};
  });
  auto r = http::send(Request{.url = server.url("/v1/models?limit=2"),
                              .headers = {{"X-Test", "abc"}, {"Accept", "application/json"}}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello");
  EXPECT_EQ(r->header("x-reply"), "yes");
  const auto seen = server.requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].method, "GET");
  EXPECT_EQ(seen[0].target, "/v1/models?limit=2");
  EXPECT_EQ(seen[0].header("x-test"), "abc");
  EXPECT_EQ(seen[0].header("Accept"), "application/json");
  EXPECT_EQ(seen[0].header("Host"), fmt::format("127.0.0.1:{}", server.port()));
  EXPECT_EQ(seen[0].header("Content-Length"), std::nullopt);  // a GET without content
  EXPECT_EQ(seen[0].body, "");
}

TEST(HttpClient, PostRoundTripSendsTheWholeBodyWithItsLength) {
  HttpServer server;
  ASSERT_TRUE(server.ok());
  server.set_handler([](const SeenRequest& req) {
    return Reply{.status = 201, .body = "echo:" + std::to_string(req.body.size())};
  });
  std::string body = R"({"model":"m","messages":[{"role":"user","content":")";
  body += std::string(200'000, 'x') + "\"}]}";  // several TCP segments
  auto r = http::send(Request{.method = "POST",
                              .url = server.url("/v1/chat/completions"),
                              .headers = {{"Content-Type", "application/json"},
                                          {"Authorization", std::string("Bearer ") + kSecret}},
                              .body = body});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 201);
  EXPECT_EQ(r->body, "echo:" + std::to_string(body.size()));
  const auto seen = server.requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[0].target, "/v1/chat/completions");
  EXPECT_EQ(seen[0].body, body);
  EXPECT_EQ(seen[0].header("content-length"), std::to_string(body.size()));
  EXPECT_EQ(seen[0].header("content-type"), "application/json");
  EXPECT_EQ(seen[0].header("authorization"), std::string("Bearer ") + kSecret);
  EXPECT_EQ(seen[0].header("user-agent"), "atrex");
}

TEST(HttpClient, TooManyRequestsIsAResponseWithRetryAfterReadableInAnyCase) {
  HttpServer server;
  ASSERT_TRUE(server.ok());
  server.set_handler([](const SeenRequest&) {
    return Reply{.status = 429,
                 .headers = {{"Retry-After", "7"}, {"Content-Type", "application/json"}},
                 .body = R"({"error":{"message":"rate limited"}})"};
  });
  auto r = http::send(Request{.method = "POST", .url = server.url("/v1/chat/completions")});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->header("retry-after"), "7");
  EXPECT_EQ(r->header("RETRY-AFTER"), "7");
  EXPECT_EQ(r->header("Retry-After"), "7");
  EXPECT_EQ(r->header("X-Missing"), std::nullopt);
  EXPECT_EQ(r->body, R"({"error":{"message":"rate limited"}})");
  server.set_handler([](const SeenRequest&) { return Reply{.status = 503, .body = "down"}; });
  r = http::send(Request{.url = server.url("/")});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 503);
}

TEST(HttpClient, ChunkedResponseIsReassembled) {
  HttpServer server;
  ASSERT_TRUE(server.ok());
  server.set_handler([](const SeenRequest&) {
    return Reply{.chunks = {"data: {\"a\":", "1}\n\n", "data: [DONE]\n\n"}};
  });
  auto r = http::send(Request{.url = server.url("/stream")});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "data: {\"a\":1}\n\ndata: [DONE]\n\n");
  EXPECT_EQ(r->header("transfer-encoding"), "chunked");
}

TEST(HttpClient, InterimContinueIsSkippedForTheFinalResponse) {
  HttpServer server;
  ASSERT_TRUE(server.ok());
  server.set_handler([](const SeenRequest&) {
    return Reply{.status = 200, .body = "final", .interim_100 = true};
  });
  auto r = http::send(Request{.method = "POST", .url = server.url("/"), .body = "x"});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "final");
}

TEST(HttpClient, HeadResponseHasNoBodyWhateverItsContentLength) {
  HttpServer server;
  ASSERT_TRUE(server.ok());
  server.set_handler([](const SeenRequest&) { return Reply{.body = "12345"}; });
  auto r =
      http::send(Request{.method = "HEAD", .url = server.url("/"), .timeout = milliseconds(2000)});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->header("content-length"), "5");
  EXPECT_EQ(r->body, "");
}

TEST(HttpClient, ServerThatNeverAnswersTimesOutWithinTheTimeout) {
  HttpServer server;
  ASSERT_TRUE(server.ok());
  server.set_handler([](const SeenRequest&) { return Reply{.hang = true}; });
  Result<http::Response> r;
  const auto took = time_of([&] {
    r = http::send(Request{.url = server.url("/v1/models"), .timeout = milliseconds(300)});
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("timed out after 300 ms (waiting for the response)"),
            std::string::npos)
      << r.error().message;
  EXPECT_GE(took, milliseconds(300));
  EXPECT_LT(took, milliseconds(300 + 2000));
  EXPECT_TRUE(server.wait_for_requests(1, milliseconds(1000)));  // the request did arrive
}

TEST(HttpClient, TricklingResponseIsCutAtTheWholeRequestDeadline) {
  HttpServer server;
  ASSERT_TRUE(server.ok());
  // Each read completes well within the timeout; only a whole-request deadline ends this.
  server.set_handler([](const SeenRequest&) {
    return Reply{.chunks = std::vector<std::string>(100, "x"), .chunk_delay = milliseconds(50)};
  });
  Result<http::Response> r;
  const auto took = time_of(
      [&] { r = http::send(Request{.url = server.url("/"), .timeout = milliseconds(400)}); });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("timed out after 400 ms"), std::string::npos)
      << r.error().message;
  EXPECT_LT(took, milliseconds(400 + 2000));
}

TEST(HttpClient, ConnectionRefusedIsUnavailableAtOnce) {
  const int port = free_loopback_port();  // bound and released: nothing listens there
  ASSERT_GT(port, 0);
  Result<http::Response> r;
  const auto took = time_of([&] {
    r = http::send(Request{.url = fmt::format("http://127.0.0.1:{}/v1", port),
                           .timeout = milliseconds(10'000)});
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("connect"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("refused"), std::string::npos) << r.error().message;
  EXPECT_LT(took, milliseconds(2000));
}

TEST(HttpClient, ServerClosingBeforeAnsweringIsUnavailable) {
  HttpServer server;
  ASSERT_TRUE(server.ok());
  server.set_handler([](const SeenRequest&) { return Reply{.close = true}; });
  auto r = http::send(Request{.url = server.url("/")});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable) << r.error().message;
  EXPECT_NE(r.error().message.find("GET http://127.0.0.1:"), std::string::npos);
}

TEST(HttpClient, ResponseThatIsNotHttpIsAnIoError) {
  HttpServer server;
  ASSERT_TRUE(server.ok());
  server.set_handler(
      [](const SeenRequest&) { return Reply{.raw = "SSH-2.0-OpenSSH_9.2\r\n\r\n"}; });
  auto r = http::send(Request{.url = server.url("/")});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kIo) << r.error().message;
  EXPECT_NE(r.error().message.find("malformed response"), std::string::npos) << r.error().message;
}

TEST(HttpClient, ResponseOverMaxResponseBytesIsRefusedAndOneAtTheLimitPasses) {
  HttpServer server;
  ASSERT_TRUE(server.ok());
  server.set_handler([](const SeenRequest& req) {
    if (req.target == "/chunked")
      return Reply{.chunks = std::vector<std::string>(4, std::string(300, 'c'))};
    return Reply{.body = std::string(req.target == "/big" ? 1001 : 1000, 'b')};
  });
  for (const char* target : {"/big", "/chunked"}) {
    auto r = http::send(Request{.url = server.url(target), .max_response_bytes = 1000});
    ASSERT_FALSE(r) << target;
    EXPECT_EQ(r.error().code, ErrorCode::kIo);
    EXPECT_NE(r.error().message.find("larger than max_response_bytes (1000 bytes)"),
              std::string::npos)
        << r.error().message;
  }
  auto r = http::send(Request{.url = server.url("/exact"), .max_response_bytes = 1000});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->body.size(), 1000u);
}

TEST(HttpClient, RequestsThatCannotGoOnTheWireAreInvalidInput) {
  HttpServer server;
  ASSERT_TRUE(server.ok());
  const std::vector<Request> bad = {
      {.method = "GE T", .url = server.url("/")},
      {.url = server.url("/"), .headers = {{"Bad Name", "x"}}},
      {.url = server.url("/"), .headers = {{"X-Inject", "a\r\nX-Evil: 1"}}},
      {.url = server.url("/"), .headers = {{"Content-Length", "5"}}},
      {.url = server.url("/"), .timeout = milliseconds(0)},
  };
  for (const Request& req : bad) {
    auto r = http::send(req);
    ASSERT_FALSE(r) << req.method;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidInput) << r.error().message;
  }
  EXPECT_TRUE(server.requests().empty());  // nothing was sent
}

TEST(HttpClient, AuthorizationValueAndUrlQueryNeverAppearInErrorMessages) {
  HttpServer hanging, closing, big;
  ASSERT_TRUE(hanging.ok() && closing.ok() && big.ok());
  hanging.set_handler([](const SeenRequest&) { return Reply{.hang = true}; });
  closing.set_handler([](const SeenRequest&) { return Reply{.close = true}; });
  big.set_handler([](const SeenRequest&) { return Reply{.body = std::string(5000, 'b')}; });
  const std::string query = std::string("/v1?api_key=") + kSecret;
  const std::vector<std::string> urls = {
      hanging.url(query),
      closing.url(query),
      big.url(query),
      fmt::format("http://127.0.0.1:{}{}", free_loopback_port(), query),  // refused
      fmt::format("https://127.0.0.1:{}{}", big.port(), query),           // TLS to plain HTTP
  };
  const http::Headers auth = {{"Authorization", std::string("Bearer ") + kSecret}};
  for (const std::string& url : urls) {
    auto r = http::send(Request{.method = "POST",
                                .url = url,
                                .headers = auth,
                                .timeout = milliseconds(300),
                                .max_response_bytes = 100});
    ASSERT_FALSE(r) << url;
    EXPECT_EQ(r.error().message.find(kSecret), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("/v1"), std::string::npos) << r.error().message;
  }
  // A value the client refuses to send is not repeated either.
  auto r = http::send(Request{.url = big.url("/"),
                              .headers = {{"Authorization", std::string("Bearer\r\n") + kSecret}}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(r.error().message.find("Authorization"), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().message.find(kSecret), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace atrex
