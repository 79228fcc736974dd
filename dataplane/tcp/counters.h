#pragma once
// Per-stack counters: plain integers owned by the stack's reactor thread. The metrics
// exporter reads them with relaxed loads from the admin thread (torn reads of a 64-bit
// counter cannot happen on x86-64/aarch64; a value may be one iteration stale).

#include <array>
#include <cstdint>
#include <string_view>

namespace infergate::dataplane::tcp {

enum class DropReason : uint8_t {
  kTooShort,          // frame shorter than its headers say
  kNotIp,             // ethertype neither IPv4 nor IPv6 (VLAN tags included)
  kBadIpHeader,       // version, IHL, total length
  kBadIpChecksum,
  kFragment,          // IPv4 fragment (the XDP program should not pass these)
  kIpv6ExtHeader,     // IPv6 next header other than TCP
  kBadTcpHeader,      // data offset, option lengths
  kBadTcpChecksum,
  kNoListener,        // SYN to a port nobody listens on (answered with RST)
  kNoConnection,      // segment for no connection (answered with RST unless RST)
  kSynQueueFull,      // SYN dropped: too many half-open connections
  kConnLimit,         // SYN refused with RST: connection table full
  kOutOfWindow,       // unacceptable sequence number (answered with ACK)
  kPaws,              // timestamp older than ts_recent (RFC 7323 PAWS)
  kBadAck,            // ACK for data never sent / too old (RFC 5961 §5)
  kOooLimit,          // out-of-order segment that would exceed the range table
  kBeyondWindow,      // bytes beyond the receive window (trimmed)
  kTxNoFrame,         // no transmit buffer free: segment not sent (retried by timers)
  kInvalidFlags,      // e.g. SYN+FIN, no ACK in a synchronized state
  kMissingTimestamp,  // no timestamp on a connection that negotiated them (RFC 7323 §3.2)
  kBadCookie,         // ACK for no connection whose cookie does not validate (answered with RST)
  kCount
};

std::string_view dropReasonName(DropReason r);

enum class TcpState : uint8_t {
  kClosed,
  kSynReceived,
  kEstablished,
  kCloseWait,
  kLastAck,
  kFinWait1,
  kFinWait2,
  kClosing,
  kTimeWait,
  kCount
};

std::string_view stateName(TcpState s);

struct TcpCounters {
  uint64_t frames_in = 0;
  uint64_t segments_in = 0;
  uint64_t segments_out = 0;
  uint64_t bytes_in = 0;        // payload bytes accepted in order
  uint64_t bytes_out = 0;       // payload bytes sent (retransmissions included)
  uint64_t retransmits = 0;     // segments sent again (RTO, fast retransmit, partial ACKs)
  uint64_t fast_retransmits = 0;
  uint64_t rto_expirations = 0;
  uint64_t out_of_order = 0;    // segments stored beyond a hole
  uint64_t duplicate_segments = 0;  // segments entirely below rcv_nxt
  uint64_t partial_duplicates = 0;  // segments trimmed at the front
  uint64_t syn_received = 0;
  uint64_t accepted = 0;        // handshakes completed
  uint64_t refused = 0;         // SYNs answered with RST because the table was full
  uint64_t rst_in = 0;          // connections reset by the peer
  uint64_t rst_out = 0;
  uint64_t challenge_acks = 0;  // RFC 5961
  uint64_t zero_window_probes = 0;
  uint64_t keepalive_probes = 0;
  uint64_t timeouts = 0;        // connections aborted by retransmission/keep-alive limits
  uint64_t fin_wait2_timeouts = 0;
  uint64_t time_wait_recycled = 0;
  uint64_t ignored_arp = 0;     // not ours: the kernel answers ARP, ND and ping
  uint64_t ignored_icmp = 0;
  uint64_t ignored_other = 0;   // IP but neither TCP nor ICMP
  uint64_t xdp_rejected = 0;    // connections freed because the XDP program rejected the flow
  uint64_t xdp_reject_ignored = 0;  // reject flags on segments that could not prove they start
                                    // the connection's first request (spoofing): ignored
  uint64_t syn_backlog_full = 0;    // SYNs that found the backlog full (answered by cookie or
                                    // dropped, per TcpOptions::syn_cookies)
  uint64_t cookies_sent = 0;        // SYN-ACKs carrying a cookie, with no state kept
  uint64_t cookies_validated = 0;   // connections created from a valid cookie ACK/data segment
  uint64_t cookies_rejected = 0;    // ACKs for no connection whose cookie did not validate
                                    // (forgeries, and stray ACKs of closed connections)
  uint64_t half_open_evicted = 0;   // half-open connections dropped to make room (table full);
                                    // their ACK still completes them as a cookie
  // Slow readers and output memory (TcpOptions::output, dataplane/output_limits.h).
  uint64_t send_timeouts = 0;       // reset: less than min_drain_bytes acknowledged in
                                    // send_timeout_ns while data was queued
  uint64_t output_limit_closes = 0;    // reset: the send buffer would exceed its per-connection limit
  uint64_t output_process_closes = 0;  // reset: the process output budget would be exceeded
  uint64_t output_discarded_bytes = 0; // queued bytes never acknowledged by a connection that ended
  uint64_t output_read_pauses = 0;     // delivery paused because the send buffer piled up
  // Receive copies (docs/TCP.md "Out-of-order data in its frames"). In-order data that can be
  // delivered goes from the frame to the session; out-of-order segments are held in their
  // received frames (PacketDevice::rxHoldBudget) and delivered from there once the hole fills.
  uint64_t ooo_frames_held = 0;          // gauge: frames held for out-of-order data right now
  uint64_t ooo_frames_held_total = 0;    // frames ever held
  uint64_t ooo_held_bytes_delivered = 0; // bytes given to sessions straight from held frames
  uint64_t ooo_hold_fallbacks = 0;       // out-of-order segments copied because no frame could
                                         // be held (stack or connection bound, device budget)
  uint64_t rx_copied_ooo_bytes = 0;      // bytes copied into receive buffers for reordering
  uint64_t rx_copied_paused_bytes = 0;   // bytes copied because the session was not reading
                                         // (paused, or earlier bytes still buffered)
  std::array<uint64_t, static_cast<size_t>(DropReason::kCount)> drops{};
  std::array<uint64_t, static_cast<size_t>(TcpState::kCount)> conns_by_state{};  // gauges

  void drop(DropReason r) { ++drops[static_cast<size_t>(r)]; }
  uint64_t dropped(DropReason r) const { return drops[static_cast<size_t>(r)]; }
  uint64_t inState(TcpState s) const { return conns_by_state[static_cast<size_t>(s)]; }
};

}  // namespace infergate::dataplane::tcp
