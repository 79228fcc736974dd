#pragma once
// dpdk mode (docs/DPDK.md): infergate's TCP stack and sessions over one DPDK ethdev port. Built
// only with INFERGATE_WITH_DPDK=ON (libdpdk found) and the XDP build (the classifier's options
// and counter rendering live in ig_xdp); app/modes/dpdk.cc answers UNIMPLEMENTED otherwise.
//
// Start-up (DpdkMode::start), from the main thread, in this order:
//   1. EAL from the dpdk: section (dataplane/dpdk/eal.h): one EAL lcore (the first CPU this
//      process may run on unless dpdk.eal_args choose lcores), telemetry off unless eal_args
//      ask for it, with no_huge and no memory_mb a memory size from the pools (see below);
//   2. the port (dpdk.port) with one rx/tx queue pair per reactor (RSS for several), a pool of
//      dpdk.mbufs_per_queue mbufs per queue; errors name the port, the queue count, the pool;
//   3. per queue: a DpdkDevice, wrapped by a FilteringDevice (the XDP program's rules: ig_config
//      from xdp::buildConfig(config.xdp with the listeners' ports as service ports), the CIDR
//      entries, ARP / ICMP / ND answers for dpdk.ipv4 / dpdk.ipv6 with the port's MAC), behind a
//      PollableDevice adapter (fd -1: the reactor spins), served by an AfXdpReactor with
//      busy_poll (pinned to config.cpus[q] when given) whose stack listens on every listener's
//      port with the listener's session factory.
// Nothing is served before serve().
//
// Overload publishing: with `models`, every model's overload level goes to every
// FilteringDevice (setOverloadLevel), again for the new set after a reload (modelsChanged); the
// listeners are cleared at stop.
//
// Reload (reconfigureXdp): the xdp: rules that xdp-filter and afxdp modes rewrite in the
// program's maps are rewritten here in every queue's filter, on its reactor thread.
//
// Metrics (/metrics): the filters' counters summed over the queues as infergate_xdp_* (the same
// rules and names as the XDP program's, counted in userspace), infergate_tcp_* per queue (the
// same as afxdp mode's: app/userspace_stack_mode.h), infergate_dpdk_* per queue (device statistics
// and the ARP / ICMP answers) and infergate_dpdk_port_info.
//
// Stop: reactors drain (up to drain_ms), reset their connections and end; then the stacks and
// devices go (the held mbufs back to their pools), then the port is stopped and its pools freed.
// EAL itself stays up until the process exits (it cannot be initialised twice).
//
// Threading: start/serve/stop from the main thread; reconfigureXdp/modelsChanged from the
// thread that reloads (Server serializes reloads with stop).

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "app/modes/mode.h"
#include "common/metrics.h"
#include "config/config.h"

namespace infergate::backends {
class ModelRegistry;
}

namespace infergate::app {

class DpdkMode {
 public:
  // `models` (may be null: no overload publishing) must outlive stop().
  static absl::StatusOr<std::unique_ptr<DpdkMode>> start(
      const config::Config& config, const ListenerFactory& factory,
      common::MetricsRegistry& registry, const backends::ModelRegistry* models = nullptr);
  ~DpdkMode();
  DpdkMode(const DpdkMode&) = delete;
  DpdkMode& operator=(const DpdkMode&) = delete;

  // Starts the reactor threads. Once, after start().
  void serve();
  // Drains for up to drain_ms, resets the connections, closes the devices, stops the port.
  // Idempotent.
  void stop(uint64_t drain_ms);

  // Configuration reload (ServingMode::reconfigureXdp): the xdp: rules of `next` prepared here
  // (validated; nothing changes on an error) and put in force by each reactor between two
  // bursts (FilteringDevice::setRules). Table sizes and what start() derived from the
  // listeners stay. From the reloading thread, never concurrent with stop().
  absl::Status reconfigureXdp(const xdp::XdpOptions& next);
  // The served models changed: their overload levels reach every queue's filter.
  void modelsChanged(const backends::ModelRegistry& models);

 private:
  struct State;
  DpdkMode();
  std::unique_ptr<State> state_;
};

}  // namespace infergate::app
