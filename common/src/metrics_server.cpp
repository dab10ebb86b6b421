#include "atrex/common/metrics_server.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <charconv>
#include <exception>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <prometheus/exposer.h>

#include "atrex/common/json_io.h"

namespace atrex::metrics {
namespace fs = std::filesystem;

Result<ListenAddress> parse_listen_address(const std::string& value, const std::string& flag) {
  auto bad = [&](const std::string& why) {
    return invalid_input(fmt::format(
        "{}: expected ADDR:PORT (a numeric IPv4 address, or [IPv6], and a port 0-65535; "
        "port 0 = any free port), {}; got \"{}\"",
        flag, why, value));
  };
  const auto colon = value.rfind(':');
  if (colon == std::string::npos) return bad("no ':PORT'");
  std::string host = value.substr(0, colon);
  const std::string port_text = value.substr(colon + 1);
  int port = -1;
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() ||
      port < 0 || port > 65535) {
    return bad("the port is not a number in 0-65535");
  }
  unsigned char buf[16];
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    if (::inet_pton(AF_INET6, host.c_str(), buf) != 1)
      return bad("the address is not an IPv6 address");
  } else if (::inet_pton(AF_INET, host.c_str(), buf) != 1) {
    return bad("the address is not a numeric IPv4 address");
  }
  return ListenAddress{host, port};
}

std::string advertised_host(const std::string& bind_host) {
  if (bind_host == "0.0.0.0" || bind_host == "::") {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) == 0 && name[0] != '\0') return name;
    return "localhost";
  }
  return bind_host.find(':') != std::string::npos ? "[" + bind_host + "]" : bind_host;
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(
    const ListenAddress& address, std::shared_ptr<prometheus::Registry> registry) {
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  const bool v6 = address.host.find(':') != std::string::npos;
  const std::string bind =
      fmt::format("{}:{}", v6 ? "[" + address.host + "]" : address.host, address.port);
  try {
    // civetweb throws (CivetException) when it cannot bind.
    s->exposer_ = std::make_unique<prometheus::Exposer>(bind, 2);
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kUnavailable,
                      fmt::format("metrics endpoint {}: cannot listen: {}", bind, e.what()));
  }
  s->registry_ = std::move(registry);
  s->exposer_->RegisterCollectable(s->registry_);
  const auto ports = s->exposer_->GetListeningPorts();
  if (ports.empty() || ports.front() <= 0) {
    return make_error(ErrorCode::kUnavailable,
                      fmt::format("metrics endpoint {}: no listening port", bind));
  }
  s->host_ = address.host;
  s->port_ = ports.front();
  return s;
}

MetricsServer::~MetricsServer() = default;

std::string MetricsServer::target() const {
  return fmt::format("{}:{}", advertised_host(host_), port_);
}

Result<std::unique_ptr<TargetFile>> TargetFile::write(
    const fs::path& dir, const std::string& name, const std::string& target,
    const std::map<std::string, std::string>& labels) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return io_error(
        fmt::format("{}: cannot create the metrics target folder: {}", dir.string(), ec.message()));
  nlohmann::json group = nlohmann::json::object();
  group["targets"] = nlohmann::json::array({target});
  group["labels"] = labels;
  const fs::path path = dir / (name + ".json");
  // Atomic (temporary file + rename): Prometheus never reads half a file.
  auto written = write_text_file_atomic(path, nlohmann::json::array({group}).dump(2) + "\n");
  if (!written) return tl::unexpected(written.error());
  return std::unique_ptr<TargetFile>(new TargetFile(path));
}

TargetFile::~TargetFile() {
  std::error_code ec;
  fs::remove(path_, ec);
}

Exposition::~Exposition() {
  target_file.reset();  // no longer discoverable before the endpoint goes away
  server.reset();
}

Result<std::unique_ptr<Exposition>> start_exposition(
    const ListenAddress& address, const fs::path& targets_dir, const std::string& sweep,
    const std::string& role, const std::string& worker, const std::string& file_name) {
  auto e = std::make_unique<Exposition>();
  e->registry = std::make_shared<prometheus::Registry>();
  auto server = MetricsServer::start(address, e->registry);
  if (!server) return tl::unexpected(server.error());
  e->server = std::move(*server);
  if (!targets_dir.empty()) {
    auto file =
        TargetFile::write(targets_dir, file_name.empty() ? worker : file_name, e->server->target(),
                          {{"sweep", sweep}, {"role", role}, {"worker", worker}});
    if (!file) return tl::unexpected(file.error());
    e->target_file = std::move(*file);
  }
  return e;
}

std::filesystem::path metrics_targets_dir(const std::filesystem::path& results) {
  return results / "metrics" / "targets";
}

Result<std::unique_ptr<Exposition>> start_worker_exposition(
    const Manifest& m, const std::optional<ListenAddress>& flag, const std::string& role,
    const std::string& worker) {
  std::optional<ListenAddress> listen = flag;
  const ClusterOptions co = m.cluster.value_or(ClusterOptions{});
  if (!listen && !co.metrics.empty()) {
    ATREX_ASSIGN_OR_RETURN(listen,
                           parse_listen_address(co.metrics, "the manifest's cluster.metrics"));
  }
  if (!listen) return std::unique_ptr<Exposition>();
  // In a folder shared by sweeps the file names carry the sweep id.
  const bool shared = !co.metrics_targets.empty();
  const std::filesystem::path dir = shared ? co.metrics_targets : metrics_targets_dir(m.output);
  return start_exposition(*listen, dir, m.name, role, worker,
                          shared ? m.sweep_id + "-" + worker : worker);
}

}  // namespace atrex::metrics
