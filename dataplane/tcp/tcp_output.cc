// Segments out: the dirty list flushed at the end of each call (delivery resumed, lingering
// close, output), the tx batch, the send window (congestion window, sender SWS avoidance, FIN,
// arming RTO and persist), retransmission of the head, the advertised window, building a
// segment (options, SACK blocks, timestamps) into a device frame, RSTs for segments without a
// connection, and the output limits' read pause.

#include <algorithm>
#include <cstdint>

#include "dataplane/tcp/tcp_connection.h"

namespace infergate::dataplane::tcp {
namespace {

// Payload bytes that fit in one segment now: the MSS less the SACK blocks our ACKs carry
// while out-of-order data is held (timestamps are already out of mss), so no data segment
// with SACK blocks exceeds the MTU.
uint32_t payloadRoom(const Tcb& c) {
  if (!c.sack_ok || c.ooo_n == 0) return c.mss;
  const uint32_t blocks = std::min<uint32_t>(c.ooo_n, c.ts_ok ? 3 : 4);
  const uint32_t opt = 4 + 8 * blocks;
  return c.mss > opt + 8 ? c.mss - opt : 8;
}

}  // namespace

void TcpStack::queueTx(const Frame& f) {
  // Every frame queued here is a segment finished with tx_checksum_.
  tx_batch_.push_back(f);
  tx_batch_.back().meta = tx_meta_;
  if (tx_batch_.size() >= 64) {
    device_.txBurst(tx_batch_.data(), tx_batch_.size());
    tx_batch_.clear();
    tx_unflushed_ = true;
  }
}

void TcpStack::flushTx() {
  if (!tx_batch_.empty()) {
    device_.txBurst(tx_batch_.data(), tx_batch_.size());
    tx_batch_.clear();
    tx_unflushed_ = true;
  }
  if (options_.flush_each_call) kickDevice();
}

void TcpStack::kickDevice() {
  if (!tx_unflushed_) return;
  tx_unflushed_ = false;
  device_.txFlush();
}

void TcpStack::flushDevice() {
  if (!dirty_.empty()) flushDirty();
  if (!tx_batch_.empty()) {
    device_.txBurst(tx_batch_.data(), tx_batch_.size());
    tx_batch_.clear();
    tx_unflushed_ = true;
  }
  kickDevice();
}

void TcpStack::flushDirty() {
  for (size_t i = 0; i < dirty_.size(); ++i) {
    Conn& c = conns_[dirty_[i]];
    if (!c.dirty) continue;
    c.dirty = false;
    if (c.state == TcpState::kClosed) continue;
    if (c.close_for != OutputCloseReason::kNone) {
      if (c.close_for == OutputCloseReason::kConnectionLimit) ++counters_.output_limit_closes;
      else ++counters_.output_process_closes;
      resetConn(c, true);
      continue;
    }
    if (c.deliver_pending) {
      c.deliver_pending = false;
      deliver(c);
    }
    if (c.app_close && c.session) {
      detachSession(c);  // lingering close: what arrives from now on is acknowledged, discarded
      deliver(c);
    }
    output(c);
  }
  dirty_.clear();
  publishOutput();
}

void TcpStack::publishOutput() {
  if (tx_freed_ == 0) return;
  if (options_.output.used != nullptr) options_.output.used->sub(tx_freed_);
  tx_freed_ = 0;
}

// Delivery to the session pauses while the send buffer holds half the per-connection limit,
// or anything while the process is at half its budget; resumes when it drains.
void TcpStack::updateOutputPause(Conn& c) {
  const OutputLimits& lim = options_.output;
  const size_t pending = c.tx.size();
  const bool want = (lim.pauseBytes() != 0 && pending >= lim.pauseBytes()) ||
                    (pending > 0 && lim.globalPause());
  if (want == c.out_paused) return;
  c.out_paused = want;
  if (want) {
    ++counters_.output_read_pauses;
  } else {
    c.deliver_pending = true;
    markDirty(c);
  }
}

uint16_t TcpStack::advertisedWindow(Conn& c) {
  const uint32_t buffered = c.rcvDataEnd() - c.rx_read;
  uint32_t free = options_.rcv_buf > buffered ? options_.rcv_buf - buffered : 0;
  uint32_t win = free >> c.rcv_wscale;
  // Never shrink the right edge already advertised (RFC 9293 §3.8.6).
  const uint32_t adv_edge_wnd = seqGt(c.rcv_adv, c.rcv_nxt) ? c.rcv_adv - c.rcv_nxt : 0;
  if ((static_cast<uint64_t>(win) << c.rcv_wscale) < adv_edge_wnd) {
    win = (adv_edge_wnd + (1u << c.rcv_wscale) - 1) >> c.rcv_wscale;
  }
  return static_cast<uint16_t>(std::min<uint32_t>(win, 65535));
}

bool TcpStack::sendSegment(Conn& c, uint32_t seq, uint32_t len, uint8_t flags) {
  Frame f;
  if (!device_.txAlloc(&f)) {
    counters_.drop(DropReason::kTxNoFrame);
    return false;
  }
  SegmentSpec s;
  s.src_mac = c.local_mac;
  s.dst_mac = c.remote_mac;
  s.key = &c.key;
  s.seq = seq;
  s.flags = flags;
  s.ack = (flags & kAck) ? c.rcv_nxt : 0;
  uint32_t sack[kMaxSackBlocks][2];
  if (flags & kSyn) {
    s.window = static_cast<uint16_t>(std::min<uint32_t>(options_.rcv_buf, 65535));
    s.mss = static_cast<uint16_t>(mtu_ - (c.key.v6 ? 60 : 40));
    if (c.wscale_ok) s.wscale = static_cast<int8_t>(c.rcv_wscale);
    s.sack_permitted = c.sack_ok;
  } else if (flags & kRst) {
    s.window = 0;
  } else {
    s.window = advertisedWindow(c);
    if (c.sack_ok && c.ooo_n > 0) {
      // Most recently changed block first (RFC 2018 §4), then the others in order.
      const int max_blocks = c.ts_ok ? 3 : 4;
      int n = 0;
      sack[n][0] = c.ooo_start[c.ooo_last];
      sack[n][1] = c.ooo_end[c.ooo_last];
      ++n;
      for (uint32_t i = 0; i < c.ooo_n && n < max_blocks; ++i) {
        if (i == c.ooo_last) continue;
        sack[n][0] = c.ooo_start[i];
        sack[n][1] = c.ooo_end[i];
        ++n;
      }
      s.num_sack = static_cast<uint8_t>(n);
      s.sack = sack;
    }
  }
  if (c.ts_ok) {
    s.has_ts = true;
    s.ts_val = tsNow(c);
    s.ts_ecr = c.ts_recent;
  }
  const size_t h = headerLength(s);
  if (h + len > f.capacity) {
    len = 0;  // cannot happen with mss derived from the MTU; never overrun a frame
  }
  writeHeaders(f.data, s, len);
  if (len) c.tx.copyOut(seq - c.snd_una, f.data + h, len);
  finishSegment(f.data, h, len, c.key.v6, tx_checksum_);
  f.len = static_cast<uint32_t>(h + len);
  queueTx(f);
  ++counters_.segments_out;
  counters_.bytes_out += len;
  if (flags & kRst) ++counters_.rst_out;
  if ((flags & kAck) && !(flags & kRst)) {
    c.last_ack_sent = c.rcv_nxt;
    const uint32_t shift = (flags & kSyn) ? 0 : c.rcv_wscale;
    c.rcv_adv = seqMax(c.rcv_adv, c.rcv_nxt + (static_cast<uint32_t>(s.window) << shift));
    c.ack_now = false;
    c.delack_at = 0;
    c.segs_unacked = 0;
  }
  return true;
}

void TcpStack::sendRstFor(const Segment& seg) {
  if (seg.flags & kRst) return;
  Frame f;
  if (!device_.txAlloc(&f)) {
    counters_.drop(DropReason::kTxNoFrame);
    return;
  }
  SegmentSpec s;
  s.src_mac = seg.dst_mac;
  s.dst_mac = seg.src_mac;
  s.key = &seg.key;
  if (seg.flags & kAck) {
    s.seq = seg.ack;
    s.flags = kRst;
  } else {
    s.seq = 0;
    s.ack = seg.seq + seg.payload_len + ((seg.flags & kSyn) ? 1 : 0) + ((seg.flags & kFin) ? 1 : 0);
    s.flags = kRst | kAck;
  }
  f.len = static_cast<uint32_t>(buildSegment(f.data, f.capacity, s, nullptr, 0, tx_checksum_));
  queueTx(f);
  ++counters_.segments_out;
  ++counters_.rst_out;
}

void TcpStack::retransmitHead(Conn& c) {
  const uint32_t data_end = c.dataEnd();
  uint32_t len = seqLt(c.snd_una, data_end) ? std::min(payloadRoom(c), data_end - c.snd_una) : 0;
  const bool fin = c.app_close && c.snd_una + len == c.fin_seq && seqGt(c.snd_max, c.fin_seq);
  if (len == 0 && !fin) return;
  uint8_t flags = kAck;
  if (fin) flags |= kFin;
  if (len && c.snd_una + len == data_end) flags |= kPsh;
  if (sendSegment(c, c.snd_una, len, flags)) ++counters_.retransmits;
  c.rtt_timing = false;  // Karn
}

void TcpStack::output(Conn& c) {
  if (c.state == TcpState::kClosed) return;
  if (c.state == TcpState::kSynReceived) {
    armTimer(c);
    return;
  }
  const bool may_send = !c.finAcked() &&
                        (c.state == TcpState::kEstablished || c.state == TcpState::kCloseWait ||
                         c.state == TcpState::kFinWait1 || c.state == TcpState::kClosing ||
                         c.state == TcpState::kLastAck);
  if (may_send) {
    const uint32_t data_end = c.dataEnd();
    for (;;) {
      const uint32_t in_flight = c.snd_nxt - c.snd_una;
      const uint32_t wnd = std::min(c.cwnd, c.snd_wnd);
      const bool retrans = seqLt(c.snd_nxt, c.snd_max);
      if (seqLt(c.snd_nxt, data_end)) {
        const uint32_t avail = data_end - c.snd_nxt;
        const uint32_t usable = wnd > in_flight ? wnd - in_flight : 0;
        const uint32_t room = payloadRoom(c);
        const uint32_t len = std::min({room, avail, usable});
        if (len == 0) break;
        if (len < room && len < avail && in_flight > 0) break;  // sender SWS avoidance
        const bool fin = c.app_close && c.snd_nxt + len == c.fin_seq;
        uint8_t flags = kAck;
        if (c.snd_nxt + len == data_end) flags |= kPsh;
        if (fin) flags |= kFin;
        if (!sendSegment(c, c.snd_nxt, len, flags)) break;
        if (retrans) {
          ++counters_.retransmits;
        } else if (!c.rtt_timing && !c.ts_ok) {
          c.rtt_timing = true;
          c.rtt_seq = c.snd_nxt + len;
          c.rtt_start = now_;
        }
        c.snd_nxt += len + (fin ? 1 : 0);
        c.snd_max = seqMax(c.snd_max, c.snd_nxt);
        if (fin) {
          if (c.state == TcpState::kEstablished) setState(c, TcpState::kFinWait1);
          else if (c.state == TcpState::kCloseWait) setState(c, TcpState::kLastAck);
        }
        continue;
      }
      if (c.app_close && c.snd_nxt == c.fin_seq) {  // FIN alone (needs no window)
        if (!sendSegment(c, c.snd_nxt, 0, kAck | kFin)) break;
        if (retrans) ++counters_.retransmits;
        c.snd_nxt += 1;
        c.snd_max = seqMax(c.snd_max, c.snd_nxt);
        if (c.state == TcpState::kEstablished) setState(c, TcpState::kFinWait1);
        else if (c.state == TcpState::kCloseWait) setState(c, TcpState::kLastAck);
      }
      break;
    }
    if (c.snd_una != c.snd_max) {
      if (c.rto_at == 0) c.rto_at = now_ + c.rto;
    } else {
      c.rto_at = 0;
    }
    if (c.snd_wnd == 0 && seqLt(c.snd_nxt, data_end) && c.snd_una == c.snd_max) {
      if (c.persist_at == 0) {
        c.persist_backoff = std::max(c.rto, options_.min_rto_ns);
        c.persist_at = now_ + c.persist_backoff;
      }
    } else {
      c.persist_at = 0;
    }
  }
  if (c.ack_now) sendSegment(c, c.snd_nxt, 0, kAck);
  if (c.segs_unacked == 0) c.delack_at = 0;
  armTimer(c);
}

}  // namespace infergate::dataplane::tcp
