#include "app/modes/socket_mode.h"

#include <string>

#include "dataplane/output_limits.h"
#include "spdlog/spdlog.h"

namespace infergate::app {

absl::StatusOr<std::unique_ptr<ServingMode>> makeSocketMode() {
  return std::make_unique<SocketMode>();
}

absl::Status SocketMode::start(const ModeContext& ctx) {
  const config::Config& c = ctx.config;
  // Reactors and their SO_REUSEPORT listeners. With port 0 the first socket picks the port and
  // the other reactors bind the same one.
  for (int i = 0; i < c.reactors; ++i) {
    dataplane::ReactorOptions ro;
    ro.index = i;
    ro.cpu = c.cpus.empty() ? -1 : c.cpus[i];
    ro.max_connections = c.limits.max_connections;
    ro.connections = ctx.connections;
    ro.metrics = ctx.connection_metrics;
    ro.output.send_timeout_ns = c.limits.send_timeout_ms * 1'000'000;
    ro.output.min_drain_bytes = c.limits.min_drain_bytes;
    ro.output.max_bytes_per_connection = c.limits.max_output_bytes_per_connection;
    ro.output.max_bytes = c.limits.max_output_bytes;
    ro.output.used = &dataplane::outputBytesGauge(ctx.registry);
    ro.tag_lookup = tagLookup();
    reactors_.push_back(std::make_unique<dataplane::SocketReactor>(ro));
  }
  std::vector<uint16_t> service_ports;
  for (const config::ListenerConfig& l : c.listeners) {
    uint16_t port = l.port;
    for (int i = 0; i < c.reactors; ++i) {
      absl::StatusOr<int> fd = dataplane::openListener(l.address, port, &port);
      if (!fd.ok()) {
        reactors_.clear();
        return absl::Status(fd.status().code(),
                            "listener '" + l.name + "': " + std::string(fd.status().message()));
      }
      reactors_[i]->addListener(
          *fd, ctx.sessions(l),
          l.protocol == "http" ? dataplane::SocketReactor::kHttpRefusal : std::string());
    }
    service_ports.push_back(port);
    spdlog::info("listener '{}' on {}:{} protocol {} ({} reactor(s), SO_REUSEPORT)", l.name,
                 l.address, port, l.protocol, c.reactors);
  }
  if (absl::Status st = afterListen(ctx, service_ports); !st.ok()) {
    reactors_.clear();
    return st;
  }
  return absl::OkStatus();
}

void SocketMode::serve() {
  for (auto& r : reactors_) r->start();
}

void SocketMode::stop(uint64_t drain_ms) {
  for (auto& r : reactors_) r->stop(drain_ms * 1'000'000);
  for (auto& r : reactors_) r->join();
  reactors_.clear();
}

}  // namespace infergate::app
