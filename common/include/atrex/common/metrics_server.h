// The HTTP endpoint Prometheus scrapes (`GET /metrics`, text exposition format 0.0.4), started by
// `--metrics-listen ADDR:PORT` on the long-lived commands, and the Prometheus `file_sd` target
// file that lets a Prometheus find a worker that listens on an ephemeral port.
//
// Sources: prometheus-cpp 1.0.1 `prometheus::Exposer` (civetweb); file-based service discovery
// https://prometheus.io/docs/prometheus/latest/configuration/configuration/#file_sd_config
// (a JSON list of {"targets": ["host:port"], "labels": {...}}; Prometheus re-reads the files
// when they change, so they are written atomically).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <prometheus/registry.h>

#include "atrex/common/error.h"
#include "atrex/common/wire/manifest.h"

namespace prometheus {
class Exposer;
}

namespace atrex::metrics {

struct ListenAddress {
  std::string host;  // numeric IPv4 ("0.0.0.0", "127.0.0.1") or IPv6 without brackets ("::")
  int port = 0;      // 0: an ephemeral port chosen by the kernel
};

// Parses "ADDR:PORT" (IPv4) or "[ADDR]:PORT" (IPv6), PORT in 0..65535. Errors (kInvalidInput)
// name `flag` and the value, e.g. `--metrics-listen: expected ADDR:PORT ...; got "x"`.
Result<ListenAddress> parse_listen_address(const std::string& value, const std::string& flag);

// The host name Prometheus should scrape for a server bound to `bind_host`: the machine's host
// name for a wildcard bind (0.0.0.0, ::), else the bound address itself.
std::string advertised_host(const std::string& bind_host);

// Serves `registry` at http://ADDR:PORT/metrics until destroyed. Thread-safe reads.
class MetricsServer {
 public:
  // Errors: kUnavailable when the address cannot be bound (in use, not local).
  static Result<std::unique_ptr<MetricsServer>> start(
      const ListenAddress& address, std::shared_ptr<prometheus::Registry> registry);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }                 // the bound port (the chosen one for port 0)
  const std::string& host() const { return host_; }  // as bound
  std::string target() const;                        // "<advertised host>:<port>" ([v6]:port)

 private:
  MetricsServer() = default;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string host_;
  int port_ = 0;
};

// A file_sd target file `<dir>/<name>.json` holding one target group, written atomically at
// construction and removed by the destructor (a worker's clean exit). Not thread-safe.
class TargetFile {
 public:
  // Errors: kIo when the folder cannot be created or the file written.
  static Result<std::unique_ptr<TargetFile>> write(
      const std::filesystem::path& dir, const std::string& name, const std::string& target,
      const std::map<std::string, std::string>& labels);
  ~TargetFile();
  TargetFile(const TargetFile&) = delete;
  TargetFile& operator=(const TargetFile&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  explicit TargetFile(std::filesystem::path path) : path_(std::move(path)) {}
  std::filesystem::path path_;
};

// What a long-lived command does with `--metrics-listen`: the server, and (when `targets_dir` is
// set) its target file `<targets_dir>/<file_name or worker>.json` labelled {sweep, role, worker}.
// Errors as MetricsServer::start / TargetFile::write.
struct Exposition {
  std::shared_ptr<prometheus::Registry> registry;
  std::unique_ptr<MetricsServer> server;
  std::unique_ptr<TargetFile> target_file;  // destroyed before the server
  ~Exposition();
};
Result<std::unique_ptr<Exposition>> start_exposition(const ListenAddress& address,
                                                     const std::filesystem::path& targets_dir,
                                                     const std::string& sweep,
                                                     const std::string& role,
                                                     const std::string& worker,
                                                     const std::string& file_name = "");

// Where the workers of the sweep whose results folder is `results` write their file_sd target
// files (docs/sweeps.md "Metrics"): <results>/metrics/targets.
std::filesystem::path metrics_targets_dir(const std::filesystem::path& results);

// A sweep worker's /metrics endpoint: at `flag` (its --metrics-listen), else at the manifest's
// cluster.metrics; none (null) when neither asks for one. The target file goes to the site's
// shared folder (cluster.metrics_targets, named <sweep id>-<worker>.json) or to
// <results>/metrics/targets/<worker>.json. Errors as start_exposition, and kInvalidInput for a
// bad cluster.metrics.
Result<std::unique_ptr<Exposition>> start_worker_exposition(
    const Manifest& manifest, const std::optional<ListenAddress>& flag, const std::string& role,
    const std::string& worker);

}  // namespace atrex::metrics
