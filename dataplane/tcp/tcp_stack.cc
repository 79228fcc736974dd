#include "dataplane/tcp/tcp_stack.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <utility>

#include "common/secret.h"
#include "dataplane/tcp/frame_tag.h"
#include "dataplane/tcp/seq.h"
#include "dataplane/tcp/syncookie.h"

namespace infergate::dataplane::tcp {
namespace {

constexpr uint32_t kNone = 0xffffffffu;
constexpr uint32_t kMaxOoo = 16;
constexpr uint64_t kMs = 1'000'000;

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

uint8_t windowShiftFor(uint32_t rcv_buf) {
  uint8_t shift = 0;
  while ((rcv_buf >> shift) > 65535 && shift < 14) ++shift;
  return shift;
}

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

// Payload bytes that fit in one segment now: the MSS less the SACK blocks our ACKs carry
// while out-of-order data is held (timestamps are already out of mss), so no data segment
// with SACK blocks exceeds the MTU.
uint32_t payloadRoom(const Tcb& c) {
  if (!c.sack_ok || c.ooo_n == 0) return c.mss;
  const uint32_t blocks = std::min<uint32_t>(c.ooo_n, c.ts_ok ? 3 : 4);
  const uint32_t opt = 4 + 8 * blocks;
  return c.mss > opt + 8 ? c.mss - opt : 8;
}

struct TcpStack::Conn final : Tcb, net::Transport {
  TcpStack* stack = nullptr;
  uint32_t id = 0;
  ChunkBuffer rx;  // bytes from rx_read on (in order up to rcv_nxt, then out-of-order ranges)
  ChunkBuffer tx;  // bytes from snd_una on
  std::shared_ptr<net::Session> session;

  uint32_t dataEnd() const { return app_close ? fin_seq : snd_una + static_cast<uint32_t>(tx.size()); }
  bool finAcked() const { return app_close && seqGt(snd_una, fin_seq); }
  uint32_t rcvDataEnd() const { return fin_received ? rcv_nxt - 1 : rcv_nxt; }

  void send(std::string_view bytes) override {
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
  void closeAfterFlush() override {
    if (app_close || state == TcpState::kClosed) return;
    app_close = true;
    fin_seq = snd_una + static_cast<uint32_t>(tx.size());
    stack->markDirty(*this);
  }
  void pauseReading(bool p) override {
    if (paused == p) return;
    paused = p;
    if (!p) {
      deliver_pending = true;
      stack->markDirty(*this);
    }
  }
  net::Loop& loop() override { return *stack->loop_; }
  size_t pendingBytes() const override { return tx.size(); }
  std::optional<net::IngressTag> ingressTag() override {
    if (!metaValid(tag_meta)) return std::nullopt;
    return net::IngressTag::fromProgram(metaClass(tag_meta), metaVerdict(tag_meta), tag_rx_ns);
  }
  std::optional<common::IpBytes> peerAddress() const override {
    if (key.v6) {
      common::IpBytes b;
      std::memcpy(b.data(), key.remote_ip, 16);
      return b;
    }
    uint32_t a;
    std::memcpy(&a, key.remote_ip, 4);
    return common::ipv4Bytes(a);
  }
  uint64_t tag_rx_ns = 0;  // stack clock when the tagged segment was handled
};

class TcpStack::OwnLoop final : public net::Loop {
 public:
  explicit OwnLoop(TcpStack& s) : owner_(std::this_thread::get_id()), stack_(s) {}
  void post(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);  // pairs with runPosted(); cross-thread completions only
    posted_.push_back(std::move(fn));
  }
  bool inLoopThread() const override { return std::this_thread::get_id() == owner_; }
  uint64_t nowNs() const override { return stack_.now_; }
  int index() const override { return stack_.options_.index; }
  void runPosted() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (posted_.empty()) return;
      running_.swap(posted_);
    }
    for (auto& fn : running_) fn();
    running_.clear();
  }
  std::thread::id owner_;

