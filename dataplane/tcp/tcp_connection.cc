// A connection: the net::Transport its session drives, and its life in the stack (a slot
// from the connection table, state changes with their counters and eviction lists, reset and
// free).

#include <cstring>
#include <memory>
#include <string_view>
#include <utility>

#include "dataplane/tcp/frame_tag.h"
#include "dataplane/tcp/tcp_connection.h"

namespace infergate::dataplane::tcp {

// ---------------------------------------------------------------------------------------
// Transport

void TcpStack::Conn::send(std::string_view bytes) {
  if (app_close || bytes.empty() ||
      (state != TcpState::kEstablished && state != TcpState::kCloseWait)) {
    return;
  }
  const OutputLimits& lim = stack->options_.output;
  if (close_for == OutputCloseReason::kNone) close_for = lim.refuse(tx.size(), bytes.size());
  if (close_for != OutputCloseReason::kNone) {
    // Refused: reset at the next flushDirty() (not here: the session is mid-call); the
    // bytes are counted as lost.
    stack->counters_.output_discarded_bytes += bytes.size();
    stack->markDirty(*this);
    return;
  }
  if (tx.empty()) {  // a send-timeout period starts
    drain_mark_at = stack->now_;
    drain_mark_una = snd_una;
  }
  tx.append(stack->pool_, bytes.data(), bytes.size());
  if (lim.used != nullptr) lim.used->add(static_cast<int64_t>(bytes.size()));
  stack->updateOutputPause(*this);
  stack->markDirty(*this);
}

void TcpStack::Conn::closeAfterFlush() {
  if (app_close || state == TcpState::kClosed) return;
  app_close = true;
  fin_seq = snd_una + static_cast<uint32_t>(tx.size());
  stack->markDirty(*this);
}

void TcpStack::Conn::pauseReading(bool p) {
  if (paused == p) return;
  paused = p;
  if (!p) {
    deliver_pending = true;
    stack->markDirty(*this);
  }
}

net::Loop& TcpStack::Conn::loop() { return *stack->loop_; }

size_t TcpStack::Conn::pendingBytes() const { return tx.size(); }

std::optional<net::IngressTag> TcpStack::Conn::ingressTag() {
  if (!metaValid(tag_meta)) return std::nullopt;
  return net::IngressTag::fromProgram(metaClass(tag_meta), metaVerdict(tag_meta), tag_rx_ns);
}

std::optional<common::IpBytes> TcpStack::Conn::peerAddress() const {
  if (key.v6) {
    common::IpBytes b;
    std::memcpy(b.data(), key.remote_ip, 16);
    return b;
  }
  uint32_t a;
  std::memcpy(&a, key.remote_ip, 4);
  return common::ipv4Bytes(a);
}

// ---------------------------------------------------------------------------------------
// Life cycle

TcpStack::Conn* TcpStack::allocConn() {
  Conn* c = conns_.alloc();
  if (c == nullptr) return nullptr;
  static_cast<Tcb&>(*c) = Tcb{};
  return c;
}

// A slot for a new connection when the table is full: the oldest TIME_WAIT connection, else
// the oldest half-open one. Dropping half-open state loses nothing: its ISN is a cookie, so
// the client's ACK, if it ever comes, still creates the connection (acceptCookie). A SYN flood
// therefore never starves connections that complete their handshake.
TcpStack::Conn* TcpStack::evictTimeWait() {
  if (lists_[0].head != kNone) {
    ++counters_.time_wait_recycled;
    freeConn(conns_[lists_[0].head]);
    return allocConn();
  }
  if (lists_[1].head != kNone && !options_.isn_fn) {
    ++counters_.half_open_evicted;
    freeConn(conns_[lists_[1].head]);
    return allocConn();
  }
  return nullptr;
}

void TcpStack::setState(Conn& c, TcpState s) {
  const TcpState old = c.state;
  if (old == s) return;
  if (old != TcpState::kClosed) --counters_.conns_by_state[static_cast<size_t>(old)];
  if (s != TcpState::kClosed) ++counters_.conns_by_state[static_cast<size_t>(s)];
  if (old == TcpState::kSynReceived) --syn_received_;
  if (s == TcpState::kSynReceived) ++syn_received_;
  const int old_list = old == TcpState::kTimeWait ? 0 : old == TcpState::kSynReceived ? 1 : -1;
  const int new_list = s == TcpState::kTimeWait ? 0 : s == TcpState::kSynReceived ? 1 : -1;
  if (old_list >= 0) {  // unlink from its eviction list
    EvictList& l = lists_[old_list];
    if (c.tw_prev != kNone) conns_[c.tw_prev].tw_next = c.tw_next;
    else l.head = c.tw_next;
    if (c.tw_next != kNone) conns_[c.tw_next].tw_prev = c.tw_prev;
    else l.tail = c.tw_prev;
    c.tw_prev = c.tw_next = kNone;
  }
  if (new_list >= 0) {
    EvictList& l = lists_[new_list];
    c.tw_prev = l.tail;
    c.tw_next = kNone;
    if (l.tail != kNone) conns_[l.tail].tw_next = c.id;
    else l.head = c.id;
    l.tail = c.id;
  }
  c.state = s;
}

void TcpStack::detachSession(Conn& c) {
  if (!c.session) return;
  std::shared_ptr<net::Session> sp = std::move(c.session);
  c.session.reset();
  sp->onClosed();
}

void TcpStack::freeConn(Conn& c) {
  if (c.state == TcpState::kClosed) return;
  conns_.erase(c);
  wheel_.cancel(c.id);
  setState(c, TcpState::kClosed);
  releaseHeld(c);
  c.rx.clear(pool_);
  if (!c.tx.empty()) {  // never acknowledged: lost with the connection, counted
    counters_.output_discarded_bytes += c.tx.size();
    tx_freed_ += static_cast<int64_t>(c.tx.size());
  }
  c.tx.clear(pool_);
  c.dirty = false;
  detachSession(c);
  conns_.release(c);
}

void TcpStack::resetConn(Conn& c, bool send_rst) {
  if (send_rst && c.state != TcpState::kSynReceived && c.state != TcpState::kClosed) {
    sendSegment(c, c.snd_nxt, 0, kRst | kAck);
  }
  freeConn(c);
}

}  // namespace infergate::dataplane::tcp
