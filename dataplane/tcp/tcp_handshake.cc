// Passive open: SYNs for no connection (listeners, the SYN backlog, cookie SYN-ACKs, the
// connection cap), ISNs (every one a SYN cookie, dataplane/tcp/syncookie.h), the new
// connection's options, ACKs completing a cookie handshake, and SYN_RECEIVED until the
// handshake completes and the listener's factory makes the session.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

#include "dataplane/tcp/syncookie.h"
#include "dataplane/tcp/tcp_connection.h"

namespace infergate::dataplane::tcp {
namespace {

// The 4-tuple as the XDP program sees it (struct ig_flow_key order: s = client, network byte
// order), for the cookie function both sides share.
struct CookieTuple {
  uint32_t saddr[4] = {};
  uint32_t daddr[4] = {};
  uint16_t sport = 0, dport = 0;
  int v6 = 0;
  explicit CookieTuple(const FlowKey& k) {
    std::memcpy(saddr, k.remote_ip, k.v6 ? 16 : 4);
    std::memcpy(daddr, k.local_ip, k.v6 ? 16 : 4);
    sport = __builtin_bswap16(k.remote_port);
    dport = __builtin_bswap16(k.local_port);
    v6 = k.v6 ? 1 : 0;
  }
};

uint64_t keyedHash(const ig_sipkey& key, const FlowKey& k, uint64_t extra) {
  static_assert(sizeof(FlowKey) == 40, "FlowKey is five words");
  __u64 w[6];
  std::memcpy(w, &k, sizeof(FlowKey));
  w[5] = extra;
  return ig_siphash(&key, w, 6);
}

}  // namespace

const TcpStack::Listener* TcpStack::findListener(uint16_t port, uint16_t* index) const {
  for (uint16_t i = 0; i < listeners_.size(); ++i) {
    if (listeners_[i].port == port) {
      *index = i;
      return &listeners_[i];
    }
  }
  return nullptr;
}

// Every ISN is a SYN cookie (dataplane/tcp/syncookie.h): a keyed SipHash of the 4-tuple and
// the client's ISN under a key from getrandom that rotates, so it is unpredictable (RFC 6528's
// aim) and an ACK can prove a handshake the stack keeps no state for.
uint32_t TcpStack::makeIsn(const Segment& syn) {
  if (options_.isn_fn) return options_.isn_fn(syn.key);
  const ig_cookie_keys keys = cookies_->snapshot();
  const CookieTuple t(syn.key);
  const uint32_t opts = ig_cookie_encode_opts(
      syn.opt.has_mss ? syn.opt.mss : (syn.key.v6 ? 1220 : 536),
      options_.window_scaling ? syn.opt.wscale : -1, options_.sack && syn.opt.sack_permitted,
      options_.timestamps && syn.opt.has_ts);
  return ig_cookie_make(&keys, t.saddr, t.daddr, t.sport, t.dport, t.v6, syn.seq, opts);
}

void TcpStack::handleListen(const Segment& seg) {
  if (seg.flags & kRst) {
    counters_.drop(DropReason::kNoConnection);
    return;
  }
  uint16_t li = 0;
  const Listener* l = findListener(seg.key.local_port, &li);
  if ((seg.flags & kAck) || !(seg.flags & kSyn)) {
    if (l != nullptr && (seg.flags & kAck) && !(seg.flags & kSyn)) {
      if (acceptCookie(seg, li)) return;
      ++counters_.cookies_rejected;
      counters_.drop(DropReason::kBadCookie);
      sendRstFor(seg);
      return;
    }
    counters_.drop(DropReason::kNoConnection);
    if (seg.flags & kAck || seg.flags & kFin || seg.payload_len) sendRstFor(seg);
    return;
  }
  if (l == nullptr) {
    counters_.drop(DropReason::kNoListener);
    sendRstFor(seg);
    return;
  }
  ++counters_.syn_received;
  const bool backlog_full = syn_received_ >= options_.syn_backlog;
  if (backlog_full) ++counters_.syn_backlog_full;
  if (options_.syn_cookies == SynCookies::kAlways ||
      (backlog_full && options_.syn_cookies == SynCookies::kOnOverflow)) {
    sendCookieSynAck(seg);  // no state: the ACK that comes back creates the connection
    return;
  }
  if (backlog_full) {
    counters_.drop(DropReason::kSynQueueFull);  // the client retries
    return;
  }
  Conn* cp = allocOrRefuse(seg);
  if (cp == nullptr) return;
  Conn& c = *cp;
  initConn(c, seg, li, seg.seq, makeIsn(seg), seg.opt.has_mss ? seg.opt.mss : 0,
           seg.opt.wscale, seg.opt.sack_permitted, seg.opt.has_ts, seg.opt.ts_val);
  if (c.ts_ok) c.ts_offset = static_cast<uint32_t>(keyedHash(misc_key_, c.key, c.iss));
  c.snd_wnd = seg.window;  // never scaled in a SYN
  c.max_snd_wnd = c.snd_wnd;
  c.snd_wl1 = seg.seq;
  c.snd_wl2 = c.iss;
  conns_.insert(c);
  setState(c, TcpState::kSynReceived);
  sendSynAck(c);
  c.synack_sent_at = now_;
  c.rto_at = now_ + c.rto;
  armTimer(c);
}

void TcpStack::initConn(Conn& c, const Segment& seg, uint16_t listener, uint32_t client_isn,
                        uint32_t iss, uint32_t peer_mss_opt, int peer_wscale, bool sack, bool ts,
                        uint32_t ts_val) {
  c.key = seg.key;
  std::memcpy(c.remote_mac, seg.src_mac, 6);
  std::memcpy(c.local_mac, seg.dst_mac, 6);
  c.listener = listener;
  c.irs = client_isn;
  c.rcv_nxt = client_isn + 1;
  c.rx_read = c.rcv_nxt;
  c.rcv_adv = c.rcv_nxt;  // nothing advertised yet (seqMax against it must not stick at 0)
  c.iss = iss;
  c.snd_una = iss;
  c.sack_high = iss;
  c.snd_nxt = iss + 1;
  c.snd_max = iss + 1;
  c.recover = iss;
  // Options (RFC 7323, 2018, 879/6691).
  const bool v6 = seg.key.v6;
  const uint32_t our_mss = mtu_ - (v6 ? 60 : 40);
  uint32_t peer_mss = peer_mss_opt ? peer_mss_opt : (v6 ? 1220 : 536);
  if (peer_mss < 88) peer_mss = 88;  // tiny-MSS resource attacks
  c.mss = std::min(our_mss, peer_mss);
  c.wscale_ok = options_.window_scaling && peer_wscale >= 0;
  if (c.wscale_ok) {
    c.snd_wscale = static_cast<uint8_t>(std::min(peer_wscale, 14));
    c.rcv_wscale = windowShiftFor(options_.rcv_buf);
  }
  c.sack_ok = options_.sack && sack;
  c.ts_ok = options_.timestamps && ts;
  if (c.ts_ok) {
    c.ts_recent = ts_val;
    c.mss -= 12;
  }
  c.cwnd = options_.initial_cwnd_segments * c.mss;
  c.rto = options_.initial_rto_ns;
  c.last_rx = now_;
}

void TcpStack::sendCookieSynAck(const Segment& syn) {
  Frame f;
  if (!device_.txAlloc(&f)) {
    counters_.drop(DropReason::kTxNoFrame);
    return;
  }
  const uint32_t iss = makeIsn(syn);
  SegmentSpec s;
  s.src_mac = syn.dst_mac;
  s.dst_mac = syn.src_mac;
  s.key = &syn.key;
  s.seq = iss;
  s.ack = syn.seq + 1;
  s.flags = kSyn | kAck;
  s.window = static_cast<uint16_t>(std::min<uint32_t>(options_.rcv_buf, 65535));
  s.mss = static_cast<uint16_t>(mtu_ - (syn.key.v6 ? 60 : 40));
  if (options_.window_scaling && syn.opt.wscale >= 0) {
    s.wscale = static_cast<int8_t>(windowShiftFor(options_.rcv_buf));
  }
  s.sack_permitted = options_.sack && syn.opt.sack_permitted;
  if (options_.timestamps && syn.opt.has_ts) {
    // A millisecond clock with a per-flow offset; the connection continues from the value
    // the client echoes (acceptCookie).
    s.has_ts = true;
    s.ts_val = static_cast<uint32_t>(now_ / kMs) +
               static_cast<uint32_t>(keyedHash(misc_key_, syn.key, iss));
    s.ts_ecr = syn.opt.ts_val;
  }
  f.len = static_cast<uint32_t>(buildSegment(f.data, f.capacity, s, nullptr, 0, tx_checksum_));
  queueTx(f);
  ++counters_.segments_out;
  ++counters_.cookies_sent;
}

// A free slot for a connection `seg` starts (evicting TIME_WAIT, then half-open state), or
// nullptr after refusing it with a RST (`refused`, `conn_limit`).
TcpStack::Conn* TcpStack::allocOrRefuse(const Segment& seg) {
  Conn* cp = allocConn();
  if (cp == nullptr) cp = evictTimeWait();
  if (cp == nullptr) {
    ++counters_.refused;
    counters_.drop(DropReason::kConnLimit);
    sendRstFor(seg);
  }
  return cp;
}

// Whether seg's ack - 1 is one of our cookies for its seq - 1 (the client's ISN).
bool TcpStack::checkCookie(const Segment& seg, ig_cookie_opts* out) const {
  const ig_cookie_keys keys = cookies_->snapshot();
  const CookieTuple t(seg.key);
  return ig_cookie_check(&keys, t.saddr, t.daddr, t.sport, t.dport, t.v6, seg.seq - 1,
                         seg.ack - 1, out) != 0;
}

// An ACK (perhaps with data) for no connection: if it completes a cookie handshake, the
// connection is created straight into ESTABLISHED from what the cookie encodes.
bool TcpStack::acceptCookie(const Segment& seg, uint16_t listener) {
  if (options_.isn_fn) return false;  // tests that fix ISNs make no cookies
  ig_cookie_opts o{};
  if (!checkCookie(seg, &o)) return false;
  if (o.ts && !seg.opt.has_ts) return false;  // RFC 7323 §3.2: timestamps were negotiated
  Conn* cp = allocOrRefuse(seg);
  if (cp == nullptr) return true;
  Conn& c = *cp;
  initConn(c, seg, listener, seg.seq - 1, seg.ack - 1, o.mss, o.wscale, o.sack, o.ts,
           o.ts ? seg.opt.ts_val : 0);
  if (c.ts_ok) c.ts_offset = seg.opt.ts_ecr - static_cast<uint32_t>(now_ / kMs);
  c.snd_una = c.iss + 1;
  c.sack_high = c.snd_una;
  c.rcv_adv = c.rcv_nxt + std::min<uint32_t>(options_.rcv_buf, 65535);  // the SYN-ACK's window
  c.last_ack_sent = c.rcv_nxt;
  c.snd_wnd = static_cast<uint32_t>(seg.window) << c.snd_wscale;
  c.max_snd_wnd = c.snd_wnd;
  c.snd_wl1 = seg.seq;
  c.snd_wl2 = seg.ack;
  conns_.insert(c);
  setState(c, TcpState::kEstablished);
  ++counters_.accepted;
  ++counters_.cookies_validated;
  std::shared_ptr<net::Session> session = listeners_[c.listener].factory(c);
  if (!session) {
    resetConn(c, true);
    return true;
  }
  c.session = std::move(session);
  handleSynchronized(c, seg);  // data riding on the completing segment
  if (c.state != TcpState::kClosed) markDirty(c);
  return true;
}

void TcpStack::sendSynAck(Conn& c) { sendSegment(c, c.iss, 0, kSyn | kAck); }

void TcpStack::handleSynReceived(Conn& c, const Segment& seg) {
  if (seg.flags & kRst) {
    if (seg.seq == c.rcv_nxt) {
      ++counters_.rst_in;
      freeConn(c);
    } else if (seqInRange(seg.seq, c.rcv_nxt, std::max<uint32_t>(c.rcv_adv - c.rcv_nxt, 1))) {
      sendChallengeAck(c);
    } else {
      counters_.drop(DropReason::kOutOfWindow);
    }
    return;
  }
  if (seg.flags & kSyn) {
    if (seg.seq == c.irs && !(seg.flags & kAck)) {  // the client did not get our SYN-ACK
      ++counters_.retransmits;
      sendSynAck(c);
    } else {
      counters_.drop(DropReason::kInvalidFlags);
    }
    return;
  }
  if (!(seg.flags & kAck)) {
    counters_.drop(DropReason::kInvalidFlags);
    return;
  }
  if (seg.ack != c.iss + 1) {
    counters_.drop(DropReason::kBadAck);
    sendRstFor(seg);
    return;
  }
  if (c.ts_ok && !seg.opt.has_ts) {
    counters_.drop(DropReason::kMissingTimestamp);
    return;
  }
  if (c.ts_ok && seg.opt.has_ts && seqLt(seg.opt.ts_val, c.ts_recent)) {
    counters_.drop(DropReason::kPaws);
    return;
  }
  const uint32_t seglen = seg.payload_len + ((seg.flags & kFin) ? 1 : 0);
  const uint32_t wnd = seqGt(c.rcv_adv, c.rcv_nxt) ? c.rcv_adv - c.rcv_nxt : 0;
  if (seg.seq != c.rcv_nxt &&
      !(seglen > 0 && wnd > 0 && seqInRange(seg.seq, c.rcv_nxt, wnd))) {
    counters_.drop(DropReason::kOutOfWindow);
    return;
  }
  // Handshake complete.
  std::memcpy(c.remote_mac, seg.src_mac, 6);  // replies go where the (proven) peer is now
  std::memcpy(c.local_mac, seg.dst_mac, 6);
  c.snd_una = c.iss + 1;
  c.sack_high = c.snd_una;
  c.snd_wnd = static_cast<uint32_t>(seg.window) << c.snd_wscale;
  c.max_snd_wnd = std::max(c.max_snd_wnd, c.snd_wnd);
  c.snd_wl1 = seg.seq;
  c.snd_wl2 = seg.ack;
  if (c.ts_ok && seg.opt.has_ts && seg.opt.ts_ecr != 0) {
    rttSample(c, static_cast<uint64_t>(tsNow(c) - seg.opt.ts_ecr) * kMs);
  } else if (c.retries == 0) {
    rttSample(c, now_ - c.synack_sent_at);
  }
  c.rto_at = 0;
  c.retries = 0;
  setState(c, TcpState::kEstablished);
  ++counters_.accepted;
  std::shared_ptr<net::Session> session = listeners_[c.listener].factory(c);
  if (!session) {
    resetConn(c, true);
    return;
  }
  c.session = std::move(session);
  handleSynchronized(c, seg);  // data or FIN riding on the third segment
  markDirty(c);
}

}  // namespace infergate::dataplane::tcp
