#pragma once
// afxdp mode: the XDP ingress program redirects service-port TCP to one AF_XDP socket per rx
// queue, and one pinned reactor per queue serves it with infergate's own TCP stack and the
// same sessions socket mode runs. Everything else (ARP, ICMP, other ports) still reaches the
// kernel, which keeps answering for the interface's address.
//
// Start-up (AfXdpMode::start): the interface's rx queue count must equal `reactors` (one
// reactor per queue; otherwise the error says what to change); the gateway's IPv4 address and
// MAC are read from the interface and logged; the program is loaded with redirect + metadata,
// each queue's socket is bound (zero-copy first, copy mode otherwise) and put into the XSKMAP,
// and only then is the program attached. /metrics gains infergate_tcp_* (per queue) and
// infergate_afxdp_* (zero-copy gauge, ring kicks, kernel drop counters).
//
// Overload publishing: with `models`, every BatchedModel's overload level is published to the
// program (the same as xdp-filter mode, publishOverloadLevels); the listeners are cleared at
// stop, before the program goes away.
//
// Stop: reactors drain (requests in progress may finish within drain_ms), then every
// connection is reset, the sockets leave the XSKMAP and are closed, the program is detached.
//
// Serving: start() does every privileged step and leaves the reactors idle; serve() starts them
// (and the SYN cookie controller), after Server has dropped privileges (app/privileges.h).
//
// Threading: start/serve/stop from the main thread.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "app/modes/mode.h"
#include "app/modes/overload.h"
#include "config/config.h"
#include "net/session.h"

namespace infergate::backends {
class ModelRegistry;
}

namespace infergate::app {

// Knobs of afxdp mode that the config file does not carry yet. fromEnvironment() reads
// INFERGATE_AFXDP_ZERO_COPY (auto|require|off) and INFERGATE_AFXDP_FRAMES (rx and tx frames
// per queue). Busy polling is configured in the file (xdp.busy_poll, prefer_busy_poll,
// busy_poll_usecs, busy_poll_budget: config.xdp).
struct AfXdpModeOptions {
  std::string zero_copy = "auto";  // auto | require | off
  uint32_t frames = 4096;          // rx frames and tx frames per queue (4 KiB each)
  static AfXdpModeOptions fromEnvironment();
};

class AfXdpMode {
 public:
  // `models` (may be null: no overload publishing) must outlive stop().
  static absl::StatusOr<std::unique_ptr<AfXdpMode>> start(const config::Config& config,
                                                         const ListenerFactory& factory,
                                                         common::MetricsRegistry& registry,
                                                         const AfXdpModeOptions& options,
                                                         const backends::ModelRegistry* models = nullptr);
  ~AfXdpMode();
  AfXdpMode(const AfXdpMode&) = delete;
  // Starts the reactor threads and the cookie controller. Once, after start().
  void serve();
  AfXdpMode& operator=(const AfXdpMode&) = delete;

  // Drains for up to drain_ms, resets the connections, closes the sockets, detaches XDP.
  // Idempotent.
  void stop(uint64_t drain_ms);

  // Configuration reload (from the thread that reloads, serialized by Server): the program's
  // rules from `next` (the config's xdp section), in place (XdpFilter::reconfigure); what this
  // mode sets itself at start (service ports, XSK redirect, metadata, mid-stream judging, the
  // SYN-ACK window scale) stays as it is.
  absl::Status reconfigureXdp(const xdp::XdpOptions& next);
  // The served models changed: overload publishing follows the new set.
  void modelsChanged(const backends::ModelRegistry& models);

 private:
  struct State;
  AfXdpMode();
  std::unique_ptr<State> state_;
};

// The hook server.cc calls for Mode::kAfXdp (options from the environment).
absl::StatusOr<std::unique_ptr<AfXdpMode>> startAfXdpMode(
    const config::Config& config, const ListenerFactory& factory,
    common::MetricsRegistry& registry, const backends::ModelRegistry* models = nullptr);

}  // namespace infergate::app