 private:
  TcpStack& stack_;
  std::mutex mu_;
  std::vector<std::function<void()>> posted_;
  std::vector<std::function<void()>> running_;
};

TcpStack::TcpStack(const TcpOptions& options, PacketDevice& device, const common::Clock& clock,
                   net::Loop* loop)
    : options_(options),
      device_(device),
      clock_(clock),
      now_(clock_.nowNs()),
      mtu_(device.mtu()),
      pool_(options.chunk_size, options.pool_keep_chunks),
      wheel_(std::max<uint32_t>(options.max_connections, 1), options.timer_slots,
             options.timer_granularity_ns, now_),
      conns_(std::max<uint32_t>(options.max_connections, 1)),
      cookies_(options.cookie_jar ? options.cookie_jar : std::make_shared<SynCookieJar>()),
      hash_key_(common::randomSipKey()),
      misc_key_(common::randomSipKey()) {
  if (options_.max_ooo_ranges > kMaxOoo) options_.max_ooo_ranges = kMaxOoo;
  if (options_.max_ooo_ranges == 0) options_.max_ooo_ranges = 1;
  if (loop == nullptr) {
    own_loop_ = std::make_unique<OwnLoop>(*this);
    loop_ = own_loop_.get();
  } else {
    loop_ = loop;
  }
  const uint32_t n = static_cast<uint32_t>(conns_.size());
  free_list_.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    conns_[i].stack = this;
    conns_[i].id = i;
    free_list_.push_back(n - 1 - i);  // pop_back hands out 0, 1, 2...
  }
  uint64_t cap = 16;
  while (cap < 2ull * n) cap <<= 1;
  table_.assign(cap, 0);
  table_mask_ = cap - 1;
  dirty_.reserve(n);
  due_.reserve(n);
  tx_batch_.reserve(64);
  rx_batch_.resize(256);
  last_session_tick_ = now_;
  challenge_window_start_ = now_;
  challenge_limit_now_ = options_.challenge_ack_limit;
}

TcpStack::~TcpStack() {
  for (Conn& c : conns_) {
    if (c.state == TcpState::kClosed) continue;
    c.rx.clear(pool_);
    tx_freed_ += static_cast<int64_t>(c.tx.size());
    c.tx.clear(pool_);
    if (c.session) {
      auto sp = std::move(c.session);
      sp->onClosed();
    }
  }
  publishOutput();
}

void TcpStack::bindThread() {
  if (own_loop_) own_loop_->owner_ = std::this_thread::get_id();
}

