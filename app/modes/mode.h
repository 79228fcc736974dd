#pragma once
// A serving mode: how connections reach the protocol sessions (docs/ARCHITECTURE.md, "Serving
// modes"). Server picks one at start-up from the table in modes.cc and never asks which mode
// it runs again; which modes a build has is decided by which files CMake compiles
// (xdp_filter_mode.cc and afxdp.cc with the XDP program, unavailable.cc without it).
//
// Life cycle, all from the main thread: start() does every privileged step (listeners, the XDP
// program, AF_XDP sockets) and serves nothing; Server then drops privileges and calls serve();
// stop() drains for up to drain_ms, joins the threads and detaches what start() attached. stop()
// is idempotent and safe after a failed start().

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "config/config.h"
#include "dataplane/connection_metrics.h"
#include "net/session.h"

namespace infergate::backends {
class ModelRegistry;
}

namespace infergate::app {

// Makes the session factory of a listener (HTTP/1.1, gRPC or sniffing, by its protocol).
using ListenerFactory = std::function<net::SessionFactory(const config::ListenerConfig&)>;

// What every mode is started with; everything outlives the mode's stop().
struct ModeContext {
  const config::Config& config;
  common::MetricsRegistry& registry;
  const backends::ModelRegistry& models;  // for overload publishing (XDP modes)
  ListenerFactory sessions;
  dataplane::ConnectionMetrics* connection_metrics = nullptr;  // kernel-socket modes
  std::atomic<uint64_t>* connections = nullptr;                // process-wide open connections
};

class ServingMode {
 public:
  virtual ~ServingMode() = default;
  virtual absl::Status start(const ModeContext& ctx) = 0;
  virtual void serve() = 0;
  virtual void stop(uint64_t drain_ms) = 0;
  // The mode attached an XDP program: it keeps CAP_NET_ADMIN (permitted only) to detach it
  // through netlink at stop, and its seccomp filter allows the bpf() map calls.
  virtual bool attachesXdp() const { return false; }

  // Configuration reload (app/reload.h), from the thread that reloads (serialized by Server):
  // the XDP program's rules changed (xdp-filter and afxdp modes: written into the program's
  // rule maps in place, XdpFilter::reconfigure; no new program, no detach, no privilege).
  // Other modes: UNIMPLEMENTED (the reload planner refuses the keys before asking).
  virtual absl::Status reconfigureXdp(const xdp::XdpOptions& /*next*/) {
    return absl::UnimplementedError("live XDP rule changes need xdp-filter or afxdp mode");
  }
  // The served models changed (added, removed, replaced): the XDP modes publish the overload
  // levels of the new set.
  virtual void modelsChanged(const backends::ModelRegistry& /*models*/) {}
};

// The mode `mode` names, from the table; UNIMPLEMENTED (with what to build or configure) for a
// mode this build does not have.
absl::StatusOr<std::unique_ptr<ServingMode>> makeServingMode(config::Mode mode);

// One factory per mode (the table's entries).
absl::StatusOr<std::unique_ptr<ServingMode>> makeSocketMode();
absl::StatusOr<std::unique_ptr<ServingMode>> makeXdpFilterMode();
absl::StatusOr<std::unique_ptr<ServingMode>> makeAfXdpMode();
absl::StatusOr<std::unique_ptr<ServingMode>> makeDpdkMode();  // modes/dpdk.cc (docs/DPDK.md)

// `infergate stats`: the counters of the XDP program whose maps are pinned under pin_path.
absl::Status printXdpStats(const std::string& pin_path, std::FILE* out);

}  // namespace infergate::app
