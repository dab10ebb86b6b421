// Test certificates (made with the openssl command line tool) and a TLS redis-server shared by
// a test binary: the Redis TLS tests and the queue contract suite over rediss:// use them.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "atrex/common/redis/local_server.h"
#include "atrex/common/redis/connection.h"
#include "atrex/testing/redis_server.h"

namespace atrex::testing {
namespace fs = std::filesystem;

// A CA, a server certificate for 127.0.0.1 signed by it, a client certificate, and an unrelated CA.
class Certificates {
 public:
  Certificates() : dir_(fs::temp_directory_path() / fmt::format("atrex_tls_{}", ::getpid())) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "san.ext") << "subjectAltName=IP:127.0.0.1\n";
    const std::string d = dir_.string();
    const std::string script = fmt::format(
        "cd {0} && "
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -subj "
        "/CN=atrex-test-ca -days 2 && "
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout other-ca.key -out other-ca.crt -subj "
        "/CN=other -days 2 && "
        "openssl req -new -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj "
        "/CN=127.0.0.1 && "
        "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt "
        "-days 2 "
        "-extfile san.ext && "
        "openssl req -new -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj "
        "/CN=runner && "
        "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt "
        "-days 2",
        d);
    ok_ = std::system(("(" + script + ") > " + d + "/openssl.log 2>&1").c_str()) == 0;
  }
  ~Certificates() { fs::remove_all(dir_); }
  bool ok() const { return ok_; }
  std::string operator()(const std::string& name) const { return (dir_ / name).string(); }

 private:
  fs::path dir_;
  bool ok_ = false;
};

// A redis-server with a plain loopback port (for its own start-up check) and a TLS port whose
// certificate (for 127.0.0.1) is signed by certs("ca.crt"); client certificates required or not.
struct TlsRedis {
  std::unique_ptr<LocalRedisServer> server;
  int tls_port = 0;
  static std::unique_ptr<TlsRedis> start(const Certificates& certs, bool require_client_cert) {
    EXPECT_TRUE(certs.ok())
        << "openssl could not make the test certificates (install: deploy/install-deps.sh)";
    auto t = std::make_unique<TlsRedis>();
    t->tls_port = free_loopback_port();
    LocalRedisOptions o;
    o.extra_args = {"--tls-port",         std::to_string(t->tls_port),
                    "--tls-cert-file",    certs("server.crt"),
                    "--tls-key-file",     certs("server.key"),
                    "--tls-ca-cert-file", certs("ca.crt"),
                    "--tls-auth-clients", require_client_cert ? "yes" : "no"};
    auto s = LocalRedisServer::start(o);
    EXPECT_TRUE(s) << (s ? "" : s.error().message);
    if (!s) return nullptr;
    t->server = std::move(*s);
    return t;
  }
  // rediss://127.0.0.1:<tls port>/0?<query>
  std::string url(const std::string& query) const {
    return fmt::format("rediss://127.0.0.1:{}/0?{}", tls_port, query);
  }
};

// One set of certificates and one TLS server (no client certificates) per test binary, both
// removed at exit.
inline Certificates& shared_certificates() {
  return once_per_binary<Certificates>([] { return new Certificates(); });
}
inline TlsRedis& shared_tls_redis() {
  return once_per_binary<TlsRedis>([] {
    auto t = TlsRedis::start(shared_certificates(), false);
    return t ? t.release() : new TlsRedis();  // the failure is reported; tests then fail to connect
  });
}

}  // namespace atrex::testing