absl::Status TcpStack::listen(uint16_t port, net::SessionFactory factory) {
  for (const Listener& l : listeners_) {
    if (l.port == port) return absl::AlreadyExistsError("port " + std::to_string(port) + " already has a listener");
  }
  listeners_.push_back(Listener{port, std::move(factory)});
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// Connection table

uint64_t TcpStack::hashKey(const FlowKey& k) const {
  // Keyed (getrandom): nobody can pick 4-tuples that share a probe chain. SipHash-1-3, as hash
  // tables use it: its output never leaves the process.
  __u64 w[5];
  std::memcpy(w, &k, sizeof(w));
  return ig_siphash13(&hash_key_, w, 5);
}

TcpStack::Conn* TcpStack::lookup(const FlowKey& k) {
  uint64_t i = hashKey(k) & table_mask_;
  while (table_[i] != 0) {
    Conn& c = conns_[table_[i] - 1];
    if (c.key == k) return &c;
    i = (i + 1) & table_mask_;
  }
  return nullptr;
}

void TcpStack::hashInsert(Conn& c) {
  c.hash = hashKey(c.key);
  uint64_t i = c.hash & table_mask_;
  while (table_[i] != 0) i = (i + 1) & table_mask_;
  table_[i] = c.id + 1;
}

void TcpStack::hashErase(Conn& c) {
  uint64_t i = c.hash & table_mask_;
  while (table_[i] != c.id + 1) {
    if (table_[i] == 0) return;  // not present
    i = (i + 1) & table_mask_;
  }
  table_[i] = 0;
  uint64_t j = i;
  for (;;) {  // backward-shift deletion keeps probe chains unbroken
    j = (j + 1) & table_mask_;
    if (table_[j] == 0) break;
    const uint64_t h = conns_[table_[j] - 1].hash & table_mask_;
    const bool stays = (i <= j) ? (i < h && h <= j) : (i < h || h <= j);
    if (stays) continue;
    table_[i] = table_[j];
    table_[j] = 0;
    i = j;
  }
}

TcpStack::Conn* TcpStack::allocConn() {
  if (free_list_.empty()) return nullptr;
  Conn& c = conns_[free_list_.back()];
  free_list_.pop_back();
  static_cast<Tcb&>(c) = Tcb{};
  ++used_;
  return &c;
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
  hashErase(c);
  wheel_.cancel(c.id);
  setState(c, TcpState::kClosed);
  c.rx.clear(pool_);
  if (!c.tx.empty()) {  // never acknowledged: lost with the connection, counted
    counters_.output_discarded_bytes += c.tx.size();
    tx_freed_ += static_cast<int64_t>(c.tx.size());
  }
  c.tx.clear(pool_);
  c.dirty = false;
  detachSession(c);
  free_list_.push_back(c.id);
  --used_;
}

void TcpStack::resetConn(Conn& c, bool send_rst) {
  if (send_rst && c.state != TcpState::kSynReceived && c.state != TcpState::kClosed) {
    sendSegment(c, c.snd_nxt, 0, kRst | kAck);
  }
  freeConn(c);
}

void TcpStack::markDirty(Conn& c) {
  if (c.dirty) return;
  c.dirty = true;
  dirty_.push_back(c.id);
}

// ---------------------------------------------------------------------------------------
// Entry points

void TcpStack::onFrame(const uint8_t* frame, size_t len, uint64_t meta) {
  now_ = clock_.nowNs();
  cur_meta_ = meta;
  handleFrame(frame, len);
  cur_meta_ = 0;
  flushDirty();
  flushTx();
}

size_t TcpStack::processRx(size_t max) {
  if (max > rx_batch_.size()) max = rx_batch_.size();
  const size_t n = device_.rxBurst(rx_batch_.data(), max);
  if (n == 0) return 0;
  now_ = clock_.nowNs();
  for (size_t i = 0; i < n; ++i) {
    cur_meta_ = rx_batch_[i].meta;
    handleFrame(rx_batch_[i].data, rx_batch_[i].len);
  }
  cur_meta_ = 0;
  device_.rxRelease(rx_batch_.data(), n);
  flushDirty();
  flushTx();
  return n;
}

void TcpStack::poll(uint64_t now_ns) {
  now_ = now_ns;
  cookies_->maybeRotate(now_);
  if (own_loop_) own_loop_->runPosted();
  wheel_.advance(now_, due_);
  for (size_t i = 0; i < due_.size(); ++i) {
    Conn& c = conns_[due_[i]];
    if (c.state != TcpState::kClosed) onTimer(c);
  }
  due_.clear();
  if (now_ - last_session_tick_ >= options_.session_tick_ns) {
    last_session_tick_ = now_;
    for (Conn& c : conns_) {
      if (c.session && !c.app_close) {
        if (c.out_paused || (!c.tx.empty() && options_.output.globalPause())) {
          updateOutputPause(c);  // the process budget may have changed
        }
        std::shared_ptr<net::Session> sp = c.session;
        sp->onTick(now_);
      }
    }
  }
  flushDirty();
  flushTx();
}

void TcpStack::abortAll() {
  for (Conn& c : conns_) {
    if (c.state != TcpState::kClosed) resetConn(c, true);
  }
  publishOutput();
  flushTx();
}

void TcpStack::queueTx(const Frame& f) {
  tx_batch_.push_back(f);
  if (tx_batch_.size() >= 64) {
    device_.txBurst(tx_batch_.data(), tx_batch_.size());
    tx_batch_.clear();
  }
}

void TcpStack::flushTx() {
  if (tx_batch_.empty()) return;
  device_.txBurst(tx_batch_.data(), tx_batch_.size());
  tx_batch_.clear();
  device_.txFlush();
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

// ---------------------------------------------------------------------------------------
// Receive path

void TcpStack::handleFrame(const uint8_t* frame, size_t len) {
  ++counters_.frames_in;
  Segment seg;
  DropReason why = DropReason::kTooShort;
  switch (parseFrame(frame, len, options_.verify_checksums, seg, why)) {
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
  Conn* c = lookup(seg.key);
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

uint32_t TcpStack::tsNow(const Conn& c) const {
  return static_cast<uint32_t>(now_ / kMs) + c.ts_offset;
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
  hashInsert(c);
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
  f.len = static_cast<uint32_t>(buildSegment(f.data, f.capacity, s, nullptr, 0));
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
  c.rcv_adv = c.rcv_nxt + std::min<uint32_t>(options_.rcv_buf, 65535);  // the SYN-ACK's window
  c.last_ack_sent = c.rcv_nxt;
  c.snd_wnd = static_cast<uint32_t>(seg.window) << c.snd_wscale;
  c.max_snd_wnd = c.snd_wnd;
  c.snd_wl1 = seg.seq;
  c.snd_wl2 = seg.ack;
  hashInsert(c);
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
          setState(c, TcpState::kTimeWait);
          c.close_at = now_ + options_.time_wait_ns;
          c.rto_at = c.persist_at = c.ka_at = 0;
          break;
        case TcpState::kLastAck:
          freeConn(c);
          return false;
        default:
          break;
      }
    }
  } else if (ack == c.snd_una && seg.payload_len == 0 && !(seg.flags & (kSyn | kFin)) &&
             c.snd_max != c.snd_una && seg_wnd == c.snd_wnd) {
    ++c.dupacks;  // RFC 5681 duplicate ACK
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
      } else {
        c.rx.writeAt(pool_, c.rcv_nxt - c.rx_read, reinterpret_cast<const char*>(data), len);
        c.rx.extend(len);
        c.rcv_nxt += len;
        while (c.ooo_n > 0 && seqLeq(c.ooo_start[0], c.rcv_nxt)) {
          if (seqGt(c.ooo_end[0], c.rcv_nxt)) {
            const uint32_t more = c.ooo_end[0] - c.rcv_nxt;
            c.rx.extend(more);
            counters_.bytes_in += more;
            c.rcv_nxt = c.ooo_end[0];
          }
          --c.ooo_n;
          for (uint32_t i = 0; i < c.ooo_n; ++i) {
            c.ooo_start[i] = c.ooo_start[i + 1];
            c.ooo_end[i] = c.ooo_end[i + 1];
          }
          c.ooo_last = 0;
        }
        if (had_ooo) c.ack_now = true;  // a hole filled: ACK at once (RFC 5681 §4.2)
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
        c.rx.writeAt(pool_, seq - c.rx_read, reinterpret_cast<const char*>(data), len);
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
      setState(c, TcpState::kTimeWait);
      c.close_at = now_ + options_.time_wait_ns;
      c.rto_at = c.persist_at = c.ka_at = 0;
      break;
    default:
      break;
  }
  deliver(c);
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
    sp->onData(p, n);  // the chunk stays ours until consume(): sessions never touch rx
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

// ---------------------------------------------------------------------------------------
// Transmit path

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
  finishSegment(f.data, h, len, c.key.v6);
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
  f.len = static_cast<uint32_t>(buildSegment(f.data, f.capacity, s, nullptr, 0));
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

}  // namespace infergate::dataplane::tcp
