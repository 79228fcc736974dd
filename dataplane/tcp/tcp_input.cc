// Segments in: frame parsing and dispatch, the XDP program's reject flag, segments of
// synchronized connections (RFC 5961 RST/SYN/ACK checks with challenge ACKs, PAWS, sequence
// acceptability), ACK processing (send buffer, RTT, NewReno fast retransmit / recovery,
// congestion window, send window), data (in-order fast path, out-of-order ranges, receive
// memory limit, ingress tags), the peer's FIN, and delivery to the session. The handshake
// (LISTEN, SYN_RECEIVED, cookies) is in tcp_handshake.cc.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "dataplane/tcp/frame_tag.h"
#include "dataplane/tcp/tcp_connection.h"

namespace infergate::dataplane::tcp {

void TcpStack::handleFrame(const uint8_t* frame, size_t len) {
  ++counters_.frames_in;
  Segment seg;
  DropReason why = DropReason::kTooShort;
  // A checksum the NIC reported GOOD for this frame is not summed again (packet_io.h); every
  // other is verified here.
  const bool verify = options_.verify_checksums;
  switch (parseFrame(frame, len, verify && !(cur_meta_ & kMetaRxIpChecksumGood),
                     verify && !(cur_meta_ & kMetaRxL4ChecksumGood), seg, why)) {
    case FrameKind::kArp:
      ++counters_.ignored_arp;
      return;
    case FrameKind::kIcmp:
      ++counters_.ignored_icmp;
      return;
    case FrameKind::kOtherIp:
      ++counters_.ignored_other;
      return;
    case FrameKind::kDropped:
      counters_.drop(why);
      return;
    case FrameKind::kTcp:
      break;
  }
  ++counters_.segments_in;
  handleSegment(seg);
}

void TcpStack::handleSegment(const Segment& seg) {
  if ((seg.flags & kSyn) && (seg.flags & (kFin | kRst))) {
    counters_.drop(DropReason::kInvalidFlags);
    return;
  }
  Conn* c = conns_.lookup(seg.key);
  if (metaValid(cur_meta_) && (metaFlags(cur_meta_) & kTagRejected)) {
    // The XDP program judged this segment a bad request start. Its verdict is advice: the
    // connection is reset only when the segment proves it is the connection's first data
    // (exactly at irs + 1, acknowledging what we sent); anything else is an ordinary segment
    // (a spoofed SYN can make the program believe any segment is "first").
    if (c == nullptr) {
      if ((seg.flags & kAck) && !(seg.flags & (kSyn | kRst)) && seg.payload_len > 0) {
        uint16_t li = 0;
        ig_cookie_opts o{};
        if (findListener(seg.key.local_port, &li) && checkCookie(seg, &o)) {
          ++counters_.xdp_rejected;  // first data of a cookie handshake: answer, keep nothing
          sendRstFor(seg);
          return;
        }
      }
      counters_.drop(DropReason::kNoConnection);
      return;
    }
    if (rejectFlagApplies(*c, seg)) {
      ++counters_.xdp_rejected;
      resetConn(*c, true);
      return;
    }
    ++counters_.xdp_reject_ignored;
  }
  if (c == nullptr) {
    handleListen(seg);
    return;
  }
  if (c->state == TcpState::kSynReceived) {
    handleSynReceived(*c, seg);
  } else {
    handleSynchronized(*c, seg);
  }
}

bool TcpStack::rejectFlagApplies(const Conn& c, const Segment& seg) const {
  if (seg.payload_len == 0 || !(seg.flags & kAck) || (seg.flags & (kSyn | kRst))) return false;
  if (c.rcv_nxt != c.irs + 1 || seg.seq != c.rcv_nxt) return false;  // not the first data
  if (c.ts_ok && (!seg.opt.has_ts || seqLt(seg.opt.ts_val, c.ts_recent))) return false;
  if (c.state == TcpState::kSynReceived) return seg.ack == c.iss + 1;
  if (c.state != TcpState::kEstablished) return false;
  return seqGeq(seg.ack, c.snd_una) && seqLeq(seg.ack, c.snd_max);
}

void TcpStack::sendChallengeAck(Conn& c) {
  if (c.last_challenge_at != 0 && now_ - c.last_challenge_at < options_.challenge_ack_interval_ns) {
    return;
  }
  if (now_ - challenge_window_start_ >= 1'000'000'000ull) {
    challenge_window_start_ = now_;
    challenge_count_ = 0;
    // This second's limit: random in [limit/2, limit], so that counting our challenge ACKs
    // tells an off-path attacker nothing (CVE-2016-5696).
    const uint32_t lim = options_.challenge_ack_limit;
    const __u64 ctr = ++misc_counter_;
    const uint64_t r = ig_siphash(&misc_key_, &ctr, 1);
    challenge_limit_now_ = lim / 2 + static_cast<uint32_t>(r % (lim - lim / 2 + 1));
  }
  if (challenge_count_ >= challenge_limit_now_) return;
  ++challenge_count_;
  c.last_challenge_at = now_;
  ++counters_.challenge_acks;
  c.ack_now = true;
  markDirty(c);
}

void TcpStack::handleSynchronized(Conn& c, const Segment& seg) {
  const uint32_t seglen =
      seg.payload_len + ((seg.flags & kSyn) ? 1 : 0) + ((seg.flags & kFin) ? 1 : 0);
  if (c.state == TcpState::kTimeWait && (seg.flags & kSyn) && !(seg.flags & kAck)) {
    // A new incarnation of the flow (RFC 6191): sequence or timestamp moved on.
    if (seqGt(seg.seq, c.rcv_nxt) ||
        (c.ts_ok && seg.opt.has_ts && seqGt(seg.opt.ts_val, c.ts_recent))) {
      ++counters_.time_wait_recycled;
      freeConn(c);
      handleListen(seg);
      return;
    }
  }
  // RFC 7323 §3.2: once negotiated, a non-RST segment without a timestamp is dropped.
  // (A SYN still gets its challenge ACK below.)
  if (c.ts_ok && !seg.opt.has_ts && !(seg.flags & (kRst | kSyn))) {
    counters_.drop(DropReason::kMissingTimestamp);
    return;
  }
  // PAWS (RFC 7323 §5).
  if (c.ts_ok && seg.opt.has_ts && !(seg.flags & kRst) && seqLt(seg.opt.ts_val, c.ts_recent)) {
    counters_.drop(DropReason::kPaws);
    c.ack_now = true;
    markDirty(c);
    return;
  }
  // Sequence acceptability (RFC 9293 §3.10.7.4).
  const uint32_t wnd = seqGt(c.rcv_adv, c.rcv_nxt) ? c.rcv_adv - c.rcv_nxt : 0;
  bool acceptable;
  if (seg.seq == c.rcv_nxt) {
    acceptable = true;
  } else if (seglen == 0) {
    acceptable = wnd > 0 && seqInRange(seg.seq, c.rcv_nxt, wnd);
  } else {
    acceptable = wnd > 0 && (seqInRange(seg.seq, c.rcv_nxt, wnd) ||
                             seqInRange(seg.seq + seglen - 1, c.rcv_nxt, wnd));
  }
  if (!acceptable) {
    if (seglen > 0 && seqLeq(seg.seq + seglen, c.rcv_nxt)) ++counters_.duplicate_segments;
    else counters_.drop(DropReason::kOutOfWindow);
    if (!(seg.flags & kRst)) {
      c.ack_now = true;
      markDirty(c);
    }
    return;
  }
  c.last_rx = now_;
  c.ka_probes = 0;
  // RST (RFC 5961 §3): exact match resets, anything else in the window is challenged.
  if (seg.flags & kRst) {
    if (seg.seq == c.rcv_nxt) {
      ++counters_.rst_in;
      freeConn(c);
    } else {
      sendChallengeAck(c);
    }
    return;
  }
  // SYN in a synchronized state (RFC 5961 §4): challenge ACK, whatever its sequence number.
  if (seg.flags & kSyn) {
    sendChallengeAck(c);
    return;
  }
  if (!(seg.flags & kAck)) {
    counters_.drop(DropReason::kInvalidFlags);
    return;
  }
  // ts_recent and the MACs change only for a segment whose ACK is acceptable too (RFC 7323
  // §4.3; a spoofed frame must not redirect our replies at L2).
  const bool update_ts = c.ts_ok && seg.opt.has_ts && seqLeq(seg.seq, c.last_ack_sent) &&
                         seqGeq(seg.opt.ts_val, c.ts_recent);
  if (!processAck(c, seg)) return;
  if (update_ts) c.ts_recent = seg.opt.ts_val;
  std::memcpy(c.remote_mac, seg.src_mac, 6);  // replies go where the peer is now
  std::memcpy(c.local_mac, seg.dst_mac, 6);
  processData(c, seg);
  markDirty(c);
}

// True when seg's SACK blocks report bytes of ours above c.sack_high (and snd_una) that no
// earlier ACK reported; advances c.sack_high. D-SACK blocks (below snd_una) never count.
bool TcpStack::sacksNewData(Conn& c, const Segment& seg) {
  if (!c.sack_ok) return false;
  bool fresh = false;
  for (uint8_t i = 0; i < seg.opt.num_sack; ++i) {
    const uint32_t end = seg.opt.sack[i][1];
    if (seqGt(end, seqMax(c.sack_high, c.snd_una)) && seqLeq(end, c.snd_max) &&
        seqLt(seg.opt.sack[i][0], end)) {
      c.sack_high = end;
      fresh = true;
    }
  }
  return fresh;
}

bool TcpStack::processAck(Conn& c, const Segment& seg) {
  const uint32_t ack = seg.ack;
  if (seqGt(ack, c.snd_max)) {  // acknowledges what we never sent
    counters_.drop(DropReason::kBadAck);
    c.ack_now = true;
    markDirty(c);
    return false;
  }
  if (seqLt(ack, c.snd_una - std::max<uint32_t>(c.max_snd_wnd, 1))) {  // RFC 5961 §5.2
    counters_.drop(DropReason::kBadAck);
    sendChallengeAck(c);
    return false;
  }
  const uint32_t seg_wnd = static_cast<uint32_t>(seg.window) << c.snd_wscale;
  if (seqGt(ack, c.snd_una)) {
    const uint32_t acked = ack - c.snd_una;
    uint32_t data_acked = acked;
    if (c.app_close && seqGt(ack, c.fin_seq)) --data_acked;  // our FIN
    const size_t freed = std::min<size_t>(data_acked, c.tx.size());
    c.tx.consume(pool_, freed);
    c.tx.releaseIfEmpty(pool_);
    tx_freed_ += static_cast<int64_t>(freed);
    if (c.ts_ok && seg.opt.has_ts && seg.opt.ts_ecr != 0) {
      rttSample(c, static_cast<uint64_t>(tsNow(c) - seg.opt.ts_ecr) * kMs);
    } else if (c.rtt_timing && seqGeq(ack, c.rtt_seq)) {
      rttSample(c, now_ - c.rtt_start);
      c.rtt_timing = false;
    }
    c.snd_una = ack;
    if (seqLt(c.snd_nxt, c.snd_una)) c.snd_nxt = c.snd_una;
    if (seqLt(c.sack_high, c.snd_una)) c.sack_high = c.snd_una;  // never stale by 2^31
    c.retries = 0;
    c.persist_probes = 0;
    if (c.snd_una - c.drain_mark_una >= options_.output.min_drain_bytes || c.tx.empty()) {
      c.drain_mark_at = now_;  // enough progress: a new send-timeout period
      c.drain_mark_una = c.snd_una;
    }
    if (c.out_paused) updateOutputPause(c);
    if (c.in_recovery) {
      if (seqGeq(ack, c.recover)) {  // full ACK: leave fast recovery (RFC 6582 §3.2 step 3)
        const uint32_t flight = c.snd_max - c.snd_una;
        c.cwnd = std::min(c.ssthresh, std::max(flight, c.mss) + c.mss);
        c.in_recovery = false;
        c.dupacks = 0;
      } else {  // partial ACK: the next hole is lost too
        retransmitHead(c);
        c.cwnd = c.cwnd > acked ? c.cwnd - acked : 0;
        if (acked >= c.mss) c.cwnd += c.mss;
        if (c.cwnd < c.mss) c.cwnd = c.mss;
        c.rto_at = now_ + c.rto;
      }
    } else {
      c.dupacks = 0;
      if (c.cwnd < c.ssthresh) {
        c.cwnd += std::min(acked, c.mss);  // slow start (RFC 5681, ABC L=1)
      } else {
        c.cwnd += std::max<uint32_t>(1, static_cast<uint32_t>(
                                            static_cast<uint64_t>(c.mss) * c.mss / c.cwnd));
      }
    }
    if (!c.in_recovery) c.rto_at = c.snd_una == c.snd_max ? 0 : now_ + c.rto;
    if (c.finAcked()) {
      switch (c.state) {
        case TcpState::kFinWait1:
          setState(c, TcpState::kFinWait2);
          c.close_at = now_ + options_.fin_wait2_ns;
          break;
        case TcpState::kClosing:
          enterTimeWait(c);
          break;
        case TcpState::kLastAck:
          freeConn(c);
          return false;
        default:
          break;
      }
    }
  } else if (ack == c.snd_una && seg.payload_len == 0 && !(seg.flags & (kSyn | kFin)) &&
             c.snd_max != c.snd_una && (sacksNewData(c, seg) || seg_wnd == c.snd_wnd)) {
    // A duplicate ACK: RFC 5681's (same window), or one whose SACK blocks report data above
    // the hole not reported before (RFC 6675 §2), whatever its window. Linux receivers grow
    // their window while out-of-order data arrives, so with the window rule alone their
    // duplicate ACKs never counted and every loss waited for the RTO and went back N.
    ++c.dupacks;
    if (c.dupacks == 3 && !c.in_recovery && seqGt(ack, c.recover)) {
      // Fast retransmit + fast recovery (RFC 6582).
      const uint32_t flight = c.snd_max - c.snd_una;
      c.ssthresh = std::max(flight / 2, 2 * c.mss);
      c.recover = c.snd_max;
      ++counters_.fast_retransmits;
      retransmitHead(c);
      c.cwnd = c.ssthresh + 3 * c.mss;
      c.in_recovery = true;
    } else if (c.in_recovery) {
      c.cwnd += c.mss;  // window inflation: one segment left the network
    }
  }
  if (seqLt(c.snd_wl1, seg.seq) || (c.snd_wl1 == seg.seq && seqLeq(c.snd_wl2, ack))) {
    c.snd_wnd = seg_wnd;
    c.snd_wl1 = seg.seq;
    c.snd_wl2 = ack;
    c.max_snd_wnd = std::max(c.max_snd_wnd, c.snd_wnd);
    if (c.snd_wnd > 0) {
      c.persist_at = 0;
      c.persist_probes = 0;
    }
  }
  return true;
}

void TcpStack::processData(Conn& c, const Segment& seg) {
  bool fin = seg.flags & kFin;
  const uint32_t fin_pos = seg.seq + seg.payload_len;
  if (c.state != TcpState::kEstablished && c.state != TcpState::kFinWait1 &&
      c.state != TcpState::kFinWait2) {
    // The peer already sent its FIN: anything more is a retransmission; acknowledge it.
    if (seg.payload_len > 0 || fin) {
      c.ack_now = true;
      if (c.state == TcpState::kTimeWait) c.close_at = now_ + options_.time_wait_ns;
    }
    return;
  }
  uint32_t seq = seg.seq;
  const uint8_t* data = seg.payload;
  uint32_t len = seg.payload_len;
  if (len > 0 && metaValid(cur_meta_) && (metaFlags(cur_meta_) & kTagRequestStart) &&
      seqGt(seq + len, c.rcv_nxt)) {
    // The segment that starts a request (as the XDP program judged it): its tag is what
    // ingressTag() answers while the session parses that request. A retransmission of bytes
    // already delivered does not count.
    c.tag_meta = cur_meta_;
    c.tag_rx_ns = now_;
  }
  if (len > 0 && seqLt(seq, c.rcv_nxt)) {
    const uint32_t d = c.rcv_nxt - seq;
    if (d >= len) {
      ++counters_.duplicate_segments;
      len = 0;
      seq = c.rcv_nxt;
      c.ack_now = true;
    } else {
      ++counters_.partial_duplicates;
      data += d;
      len -= d;
      seq = c.rcv_nxt;
    }
  }
  // What we advertised, and never more than the connection's memory: rcv_buf from rx_read
  // plus the window-scale rounding, whatever rcv_adv says.
  uint32_t wnd_end = seqMax(c.rcv_adv, c.rx_read + options_.rcv_buf);
  const uint32_t hard_end = c.rx_read + options_.rcv_buf + ((1u << c.rcv_wscale) - 1);
  if (seqGt(wnd_end, hard_end)) wnd_end = hard_end;
  if (len > 0 && seqGt(seq + len, wnd_end)) {
    counters_.drop(DropReason::kBeyondWindow);
    len = seqGt(wnd_end, seq) ? wnd_end - seq : 0;
    fin = false;
    c.ack_now = true;
  }
  if (len > 0) {
    if (seq == c.rcv_nxt) {
      const bool had_ooo = c.ooo_n > 0;
      counters_.bytes_in += len;
      if (!had_ooo && c.rx_read == c.rcv_nxt && c.app_close) {
        c.rcv_nxt += len;  // lingering close: acknowledged and discarded
        c.rx_read = c.rcv_nxt;
      } else if (!had_ooo && c.rx_read == c.rcv_nxt && c.session && !c.readPaused()) {
        // Fast path: straight from the frame to the session, no copy in the stack.
        c.rcv_nxt += len;
        c.rx_read = c.rcv_nxt;
        std::shared_ptr<net::Session> sp = c.session;
        sp->onData(reinterpret_cast<const char*>(data), len);
        if (c.state == TcpState::kClosed) return;
      } else if (!c.ooo_copied) {
        // Nothing out of order was copied: the bytes up to the new rcv_nxt are this segment's,
        // then the held frames', delivered from the frames (or copied if the session is not
        // reading).
        c.rcv_nxt += len;
        while (c.ooo_n > 0 && seqLeq(c.ooo_start[0], c.rcv_nxt)) {
          if (seqGt(c.ooo_end[0], c.rcv_nxt)) {
            counters_.bytes_in += c.ooo_end[0] - c.rcv_nxt;
            c.rcv_nxt = c.ooo_end[0];
          }
          popOooRange(c);
        }
        if (had_ooo) c.ack_now = true;  // a hole filled: ACK at once (RFC 5681 §4.2)
        fillFromHeld(c, data, len);
        if (c.state == TcpState::kClosed) return;
        deliver(c);
        if (c.state == TcpState::kClosed) return;
      } else {
        // Out-of-order bytes were copied into rx: reassemble there, as they are.
        c.rx.writeAt(pool_, c.rcv_nxt - c.rx_read, reinterpret_cast<const char*>(data), len);
        counters_.rx_copied_ooo_bytes += len;
        c.rx.extend(len);
        c.rcv_nxt += len;
        while (c.ooo_n > 0 && seqLeq(c.ooo_start[0], c.rcv_nxt)) {
          if (seqGt(c.ooo_end[0], c.rcv_nxt)) {
            const uint32_t more = c.ooo_end[0] - c.rcv_nxt;
            c.rx.extend(more);
            counters_.bytes_in += more;
            c.rcv_nxt = c.ooo_end[0];
          }
          popOooRange(c);
        }
        if (c.ooo_n == 0) c.ooo_copied = false;
        c.ack_now = true;  // a hole filled: ACK at once (RFC 5681 §4.2)
        deliver(c);
        if (c.state == TcpState::kClosed) return;
      }
      if (++c.segs_unacked >= 2) c.ack_now = true;
    } else {
      // Out of order: merge into the range table, keep the bytes, ACK at once (dup ACK+SACK).
      const uint32_t end = seq + len;
      uint32_t i = 0;
      while (i < c.ooo_n && seqLt(c.ooo_end[i], seq)) ++i;
      uint32_t j = i;
      uint32_t ns = seq, ne = end;
      while (j < c.ooo_n && seqLeq(c.ooo_start[j], end)) {
        ns = seqMin(ns, c.ooo_start[j]);
        ne = seqMax(ne, c.ooo_end[j]);
        ++j;
      }
      const uint32_t merged = j - i;
      if (merged == 0 && c.ooo_n >= options_.max_ooo_ranges) {
        counters_.drop(DropReason::kOooLimit);
      } else {
        if (merged == 1 && ns == c.ooo_start[i] && ne == c.ooo_end[i]) {
          ++counters_.duplicate_segments;
        } else {
          ++counters_.out_of_order;
        }
        const bool contained =
            merged == 1 && seqGeq(seq, c.ooo_start[i]) && seqLeq(end, c.ooo_end[i]);
        if (!c.ooo_copied && contained) {
          // Every byte is already held in an earlier frame: nothing to keep.
        } else if (c.ooo_copied || !holdSegment(c, seq, data, len)) {
          if (!c.ooo_copied) {
            // No frame can be held: from now until the ranges drain, this connection's
            // out-of-order bytes are copied into rx (the held ones first).
            unholdAll(c);
            c.ooo_copied = true;
          }
          if (cur_frame_ >= 0 && held_budget_ > 0) ++counters_.ooo_hold_fallbacks;
          c.rx.writeAt(pool_, seq - c.rx_read, reinterpret_cast<const char*>(data), len);
          counters_.rx_copied_ooo_bytes += len;
        }
        if (merged == 0) {
          for (uint32_t k = c.ooo_n; k > i; --k) {
            c.ooo_start[k] = c.ooo_start[k - 1];
            c.ooo_end[k] = c.ooo_end[k - 1];
          }
          ++c.ooo_n;
        } else if (merged > 1) {
          const uint32_t remove = merged - 1;
          for (uint32_t k = i + 1; k + remove < c.ooo_n; ++k) {
            c.ooo_start[k] = c.ooo_start[k + remove];
            c.ooo_end[k] = c.ooo_end[k + remove];
          }
          c.ooo_n = static_cast<uint8_t>(c.ooo_n - remove);
        }
        c.ooo_start[i] = ns;
        c.ooo_end[i] = ne;
        c.ooo_last = static_cast<uint8_t>(i);
        if (fin && seqGeq(fin_pos, ne)) {
          c.peer_fin_pending = true;
          c.peer_fin_seq = fin_pos;
        }
      }
      fin = false;
      c.ack_now = true;
    }
  }
  if (c.peer_fin_pending && c.rcv_nxt == c.peer_fin_seq && !c.fin_received) {
    fin = true;
  } else if (fin && fin_pos != c.rcv_nxt) {
    if (seqGt(fin_pos, c.rcv_nxt)) {
      c.peer_fin_pending = true;
      c.peer_fin_seq = fin_pos;
    }
    fin = false;
  }
  if (fin && !c.fin_received) processPeerFin(c);
  if (!c.ack_now && c.segs_unacked > 0 && c.delack_at == 0) {
    c.delack_at = now_ + options_.delayed_ack_ns;
  }
}

// ---------------------------------------------------------------------------------------
// Out-of-order segments held in their frames (docs/TCP.md "Out-of-order data in its frames")

void TcpStack::popOooRange(Conn& c) {
  --c.ooo_n;
  for (uint32_t i = 0; i < c.ooo_n; ++i) {
    c.ooo_start[i] = c.ooo_start[i + 1];
    c.ooo_end[i] = c.ooo_end[i + 1];
  }
  c.ooo_last = 0;
}

void TcpStack::releaseFrame(const Frame& f) { device_.rxRelease(&f, 1); }

// Keeps the frame being handled (bytes [seq, seq + len) at `data`) on the connection's held
// list, sorted by sequence number; false when no frame may be held (not in a device burst, the
// stack's or the connection's bound reached).
bool TcpStack::holdSegment(Conn& c, uint32_t seq, const uint8_t* data, uint32_t len) {
  if (cur_frame_ < 0 || held_free_.empty() ||
      c.held_n >= options_.max_held_frames_per_connection) {
    return false;
  }
  const uint32_t slot = held_free_.back();
  held_free_.pop_back();
  Held& h = held_[slot];
  h.frame = rx_batch_[static_cast<size_t>(cur_frame_)];
  h.data = data;
  h.seq = seq;
  h.len = len;
  h.next = kNone;
  if (c.held_tail == kNone) {
    c.held_head = c.held_tail = slot;
  } else if (seqGeq(seq, held_[c.held_tail].seq)) {
    held_[c.held_tail].next = slot;
    c.held_tail = slot;
  } else if (seqLt(seq, held_[c.held_head].seq)) {
    h.next = c.held_head;
    c.held_head = slot;
  } else {
    uint32_t prev = c.held_head;
    while (held_[prev].next != kNone && seqLeq(held_[held_[prev].next].seq, seq)) {
      prev = held_[prev].next;
    }
    h.next = held_[prev].next;
    held_[prev].next = slot;
  }
  ++c.held_n;
  ++held_used_;
  rx_keep_[static_cast<size_t>(cur_frame_)] = 1;
  ++held_in_burst_;
  ++counters_.ooo_frames_held;
  ++counters_.ooo_frames_held_total;
  return true;
}

// Unlinks the connection's first held frame: its slot goes back to the pool; the frame is the
// caller's to release.
TcpStack::Held TcpStack::popHeld(Conn& c) {
  const uint32_t slot = c.held_head;
  Held h = held_[slot];
  c.held_head = h.next;
  if (c.held_head == kNone) c.held_tail = kNone;
  --c.held_n;
  --held_used_;
  --counters_.ooo_frames_held;
  held_free_.push_back(slot);
  return h;
}

void TcpStack::unholdAll(Conn& c) {
  while (c.held_head != kNone) {
    const Held h = popHeld(c);
    c.rx.writeAt(pool_, h.seq - c.rx_read, reinterpret_cast<const char*>(h.data), h.len);
    counters_.rx_copied_ooo_bytes += h.len;
    releaseFrame(h.frame);
  }
}

void TcpStack::releaseHeld(Conn& c) {
  while (c.held_head != kNone) releaseFrame(popHeld(c).frame);
}

// The next in-order bytes (at rx_read + rx.size()): to the session from where they are when
// nothing is buffered and it reads, else copied into rx (counted: paused).
void TcpStack::pushInOrder(Conn& c, const uint8_t* p, uint32_t n, bool held) {
  if (n == 0) return;
  if (c.rx.empty()) {
    if (c.app_close || !c.session) {  // nobody reads any more: discard
      c.rx_read += n;
      return;
    }
    if (!c.readPaused()) {
      c.rx_read += n;
      if (held) counters_.ooo_held_bytes_delivered += n;
      std::shared_ptr<net::Session> sp = c.session;
      sp->onData(reinterpret_cast<const char*>(p), n);
      return;
    }
  }
  c.rx.writeAt(pool_, c.rx.size(), reinterpret_cast<const char*>(p), n);
  c.rx.extend(n);
  counters_.rx_copied_paused_bytes += n;
}

// rcv_nxt has moved past this in-order segment and the ranges it joined: its bytes, then the
// held frames below rcv_nxt in order (overlaps and duplicates trimmed), each released once
// its bytes are delivered or copied.
void TcpStack::fillFromHeld(Conn& c, const uint8_t* data, uint32_t len) {
  pushInOrder(c, data, len, false);
  while (c.state != TcpState::kClosed && c.held_head != kNone &&
         seqLt(held_[c.held_head].seq, c.rcv_nxt)) {
    const Held h = popHeld(c);  // unlinked first: a free during onData cannot release it again
    const uint32_t cur = c.rx_read + static_cast<uint32_t>(c.rx.size());
    const uint32_t end = h.seq + h.len;
    if (seqGt(end, cur)) {
      const uint32_t skip = seqGt(cur, h.seq) ? cur - h.seq : 0;
      pushInOrder(c, h.data + skip, end - cur, true);
    }
    releaseFrame(h.frame);
  }
}

void TcpStack::processPeerFin(Conn& c) {
  c.rcv_nxt += 1;
  c.fin_received = true;
  c.peer_fin_pending = false;
  c.ack_now = true;
  switch (c.state) {
    case TcpState::kEstablished:
      setState(c, TcpState::kCloseWait);
      break;
    case TcpState::kFinWait1:
      setState(c, TcpState::kClosing);  // our FIN not yet acknowledged (else we'd be in FW2)
      break;
    case TcpState::kFinWait2:
      enterTimeWait(c);
      break;
    default:
      break;
  }
  deliver(c);
}

// Both FINs acknowledged (CLOSING) or the peer's FIN after ours was (FIN_WAIT_2): only the
// TIME_WAIT deadline remains.
void TcpStack::enterTimeWait(Conn& c) {
  setState(c, TcpState::kTimeWait);
  c.close_at = now_ + options_.time_wait_ns;
  c.rto_at = c.persist_at = c.ka_at = 0;
}

void TcpStack::deliver(Conn& c) {
  const uint32_t wnd_before = seqGt(c.rcv_adv, c.rcv_nxt) ? c.rcv_adv - c.rcv_nxt : 0;
  bool consumed = false;
  while (c.state != TcpState::kClosed) {
    const uint32_t avail = c.rcvDataEnd() - c.rx_read;
    if (avail == 0) break;
    if (c.app_close || !c.session) {  // nobody reads any more: discard
      c.rx.consume(pool_, avail);
      c.rx_read += avail;
      consumed = true;
      break;
    }
    if (c.readPaused()) break;
    size_t n = 0;
    const char* p = c.rx.front(&n);
    if (n > avail) n = avail;
    std::shared_ptr<net::Session> sp = c.session;
    c.delivering_copy = true;  // bytes the stack copied (Transport::deliveringCopy)
    sp->onData(p, n);  // the chunk stays ours until consume(): sessions never touch rx
    c.delivering_copy = false;
    c.rx.consume(pool_, n);
    c.rx_read += static_cast<uint32_t>(n);
    consumed = true;
  }
  if (c.state == TcpState::kClosed) return;
  if (c.ooo_n == 0) c.rx.releaseIfEmpty(pool_);
  if (c.fin_received && !c.peer_close_notified && c.rx_read == c.rcvDataEnd() && c.session &&
      !c.app_close) {
    c.peer_close_notified = true;
    std::shared_ptr<net::Session> sp = c.session;
    sp->onPeerClosed();
  }
  if (consumed && !c.fin_received) {
    // Window update when reading opened the window by a useful amount.
    const uint32_t buffered = c.rcvDataEnd() - c.rx_read;
    const uint32_t free = options_.rcv_buf > buffered ? options_.rcv_buf - buffered : 0;
    if (free > wnd_before && free - wnd_before >= std::min(options_.rcv_buf / 2, 2 * c.mss)) {
      c.ack_now = true;
    }
    markDirty(c);
  }
}

}  // namespace infergate::dataplane::tcp
