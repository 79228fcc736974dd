#pragma once
// What the two modes that run infergate's own TCP stack (afxdp: app/afxdp_mode.cc, dpdk:
// app/dpdk_mode.cc) share: the listeners' ports, each reactor's share of the limits and its
// stack options from the configuration, the listeners on a reactor, the infergate_tcp_*
// metrics, and the reactors' stop. The devices, the XDP program or filter, and the mode's own
// metrics stay in the modes.
//
// Threading: everything from the main thread, except renderTcpMetrics (the admin thread, under
// the caller's lock that keeps the reactors alive).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "app/modes/mode.h"
#include "common/metrics.h"
#include "config/config.h"
#include "dataplane/afxdp_reactor.h"
#include "dataplane/tcp/syncookie_jar.h"
#include "dataplane/tcp/tcp_stack.h"

namespace infergate::app {

// Every listener's port, in order; port 0 is refused: "listener '<name>': port 0 is not
// supported in <mode> mode (<why>)".
absl::StatusOr<std::vector<uint16_t>> servicePorts(const config::Config& config,
                                                   std::string_view mode, std::string_view why);

// The stack's cookie policy for xdp.syn_cookies (auto: cookies when the backlog overflows).
dataplane::tcp::SynCookies stackSynCookies(xdp::SynCookies mode);

// Each reactor's share of limits.max_connections (at least 1), and its half-open backlog:
// min(4096, that share).
uint32_t connectionsPerReactor(const config::Config& config);
uint32_t synBacklogPerReactor(const config::Config& config);

// One reactor's stack options: its share of limits.max_connections (at least 1), a half-open
// backlog of min(4096, that share), the receive buffer and held-frame bounds (xdp.tcp_rcv_buf,
// xdp.held_frames...), the cookie policy and `jar` (one key pair for every reactor), the output
// limits with the process-wide output gauge of `registry`. The caller sets cpu, busy_poll and
// name.
dataplane::AfXdpReactorOptions userspaceReactorOptions(
    const config::Config& config, int queue, std::shared_ptr<dataplane::tcp::SynCookieJar> jar,
    dataplane::tcp::SynCookies cookies, common::MetricsRegistry& registry);

// Every listener of `config` on `reactor`, with the listener's session factory.
absl::Status listenAll(dataplane::AfXdpReactor& reactor, const config::Config& config,
                       const ListenerFactory& factory);

// infergate_tcp_* for `reactors` (label queue = the index): the counters, drops by reason,
// receive copies by reason, held out-of-order frames, connections by state. The reactors'
// counters are read with relaxed loads (dataplane/tcp/counters.h).
void renderTcpMetrics(const std::vector<dataplane::AfXdpReactor*>& reactors, std::string& out);

// Stops every reactor (drain up to drain_ms, then its connections are reset) and joins them.
void stopReactors(const std::vector<std::unique_ptr<dataplane::AfXdpReactor>>& reactors,
                  uint64_t drain_ms);

}  // namespace infergate::app
