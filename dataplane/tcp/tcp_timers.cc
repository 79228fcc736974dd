// Timers: each connection's earliest deadline in the stack's wheel (RTO, delayed ACK, persist,
// keep-alive, FIN_WAIT_2 / TIME_WAIT, send timeout), what each does when it expires, RTO
// expiry (SYN-ACK retransmission, backoff, go-back-N), and the RTO estimate (RFC 6298).

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "dataplane/tcp/tcp_connection.h"

namespace infergate::dataplane::tcp {

void TcpStack::armTimer(Conn& c) {
  if (options_.keepalive_idle_ns != 0 &&
      (c.state == TcpState::kEstablished || c.state == TcpState::kCloseWait)) {
    c.ka_at = c.last_rx + options_.keepalive_idle_ns + c.ka_probes * options_.keepalive_interval_ns;
  } else {
    c.ka_at = 0;
  }
  const uint64_t drain_at = options_.output.send_timeout_ns != 0 && !c.tx.empty()
                                ? c.drain_mark_at + options_.output.send_timeout_ns
                                : 0;
  uint64_t next = 0;
  for (uint64_t t : {c.rto_at, c.delack_at, c.persist_at, c.ka_at, c.close_at, drain_at}) {
    if (t != 0 && (next == 0 || t < next)) next = t;
  }
  wheel_.schedule(c.id, next);
}

void TcpStack::onTimer(Conn& c) {
  if (options_.output.send_timeout_ns != 0 && !c.tx.empty() &&
      now_ - c.drain_mark_at >= options_.output.send_timeout_ns) {
    // A peer that does not read (zero window answered forever) or reads a trickle (a tiny
    // window): its queued bytes must not be held forever.
    ++counters_.send_timeouts;
    resetConn(c, true);
    return;
  }
  if (c.close_at != 0 && now_ >= c.close_at) {
    if (c.state == TcpState::kTimeWait) {
      freeConn(c);
    } else {  // FIN_WAIT_2: the peer never closed; tell it we are gone
      ++counters_.fin_wait2_timeouts;
      resetConn(c, true);
    }
    return;
  }
  if (c.rto_at != 0 && now_ >= c.rto_at) {
    c.rto_at = 0;
    rtoExpired(c);
    if (c.state == TcpState::kClosed) return;
  }
  if (c.persist_at != 0 && now_ >= c.persist_at) {
    if (++c.persist_probes > options_.max_retries * 2) {
      ++counters_.timeouts;
      resetConn(c, true);
      return;
    }
    ++counters_.zero_window_probes;
    sendSegment(c, c.snd_una - 1, 0, kAck);  // an old sequence number: the peer answers with its window
    c.persist_backoff = std::min(c.persist_backoff * 2, options_.max_rto_ns);
    c.persist_at = now_ + c.persist_backoff;
  }
  if (c.delack_at != 0 && now_ >= c.delack_at) {
    c.delack_at = 0;
    c.ack_now = true;
  }
  if (c.ka_at != 0 && now_ >= c.ka_at) {
    if (c.ka_probes >= options_.keepalive_probes) {
      ++counters_.timeouts;
      resetConn(c, true);
      return;
    }
    ++c.ka_probes;
    ++counters_.keepalive_probes;
    sendSegment(c, c.snd_una - 1, 0, kAck);
  }
  output(c);
}

void TcpStack::rtoExpired(Conn& c) {
  ++counters_.rto_expirations;
  if (c.state == TcpState::kSynReceived) {
    if (c.retries >= options_.syn_ack_retries) {
      ++counters_.timeouts;
      freeConn(c);
      return;
    }
    ++c.retries;
    c.rto = std::min(c.rto * 2, options_.max_rto_ns);
    ++counters_.retransmits;
    sendSynAck(c);
    c.rto_at = now_ + c.rto;
    armTimer(c);
    return;
  }
  if (c.snd_una == c.snd_max) return;
  if (++c.retries > options_.max_retries) {
    ++counters_.timeouts;
    resetConn(c, true);
    return;
  }
  // RFC 5681 §3.1 / RFC 6298 §5.5-5.6: collapse the window, back off, go back to snd_una.
  if (c.retries == 1) c.ssthresh = std::max((c.snd_max - c.snd_una) / 2, 2 * c.mss);
  c.cwnd = c.mss;
  c.in_recovery = false;
  c.dupacks = 0;
  c.recover = c.snd_max;
  c.snd_nxt = c.snd_una;
  c.rtt_timing = false;
  c.rto = std::min(c.rto * 2, options_.max_rto_ns);
  c.rto_at = now_ + c.rto;
  // output() (called by onTimer) resends from snd_una: one segment, cwnd = 1 MSS.
}

void TcpStack::rttSample(Conn& c, uint64_t r) {
  if (r < options_.timer_granularity_ns) r = options_.timer_granularity_ns;
  if (!c.have_rtt) {
    c.srtt = r;
    c.rttvar = r / 2;
    c.have_rtt = true;
  } else {
    const uint64_t delta = c.srtt > r ? c.srtt - r : r - c.srtt;
    c.rttvar = (3 * c.rttvar + delta) / 4;
    c.srtt = (7 * c.srtt + r) / 8;
  }
  uint64_t rto = c.srtt + std::max(options_.timer_granularity_ns, 4 * c.rttvar);
  c.rto = std::clamp(rto, options_.min_rto_ns, options_.max_rto_ns);
}

}  // namespace infergate::dataplane::tcp
