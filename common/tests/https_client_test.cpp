// atrex::http over HTTPS against a real Beast TLS server on loopback (http_server.h), with
// certificates made by the openssl command line tool: the chain and the host name are verified
// (an unknown CA, the system store and a certificate for another name are refused with OpenSSL's
// reason), SNI carries names only, `insecure` skips verification, the deadline covers the
// handshake, and one Client serves several threads at once.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "atrex/common/http/client.h"
#include "http_server.h"

namespace atrex {
namespace {
using http::Request;
using http::TlsOptions;
using std::chrono::milliseconds;
using testing::HttpServer;
using testing::Reply;
using testing::SeenRequest;

const testing::HttpCertificates& certs() {
  const auto& c = testing::http_certificates();
  EXPECT_TRUE(c.ok()) << "openssl could not make the test certificates (deploy/install-deps.sh)";
  return c;
}

HttpServer::Options tls_server(const std::string& name) {
  return {.cert_file = certs()(name + ".crt"), .key_file = certs()(name + ".key")};
}

Reply ok_reply(const SeenRequest&) { return Reply{.body = "secure"}; }

TEST(HttpsClient, TestCaVerifiesTheServerAndTheExchangeGoesThrough) {
  HttpServer server(tls_server("server"));
  ASSERT_TRUE(server.ok());
  server.set_handler(ok_reply);
  auto r = http::send(Request{.method = "POST",
                              .url = server.url("/v1/chat/completions"),
                              .body = std::string(100'000, 'j')},  // several TLS records
                      TlsOptions{.ca_file = certs()("ca.crt")});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "secure");
  const auto seen = server.requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].body.size(), 100'000u);
  EXPECT_EQ(seen[0].sni, "");  // no SNI for an IP address (RFC 6066 §3)
}

TEST(HttpsClient, HostNameIsVerifiedAndSentAsSni) {
  HttpServer server(tls_server("server"));
  ASSERT_TRUE(server.ok());
  server.set_handler(ok_reply);
  auto r = http::send(Request{.url = fmt::format("https://localhost:{}/", server.port())},
                      TlsOptions{.ca_file = certs()("ca.crt")});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->body, "secure");
  const auto seen = server.requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].sni, "localhost");
}

TEST(HttpsClient, CaThatDidNotSignTheServerIsRefused) {
  HttpServer server(tls_server("server"));
  ASSERT_TRUE(server.ok());
  server.set_handler(ok_reply);
  auto r =
      http::send(Request{.url = server.url("/")}, TlsOptions{.ca_file = certs()("other-ca.crt")});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("TLS handshake failed"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("certificate verify failed"), std::string::npos)
      << r.error().message;
  EXPECT_TRUE(server.requests().empty());
}

TEST(HttpsClient, SystemStoreDoesNotTrustTheTestCa) {
  HttpServer server(tls_server("server"));
  ASSERT_TRUE(server.ok());
  server.set_handler(ok_reply);
  auto r = http::send(Request{.url = server.url("/")});  // default TlsOptions: verification on
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("certificate verify failed"), std::string::npos)
      << r.error().message;
}

TEST(HttpsClient, CertificateForAnotherNameIsRefusedForIpAndDnsHosts) {
  HttpServer server(tls_server("other-name"));  // signed by the test CA, for other.example
  ASSERT_TRUE(server.ok());
  server.set_handler(ok_reply);
  const TlsOptions tls{.ca_file = certs()("ca.crt")};
  auto r = http::send(Request{.url = server.url("/")}, tls);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("certificate verify failed"), std::string::npos)
      << r.error().message;
  EXPECT_NE(r.error().message.find("IP address mismatch"), std::string::npos) << r.error().message;
  r = http::send(Request{.url = fmt::format("https://localhost:{}/", server.port())}, tls);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("hostname mismatch"), std::string::npos) << r.error().message;
  EXPECT_TRUE(server.requests().empty());
}

TEST(HttpsClient, InsecureAcceptsAnyCertificate) {
  HttpServer server(tls_server("other-name"));
  ASSERT_TRUE(server.ok());
  server.set_handler(ok_reply);
  auto r = http::send(Request{.url = server.url("/")}, TlsOptions{.insecure = true});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->body, "secure");
}

TEST(HttpsClient, SilentServerTimesOutInTheHandshake) {
  HttpServer server({.silent = true});
  ASSERT_TRUE(server.ok());
  const auto start = std::chrono::steady_clock::now();
  auto r = http::send(Request{.url = fmt::format("https://127.0.0.1:{}/", server.port()),
                              .timeout = milliseconds(300)},
                      TlsOptions{.ca_file = certs()("ca.crt")});
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("timed out after 300 ms (TLS handshake)"), std::string::npos)
      << r.error().message;
  EXPECT_GE(took, milliseconds(300));
  EXPECT_LT(took, milliseconds(300 + 2000));
}

TEST(HttpsClient, UnreadableCaFileIsInvalidInputNamingIt) {
  const std::string missing = certs()("no-such-ca.crt");
  auto c = http::Client::create(TlsOptions{.ca_file = missing});
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::kInvalidInput);
  EXPECT_NE(c.error().message.find(missing), std::string::npos) << c.error().message;
  auto r = http::send(Request{.url = "https://127.0.0.1:1/"}, TlsOptions{.ca_file = missing});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidInput);
}

TEST(HttpsClient, OneClientServesSeveralThreadsAtOnce) {
  HttpServer server(tls_server("server"));
  ASSERT_TRUE(server.ok());
  server.set_handler([](const SeenRequest& req) { return Reply{.body = req.body}; });
  auto client = http::Client::create(TlsOptions{.ca_file = certs()("ca.crt")});
  ASSERT_TRUE(client) << client.error().message;
  constexpr int kThreads = 4, kEach = 5;
  std::vector<int> ok(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const std::string body = fmt::format("thread {} request {}", t, i);
        auto r = client->send(Request{.method = "POST", .url = server.url("/"), .body = body});
        if (r && r->status == 200 && r->body == body) ++ok[static_cast<size_t>(t)];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(ok[static_cast<size_t>(t)], kEach) << "thread " << t;
  EXPECT_EQ(server.requests().size(), static_cast<size_t>(kThreads * kEach));
}

}  // namespace
}  // namespace atrex
