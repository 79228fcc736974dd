#include "app/userspace_stack_mode.h"

#include <algorithm>

#include "dataplane/output_limits.h"
#include "fmt/format.h"

namespace infergate::app {

namespace tcp = dataplane::tcp;

absl::StatusOr<std::vector<uint16_t>> servicePorts(const config::Config& c, std::string_view mode,
                                                   std::string_view why) {
  std::vector<uint16_t> ports;
  for (const config::ListenerConfig& l : c.listeners) {
    if (l.port == 0)
      return absl::InvalidArgumentError(
          fmt::format("listener '{}': port 0 is not supported in {} mode ({})", l.name, mode, why));
    ports.push_back(l.port);
  }
  return ports;
}

tcp::SynCookies stackSynCookies(xdp::SynCookies mode) {
  switch (mode) {
    case xdp::SynCookies::kOff:
      return tcp::SynCookies::kOff;
    case xdp::SynCookies::kAlways:
      return tcp::SynCookies::kAlways;
    case xdp::SynCookies::kAuto:
      break;
  }
  return tcp::SynCookies::kOnOverflow;
}

uint32_t connectionsPerReactor(const config::Config& c) {
  return static_cast<uint32_t>(
      std::max<uint64_t>(1, c.limits.max_connections / static_cast<uint64_t>(c.reactors)));
}

uint32_t synBacklogPerReactor(const config::Config& c) {
  return std::min<uint32_t>(4096, connectionsPerReactor(c));
}

dataplane::AfXdpReactorOptions userspaceReactorOptions(const config::Config& c, int queue,
                                                       std::shared_ptr<tcp::SynCookieJar> jar,
                                                       tcp::SynCookies cookies,
                                                       common::MetricsRegistry& registry) {
  dataplane::AfXdpReactorOptions ro;
  ro.index = queue;
  ro.tcp.max_connections = connectionsPerReactor(c);
  ro.tcp.rcv_buf = c.afxdp_tcp_rcv_buf;  // xdp.tcp_rcv_buf (the cookie SYN-ACKs' shift follows)
  ro.tcp.max_held_frames = c.afxdp_held_frames;
  ro.tcp.max_held_frames_per_connection = c.afxdp_held_frames_per_connection;
  ro.tcp.syn_backlog = synBacklogPerReactor(c);
  ro.tcp.syn_cookies = cookies;
  ro.tcp.cookie_jar = std::move(jar);
  ro.tcp.output.send_timeout_ns = c.limits.send_timeout_ms * 1'000'000;
  ro.tcp.output.min_drain_bytes = c.limits.min_drain_bytes;
  ro.tcp.output.max_bytes_per_connection = c.limits.max_output_bytes_per_connection;
  ro.tcp.output.max_bytes = c.limits.max_output_bytes;
  ro.tcp.output.used = &dataplane::outputBytesGauge(registry);
  return ro;
}

absl::Status listenAll(dataplane::AfXdpReactor& reactor, const config::Config& c,
                       const ListenerFactory& factory) {
  for (const config::ListenerConfig& l : c.listeners) {
    if (absl::Status s = reactor.listen(l.port, factory(l)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

namespace {

struct CounterField {
  const char* name;
  uint64_t tcp::TcpCounters::*field;
};
constexpr CounterField kTcpCounters[] = {
    {"frames_in", &tcp::TcpCounters::frames_in},
    {"segments_in", &tcp::TcpCounters::segments_in},
    {"segments_out", &tcp::TcpCounters::segments_out},
    {"bytes_in", &tcp::TcpCounters::bytes_in},
    {"bytes_out", &tcp::TcpCounters::bytes_out},
    {"retransmits", &tcp::TcpCounters::retransmits},
    {"fast_retransmits", &tcp::TcpCounters::fast_retransmits},
    {"rto_expirations", &tcp::TcpCounters::rto_expirations},
    {"out_of_order", &tcp::TcpCounters::out_of_order},
    {"duplicate_segments", &tcp::TcpCounters::duplicate_segments},
    {"partial_duplicates", &tcp::TcpCounters::partial_duplicates},
    {"syn_received", &tcp::TcpCounters::syn_received},
    {"accepted", &tcp::TcpCounters::accepted},
    {"refused", &tcp::TcpCounters::refused},
    {"rst_in", &tcp::TcpCounters::rst_in},
    {"rst_out", &tcp::TcpCounters::rst_out},
    {"challenge_acks", &tcp::TcpCounters::challenge_acks},
    {"zero_window_probes", &tcp::TcpCounters::zero_window_probes},
    {"keepalive_probes", &tcp::TcpCounters::keepalive_probes},
    {"timeouts", &tcp::TcpCounters::timeouts},
    {"fin_wait2_timeouts", &tcp::TcpCounters::fin_wait2_timeouts},
    {"time_wait_recycled", &tcp::TcpCounters::time_wait_recycled},
    {"ignored_arp", &tcp::TcpCounters::ignored_arp},
    {"ignored_icmp", &tcp::TcpCounters::ignored_icmp},
    {"ignored_other", &tcp::TcpCounters::ignored_other},
    {"xdp_rejected", &tcp::TcpCounters::xdp_rejected},
    {"xdp_reject_ignored", &tcp::TcpCounters::xdp_reject_ignored},
    {"syn_backlog_full", &tcp::TcpCounters::syn_backlog_full},
    {"cookies_sent", &tcp::TcpCounters::cookies_sent},
    {"cookies_validated", &tcp::TcpCounters::cookies_validated},
    {"cookies_rejected", &tcp::TcpCounters::cookies_rejected},
    {"half_open_evicted", &tcp::TcpCounters::half_open_evicted},
    {"send_timeouts", &tcp::TcpCounters::send_timeouts},
    {"output_limit_closes", &tcp::TcpCounters::output_limit_closes},
    {"output_process_closes", &tcp::TcpCounters::output_process_closes},
    {"output_discarded_bytes", &tcp::TcpCounters::output_discarded_bytes},
    {"output_read_pauses", &tcp::TcpCounters::output_read_pauses},
    {"ooo_frames_held", &tcp::TcpCounters::ooo_frames_held_total},
    {"ooo_held_bytes_delivered", &tcp::TcpCounters::ooo_held_bytes_delivered},
    {"ooo_hold_fallbacks", &tcp::TcpCounters::ooo_hold_fallbacks},
};

uint64_t relaxed(const uint64_t& v) {
  // Reactor-owned plain counters read from the admin thread (dataplane/tcp/counters.h).
  return __atomic_load_n(&v, __ATOMIC_RELAXED);
}

}  // namespace

void renderTcpMetrics(const std::vector<dataplane::AfXdpReactor*>& reactors, std::string& out) {
  for (const CounterField& f : kTcpCounters) {
    out += fmt::format("# TYPE infergate_tcp_{}_total counter\n", f.name);
    for (size_t q = 0; q < reactors.size(); ++q)
      out += fmt::format("infergate_tcp_{}_total{{queue=\"{}\"}} {}\n", f.name, q,
                         relaxed(reactors[q]->tcpCounters().*f.field));
  }
  out += "# TYPE infergate_tcp_drops_total counter\n";
  for (size_t q = 0; q < reactors.size(); ++q) {
    const tcp::TcpCounters& c = reactors[q]->tcpCounters();
    for (size_t r = 0; r < static_cast<size_t>(tcp::DropReason::kCount); ++r)
      out += fmt::format("infergate_tcp_drops_total{{queue=\"{}\",reason=\"{}\"}} {}\n", q,
                         std::string(tcp::dropReasonName(static_cast<tcp::DropReason>(r))),
                         relaxed(c.drops[r]));
  }
  // Receive-side copies in userspace (docs/TCP.md "Out-of-order data in its frames").
  out += "# TYPE infergate_tcp_rx_copied_bytes_total counter\n";
  for (size_t q = 0; q < reactors.size(); ++q) {
    const tcp::TcpCounters& c = reactors[q]->tcpCounters();
    out += fmt::format("infergate_tcp_rx_copied_bytes_total{{queue=\"{}\",reason=\"ooo\"}} {}\n", q,
                       relaxed(c.rx_copied_ooo_bytes));
    out += fmt::format("infergate_tcp_rx_copied_bytes_total{{queue=\"{}\",reason=\"paused\"}} {}\n",
                       q, relaxed(c.rx_copied_paused_bytes));
  }
  out += "# TYPE infergate_tcp_ooo_frames_held gauge\n";
  for (size_t q = 0; q < reactors.size(); ++q)
    out += fmt::format("infergate_tcp_ooo_frames_held{{queue=\"{}\"}} {}\n", q,
                       relaxed(reactors[q]->tcpCounters().ooo_frames_held));
  out += "# TYPE infergate_tcp_connections gauge\n";
  for (size_t q = 0; q < reactors.size(); ++q) {
    const tcp::TcpCounters& c = reactors[q]->tcpCounters();
    for (size_t s = 1; s < static_cast<size_t>(tcp::TcpState::kCount); ++s)
      out += fmt::format("infergate_tcp_connections{{queue=\"{}\",state=\"{}\"}} {}\n", q,
                         std::string(tcp::stateName(static_cast<tcp::TcpState>(s))),
                         relaxed(c.conns_by_state[s]));
  }
}

void stopReactors(const std::vector<std::unique_ptr<dataplane::AfXdpReactor>>& reactors,
                  uint64_t drain_ms) {
  for (const auto& r : reactors) r->stop(drain_ms * 1'000'000);
  for (const auto& r : reactors) r->join();
}

}  // namespace infergate::app
