#pragma once
// Private to the TCP stack (dataplane/tcp/*.cc): the per-connection state, TcpStack::Conn, and
// the helpers the stack's files share. Nothing outside dataplane/tcp/tcp_*.cc includes it.
//
// A connection is a Tcb (the control block: plain values, reset on reuse) plus what the stack
// owns for it (buffers, its session) and the net::Transport it is to its session; the
// Transport methods are in tcp_connection.cc. Threading: the stack's reactor thread.

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "dataplane/tcp/tcp_stack.h"
#include "dataplane/tcp/seq.h"

namespace infergate::dataplane::tcp {

constexpr uint32_t kNone = 0xffffffffu;
constexpr uint32_t kMaxOoo = 16;
constexpr uint64_t kMs = 1'000'000;

// The per-connection control block: plain values, reset by assigning Tcb{} on reuse.
struct Tcb {
  TcpState state = TcpState::kClosed;
  FlowKey key;
  uint8_t local_mac[6] = {};
  uint8_t remote_mac[6] = {};
  uint16_t listener = 0;
  uint64_t hash = 0;
  // Send side.
  uint32_t iss = 0, snd_una = 0, snd_nxt = 0, snd_max = 0;
  uint32_t snd_wnd = 0, snd_wl1 = 0, snd_wl2 = 0, max_snd_wnd = 0;
  uint32_t mss = 536;  // payload bytes per segment, options excluded
  uint8_t snd_wscale = 0, rcv_wscale = 0;
  bool wscale_ok = false, sack_ok = false, ts_ok = false;
  uint32_t ts_recent = 0, ts_offset = 0, last_ack_sent = 0;
  uint32_t cwnd = 0, ssthresh = 0xffffffffu, recover = 0, dupacks = 0;
  // The highest right edge the peer's SACK blocks reported for our data (dupack detection).
  uint32_t sack_high = 0;
  bool in_recovery = false;
  uint64_t srtt = 0, rttvar = 0, rto = 0;
  bool have_rtt = false, rtt_timing = false;
  uint32_t rtt_seq = 0;
  uint64_t rtt_start = 0, synack_sent_at = 0;
  uint32_t retries = 0, persist_probes = 0, ka_probes = 0;
  uint64_t persist_backoff = 0;
  bool app_close = false;  // closeAfterFlush(): FIN after the data queued so far
  uint32_t fin_seq = 0;    // our FIN's sequence number (valid when app_close)
  // Receive side.
  uint32_t irs = 0, rcv_nxt = 0, rcv_adv = 0, rx_read = 0;
  uint32_t ooo_start[kMaxOoo] = {}, ooo_end[kMaxOoo] = {};
  uint8_t ooo_n = 0, ooo_last = 0;
  bool peer_fin_pending = false;
  uint32_t peer_fin_seq = 0;
  bool fin_received = false, peer_close_notified = false;
  bool paused = false, deliver_pending = false, ack_now = false, dirty = false;
  // Out-of-order bytes: held in frames (held_head list, held_n frames) or, once any was copied
  // (ooo_copied, until the ranges drain), all in rx. Never both.
  uint32_t held_head = kNone, held_tail = kNone, held_n = 0;
  bool ooo_copied = false;
  bool delivering_copy = false;  // onData runs on bytes from rx (Transport::deliveringCopy)
  // Frame::meta of the segment that started the latest request (frame_tag.h); 0: none.
  uint64_t tag_meta = 0;
  uint32_t segs_unacked = 0;
  uint64_t last_challenge_at = 0;  // per-connection challenge-ACK limit (RFC 5961 §7)
  // Timers (0 = off); the earliest is in the stack's wheel.
  uint64_t rto_at = 0, delack_at = 0, persist_at = 0, ka_at = 0, close_at = 0;
  uint64_t last_rx = 0;
  // Send timeout (OutputLimits): snd_una must move min_drain_bytes past drain_mark_una within
  // send_timeout_ns of drain_mark_at while data is queued.
  uint64_t drain_mark_at = 0;
  uint32_t drain_mark_una = 0;
  bool out_paused = false;  // delivery paused by the output limits (the session's: `paused`)
  OutputCloseReason close_for = OutputCloseReason::kNone;  // reset at the next flushDirty()
  bool readPaused() const { return paused || out_paused; }
  // Links in the stack's eviction list of this state (TIME_WAIT or SYN_RECEIVED), oldest first.
  uint32_t tw_prev = kNone, tw_next = kNone;
};

struct TcpStack::Conn final : Tcb, net::Transport {
  TcpStack* stack = nullptr;
  uint32_t id = 0;
  ChunkBuffer rx;  // bytes from rx_read on (in order up to rcv_nxt, then out-of-order ranges)
  ChunkBuffer tx;  // bytes from snd_una on
  std::shared_ptr<net::Session> session;

  uint32_t dataEnd() const { return app_close ? fin_seq : snd_una + static_cast<uint32_t>(tx.size()); }
  bool finAcked() const { return app_close && seqGt(snd_una, fin_seq); }
  uint32_t rcvDataEnd() const { return fin_received ? rcv_nxt - 1 : rcv_nxt; }

  // net::Transport (tcp_connection.cc).
  void send(std::string_view bytes) override;
  void closeAfterFlush() override;
  void pauseReading(bool p) override;
  net::Loop& loop() override;
  size_t pendingBytes() const override;
  std::optional<net::IngressTag> ingressTag() override;
  std::optional<common::IpBytes> peerAddress() const override;
  bool deliveringCopy() const override { return delivering_copy; }
  uint64_t tag_rx_ns = 0;  // stack clock when the tagged segment was handled
};

// Inline: called per segment from every part of the stack.
inline void TcpStack::markDirty(Conn& c) {
  if (c.dirty) return;
  c.dirty = true;
  dirty_.push_back(c.id);
}

inline uint32_t TcpStack::tsNow(const Conn& c) const {
  return static_cast<uint32_t>(now_ / kMs) + c.ts_offset;
}

}  // namespace infergate::dataplane::tcp
