// rediss:// URLs against a real redis-server with TLS on (Debian 12's redis-server 7.0 is built
// with TLS): commands and a blocking queue claim go through the in-process OpenSSL relay; an
// unknown CA, a wrong host name and a missing client certificate are refused with OpenSSL's
// reason. Certificates are made per test binary with the openssl command line tool.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "atrex/common/redis/local_server.h"
#include "atrex/common/redis/connection.h"
#include "atrex/common/redis/queue.h"
#include "atrex/testing/tls_server.h"

namespace atrex {
namespace {
using testing::Certificates;
using testing::TlsRedis;

class RedisTls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { certs_ = &testing::shared_certificates(); }

  std::unique_ptr<TlsRedis> start(bool require_client_cert) {
    auto t = TlsRedis::start(*certs_, require_client_cert);
    if (t) tls_port_ = t->tls_port;
    return t;
  }
  std::string url(const std::string& query) const {
    return fmt::format("rediss://127.0.0.1:{}/0?{}", tls_port_, query);
  }
  static Result<std::unique_ptr<RedisConnection>> connect(const std::string& u) {
    auto o = parse_redis_url(u);
    if (!o) return tl::unexpected(o.error());
    o->max_reconnects = 0;
    return RedisConnection::connect(*o);
  }

  static Certificates* certs_;
  int tls_port_ = 0;
};

Certificates* RedisTls::certs_ = nullptr;

TEST_F(RedisTls, CommandsAndABlockingClaimGoThroughTls) {
  auto server = start(false);
  ASSERT_TRUE(server);
  auto c = connect(url("tls_ca=" + (*certs_)("ca.crt")));
  ASSERT_TRUE(c) << c.error().message;
  auto pong = (*c)->command({"PING"});
  ASSERT_TRUE(pong) << pong.error().message;
  EXPECT_EQ(pong->str, "PONG");
  std::string big(300'000, 'x');  // several TLS records each way
  ASSERT_TRUE((*c)->command({"SET", "k", big}));
  auto got = (*c)->command({"GET", "k"});
  ASSERT_TRUE(got);
  EXPECT_EQ(got->str, big);

  auto opts = parse_redis_url(url("tls_ca=" + (*certs_)("ca.crt")));
  ASSERT_TRUE(opts);
  auto q = RedisQueue::open(*opts, QueueOptions{}, "atrex-tls");
  ASSERT_TRUE(q) << q.error().message;
  ASSERT_TRUE((*q)->enqueue("eval", Json{{"n", 1}}));
  auto leases = (*q)->claim("eval", "runner-tls", 1, std::chrono::milliseconds(2000));
  ASSERT_TRUE(leases) << leases.error().message;
  ASSERT_EQ(leases->size(), 1u);
  EXPECT_EQ(leases->front().body["n"], 1);
  auto acked = (*q)->ack(leases->front());
  ASSERT_TRUE(acked && *acked);
}

TEST_F(RedisTls, UnknownCaAndWrongHostAreRefusedWithTheReason) {
  auto server = start(false);
  ASSERT_TRUE(server);
  auto c = connect(url("tls_ca=" + (*certs_)("other-ca.crt")));
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("TLS handshake failed"), std::string::npos) << c.error().message;
  EXPECT_NE(c.error().message.find("certificate verify failed"), std::string::npos)
      << c.error().message;
  EXPECT_NE(c.error().message.find(std::to_string(tls_port_)), std::string::npos)
      << c.error().message;
  // The certificate names 127.0.0.1 only: "localhost" does not match it.
  auto wrong_host =
      connect(fmt::format("rediss://localhost:{}?tls_ca={}", tls_port_, (*certs_)("ca.crt")));
  ASSERT_FALSE(wrong_host);
  EXPECT_NE(wrong_host.error().message.find("certificate verify failed"), std::string::npos)
      << wrong_host.error().message;
  auto insecure = connect(url("tls_ca=" + (*certs_)("other-ca.crt") + "&tls_insecure=1"));
  EXPECT_TRUE(insecure) << insecure.error().message;
}

TEST_F(RedisTls, ClientCertificateWhenTheServerRequiresOne) {
  auto server = start(true);
  ASSERT_TRUE(server);
  auto without = connect(url("tls_ca=" + (*certs_)("ca.crt")));
  EXPECT_TRUE(!without || !(*without)->command({"PING"}));
  auto with = connect(url(fmt::format("tls_ca={}&tls_cert={}&tls_key={}", (*certs_)("ca.crt"),
                                      (*certs_)("client.crt"), (*certs_)("client.key"))));
  ASSERT_TRUE(with) << with.error().message;
  auto pong = (*with)->command({"PING"});
  ASSERT_TRUE(pong) << pong.error().message;
  EXPECT_EQ(pong->str, "PONG");
  auto missing = connect(
      url("tls_ca=" + (*certs_)("ca.crt") + "&tls_cert=/nonexistent.crt&tls_key=/nonexistent.key"));
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("tls_cert \"/nonexistent.crt\""), std::string::npos)
      << missing.error().message;
}

// A command sent after the server dropped the TLS session is an error, not the process' end:
// the server refuses a client without a certificate just after the handshake; the relay sees the
// alert and ends; hiredis' write(2) of the next command must not meet a closed socket (SIGPIPE
// killed this test binary 2 runs in 90 before the relay drained instead).
TEST_F(RedisTls, ACommandAfterTheServerDroppedTheSessionIsAnError) {
  auto server = start(true);
  ASSERT_TRUE(server);
  int connected = 0;
  for (int i = 0; i < 5; ++i) {
    auto c = connect(url("tls_ca=" + (*certs_)("ca.crt")));
    if (!c) continue;  // refused within the handshake (TLS 1.2 timing): nothing to send
    ++connected;
    std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the relay has ended
    auto pong = (*c)->command({"PING"});
    EXPECT_FALSE(pong);
    auto big = (*c)->command({"SET", "k", std::string(1 << 20, 'x')});
    EXPECT_FALSE(big);
  }
  // TLS 1.3 ends the client's handshake before the server checks its certificate.
  EXPECT_GT(connected, 0) << "every connection was refused within the handshake: nothing was sent";
}

TEST(RedisTlsUrl, ParsesTlsParametersAndRefusesBadOnes) {
  auto o = parse_redis_url(
      "rediss://runner:pw@redis.internal:6380/1?tls_ca=/etc/ca.pem&tls_cert=/c.pem&tls_key=/k.pem");
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_TRUE(o->tls);
  EXPECT_EQ(o->host, "redis.internal");
  EXPECT_EQ(o->port, 6380);
  EXPECT_EQ(o->db, 1);
  EXPECT_EQ(o->user, "runner");
  EXPECT_EQ(o->tls_ca_file, "/etc/ca.pem");
  EXPECT_EQ(o->tls_cert_file, "/c.pem");
  EXPECT_EQ(o->tls_key_file, "/k.pem");
  EXPECT_FALSE(o->tls_insecure);
  auto plain = parse_redis_url("redis://h:1");
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->tls);
  auto unknown = parse_redis_url("rediss://h?tls_cafile=/x");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("unknown parameter \"tls_cafile=/x\""), std::string::npos);
  EXPECT_FALSE(parse_redis_url("redis://h?tls_ca=/x"));         // parameters need rediss://
  EXPECT_FALSE(parse_redis_url("rediss://h?tls_cert=/c.pem"));  // a certificate without its key
  EXPECT_FALSE(parse_redis_url("rediss://h?tls_insecure=yes"));
}

}  // namespace
}  // namespace atrex
