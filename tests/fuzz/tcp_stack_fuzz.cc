// libFuzzer target: infergate's userspace TCP stack (dataplane/tcp/tcp_stack.h) over the fake
// packet device, playing up to sixteen clients at once. Most frames are built with the stack's
// own builder (buildSegment), so checksums are right and the TCP state machine, not just the
// checksum check, sees the fuzzer's sequence numbers, flags, windows, options and tags; some are
// raw bytes handed to onFrame (parseFrame). Small limits (8 connections, a backlog of 4, 16 KiB
// receive buffers) so eviction, SYN cookies and window limits are reached in a few records.
//
// Input: [config: 4 bytes] then records until the input ends.
//   config[0]: bits 0-1 syn_cookies (kOff, kOnOverflow, kAlways, kAlways), 2 window scaling,
//              3 sack, 4 timestamps, 5 verify_checksums off (raw frames reach TCP), 6 keep-alive,
//              7 a fixed ISN near the wrap (isn_fn) instead of cookies
//   config[1]: session behaviour of accepted connections (FuzzSession::kEcho ...), xor'ed with
//              the byte of the record that creates each one
//   config[2]: bits 0-3 transmit frames the device grants (0xf: unlimited), 4-7 mtu choice
//   config[3]: bit 0 abortAll() at the end, bit 1 rcv_buf 4 KiB instead of 16 KiB, bits 2-3
//              the device's hold budget (0, 2, 16, 256 frames: out-of-order segments that come
//              through the device are held in their frames), bits 4-5 the per-connection bound
//              on held frames (256, 1, 3, 8)
//   Record, first byte: bits 0-1 kind, bits 2-5 client (5 talks to a port nobody listens on;
//   6, 7, 14, 15 are IPv6), bits 6-7 the clock's unit (none, 1 ms, 100 ms, 1 s).
//   The clock moves by unit * the record's clock byte after a segment.
//     kind 0 segment, kind 3 segment completing the handshake: 19 more header bytes
//       [flags][modes][seq:4][ack:4][window:2][opts][optval][meta][clock][len:2] + payload
//       modes: bit 0 seq absolute (else relative to the last ack the client got; kind 3: to the
//       last SYN-ACK's ack), bit 1 ack absolute (else relative to the server's next sequence
//       number; kind 3: the SYN-ACK's seq + 1), bits 2-3 meta (none, rejected, request start,
//       from the meta byte), bit 4 via the device (processRx) instead of onFrame, bit 5 no
//       poll after, bit 6 SYN options from optval, bit 7 ack relative to the client's previous
//       ack (delta 0: a duplicate ACK)
//       opts: bit 0 MSS, 1 window scale, 2 SACK-permitted, 3 timestamps, 4-5 SACK blocks,
//       6 TSecr garbage, 7 TSval goes backwards
//     kind 1 raw frame: [meta][len:2] + bytes
//     kind 2 session action: [which][action][n:2]
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "dataplane/tcp/fake_device.h"
#include "dataplane/tcp/frame_tag.h"
#include "dataplane/tcp/packet.h"
#include "dataplane/tcp/tcp_stack.h"
#include "tests/mocks/variable_clock.h"
#include "tests/fuzz/fuzz_secret.h"

namespace {

using namespace infergate::dataplane::tcp;  // NOLINT: a test harness over one namespace
namespace net = infergate::net;

#define FUZZ_CHECK(cond)                                                                     \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "fuzz_tcp_stack: invariant failed at %s:%d: %s\n", __FILE__, __LINE__, \
                   #cond);                                                                   \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

constexpr uint16_t kPort = 8080;
constexpr uint16_t kNoListenerPort = 8081;
constexpr uint32_t kMaxConns = 8;
constexpr int kClients = 16;
constexpr uint64_t kMs = 1'000'000;

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool empty() const { return n_ == 0; }
  uint8_t u8() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  uint16_t u16() { return static_cast<uint16_t>(u8() | u8() << 8); }
  uint32_t u32() { return static_cast<uint32_t>(u16()) | static_cast<uint32_t>(u16()) << 16; }
  // Up to n bytes; *got says how many there were.
  const uint8_t* take(size_t n, size_t* got) {
    *got = std::min(n, n_);
    const uint8_t* r = p_;
    p_ += *got;
    n_ -= *got;
    return r;
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

// One client 4-tuple and what it learnt from the stack's replies.
struct Client {
  FlowKey key;               // the client's view: local = client
  uint32_t server_ack = 0;   // ack of the stack's latest segment: the seq it expects next
  uint32_t server_next = 0;  // seq + length of the stack's latest segment
  uint32_t server_ts = 0;    // its latest TSval
  uint32_t ts_val = 1000;
  uint32_t last_ack = 0;     // the ack of the client's latest segment
  bool have_synack = false;
  uint32_t synack_seq = 0, synack_ack = 0;
};

struct Harness;

// A session that echoes, pauses and closes as its mode bits say; every send is counted so the
// buffer bound below can allow for it.
struct FuzzSession : net::Session {
  enum Mode : uint8_t {
    kEcho = 1,
    kPauseOnData = 2,
    kCloseAfterData = 4,
    kBigResponse = 8,
    kCloseOnPeerClose = 16,
    kResumeOnTick = 32,
  };
  FuzzSession(net::Transport& t, uint8_t m, Harness* h) : transport(&t), mode(m), harness(h) {}
  void onData(const char* d, size_t n) override;
  void onPeerClosed() override {
    if (transport && (mode & kCloseOnPeerClose)) transport->closeAfterFlush();
  }
  void onTick(uint64_t) override {
    if (transport && (mode & kResumeOnTick)) transport->pauseReading(false);
  }
  void onClosed() override { transport = nullptr; }
  bool idle() const override { return true; }
  void send(size_t n);

  net::Transport* transport;
  uint8_t mode;
  Harness* harness;
  size_t received = 0;
};

struct Harness {
  uint64_t now = 5'000'000'000ull;
  infergate::mocks::VariableClock clock{now};
  TcpOptions opts;
  std::unique_ptr<FakePacketDevice> dev;
  std::unique_ptr<TcpStack> stack;
  std::vector<std::shared_ptr<FuzzSession>> sessions;
  Client clients[kClients];
  uint8_t session_mode = 0;  // for the next accepted connection
  uint64_t app_bytes_sent = 0;
  uint8_t cmac[6] = {2, 0, 0, 0, 0, 2};
  uint8_t smac[6] = {2, 0, 0, 0, 0, 1};

  void drain() {
    while (!dev->sent.empty()) {
      const std::vector<uint8_t>& f = dev->sent.front();
      Segment seg;
      DropReason why{};
      // Everything the stack sends is a well-formed TCP segment with valid checksums.
      FUZZ_CHECK(parseFrame(f.data(), f.size(), true, seg, why) == FrameKind::kTcp);
      FUZZ_CHECK(f.size() <= dev->mtu() + kEthHeader);
      for (Client& c : clients) {
        // parsed as the client receives it: local = the client, as in Client::key
        if (!(seg.key == c.key)) continue;
        if (seg.flags & kAck) c.server_ack = seg.ack;
        c.server_next = seg.seq + seg.payload_len + ((seg.flags & kSyn) ? 1 : 0) +
                        ((seg.flags & kFin) ? 1 : 0);
        if (seg.opt.has_ts) c.server_ts = seg.opt.ts_val;
        if ((seg.flags & (kSyn | kAck)) == (kSyn | kAck)) {
          c.have_synack = true;
          c.synack_seq = seg.seq;
          c.synack_ack = seg.ack;
        }
        break;
      }
      dev->sent.pop_front();
    }
  }

  void checkInvariants() const {
    FUZZ_CHECK(stack->connectionCount() <= kMaxConns);
    // Receive memory per connection: rcv_buf (+ the window-scale rounding) plus partly used
    // chunks at both ends; transmit memory: what the sessions sent, plus a chunk each end.
    const uint64_t chunk = opts.chunk_size;
    const uint64_t bound = kMaxConns * (opts.rcv_buf + (1u << 14) + 4 * chunk) + app_bytes_sent;
    FUZZ_CHECK(stack->bufferBytes() <= bound);
    // Frame accounting: after every call the only received frames not released are the ones
    // held for out-of-order data, within both bounds; none is ever released twice.
    FUZZ_CHECK(dev->outstanding() == stack->heldFrames());
    FUZZ_CHECK(stack->counters().ooo_frames_held == stack->heldFrames());
    FUZZ_CHECK(stack->heldFrames() <= dev->rxHoldBudget());
    FUZZ_CHECK(stack->heldFrames() <= kMaxConns * opts.max_held_frames_per_connection);
    FUZZ_CHECK(dev->double_releases == 0 && dev->unknown_releases == 0);
  }

  void deliver(std::vector<uint8_t> frame, uint64_t meta, bool via_device) {
    if (via_device) {
      dev->inject(std::move(frame), meta);
      stack->processRx();
    } else {
      stack->onFrame(frame.data(), frame.size(), meta);
    }
  }

  uint64_t metaFor(uint8_t choice, uint8_t b) const {
    switch (choice & 3) {
      case 1: return makeMeta(b & 3, kVerdictAdmit, kTagRejected, b >> 2);
      case 2: return makeMeta(b & 3, (b >> 2) % 3, kTagRequestStart);
      case 3: return makeMeta(b & 7, (b >> 3) & 3, b, b >> 5);
      default: return 0;
    }
  }

  void advance(uint8_t unit, uint8_t v) {
    static const uint64_t kUnit[4] = {0, kMs, 100 * kMs, 1000 * kMs};
    now += kUnit[unit & 3] * v;
  }

  void segment(Reader& r, int kind, Client& c, uint8_t head) {
    const uint8_t flags = r.u8();
    const uint8_t modes = r.u8();
    const uint32_t seq_f = r.u32();
    const uint32_t ack_f = r.u32();
    const uint16_t window = r.u16();
    const uint8_t o = r.u8();
    const uint8_t ov = r.u8();
    const uint8_t meta_b = r.u8();
    const uint8_t clock_v = r.u8();
    const uint16_t want = r.u16();
    size_t len = 0;
    const uint8_t* payload = r.take(std::min<size_t>(want, 9000), &len);

    SegmentSpec s;
    s.src_mac = cmac;
    s.dst_mac = smac;
    s.key = &c.key;
    s.flags = flags;
    s.window = window;
    const uint32_t seq_base = kind == 3 ? c.synack_ack : c.server_ack;
    const uint32_t ack_base = kind == 3 ? c.synack_seq + 1 : (modes & 0x80) ? c.last_ack : c.server_next;
    s.seq = (modes & 1) ? seq_f : seq_base + seq_f;
    s.ack = (modes & 2) ? ack_f : ack_base + ack_f;
    if (o & 1) s.mss = (modes & 0x40) ? static_cast<uint16_t>(ov << 4) : 1460;
    if (o & 2) s.wscale = static_cast<int8_t>((modes & 0x40) ? (ov & 0xf) : 7);
    s.sack_permitted = o & 4;
    if (o & 8) {
      s.has_ts = true;
      c.ts_val += (o & 0x80) ? static_cast<uint32_t>(-static_cast<int32_t>(ov)) : ov;
      s.ts_val = c.ts_val;
      s.ts_ecr = (o & 0x40) ? seq_f ^ ack_f : c.server_ts;
    }
    uint32_t sack[4][2];
    s.num_sack = (o >> 4) & 3;
    for (int i = 0; i < s.num_sack; ++i) {  // blocks above the stack's next sequence number
      sack[i][0] = c.server_next + static_cast<uint32_t>(ov) * 64 * (i + 1);
      sack[i][1] = sack[i][0] + 100 + (seq_f & 0xfff);
    }
    if (s.num_sack) s.sack = sack;
    // Options may not fit a SYN with every option and 3 SACK blocks: buildSegment then
    // returns 0; trim the SACK blocks until they fit.
    std::vector<uint8_t> f;
    for (;;) {
      f.assign(headerLength(s) + len, 0);
      if (headerLength(s) <= kEthHeader + (c.key.v6 ? 40u : 20u) + 60u) {  // doff <= 15
        const size_t n = buildSegment(f.data(), f.size(), s, payload, static_cast<uint32_t>(len));
        if (n > 0) {
          f.resize(n);
          break;
        }
      }
      if (s.num_sack == 0) return;
      --s.num_sack;
    }
    if (flags & kAck) c.last_ack = s.ack;
    if (kind == 3 || (flags & kSyn)) session_mode ^= head;
    deliver(std::move(f), metaFor(modes >> 2, meta_b), modes & 0x10);
    advance(head >> 6, clock_v);
    if (!(modes & 0x20)) stack->poll(now);
  }

  void raw(Reader& r) {
    const uint8_t meta_b = r.u8();
    const uint16_t want = r.u16();
    size_t len = 0;
    const uint8_t* p = r.take(want, &len);
    deliver(std::vector<uint8_t>(p, p + len), metaFor(meta_b, meta_b >> 2), meta_b & 0x80);
  }

  void sessionAction(Reader& r) {
    const uint8_t which = r.u8();
    const uint8_t action = r.u8();
    const uint16_t n = r.u16();
    std::vector<FuzzSession*> live;
    for (auto& s : sessions)
      if (s->transport) live.push_back(s.get());
    if (live.empty()) return;
    FuzzSession& s = *live[which % live.size()];
    switch (action & 7) {
      case 0: s.send(n); break;
      case 1: s.transport->pauseReading(true); break;
      case 2: s.transport->pauseReading(false); break;
      case 3: s.transport->closeAfterFlush(); break;
      case 4: s.mode ^= static_cast<uint8_t>(n); break;
      case 5: (void)s.transport->pendingBytes(); break;
      case 6: s.send(static_cast<size_t>(n) * 16); break;  // up to 1 MiB
      default: s.transport->send(std::string_view()); break;
    }
    stack->poll(now);
  }
};

void FuzzSession::send(size_t n) {
  static const std::vector<char> kBytes(1 << 20, 'r');
  n = std::min(n, kBytes.size());
  harness->app_bytes_sent += n;
  transport->send(std::string_view(kBytes.data(), n));
}

void FuzzSession::onData(const char* d, size_t n) {
  const bool first = received == 0;
  received += n;
  if (!transport) return;
  if (mode & kEcho) {
    harness->app_bytes_sent += n;
    transport->send(std::string_view(d, n));
  }
  if (first && (mode & kBigResponse)) send(20000);
  if (mode & kPauseOnData) transport->pauseReading(true);
  if ((mode & kCloseAfterData) && received > 64) transport->closeAfterFlush();
}

Client makeClient(int i) {
  Client c;
  FlowKey& k = c.key;
  k.v6 = (i & 7) >= 6;
  if (k.v6) {
    k.local_ip[0] = 0xfd;
    k.local_ip[15] = static_cast<uint8_t>(2 + (i & 1));
    k.remote_ip[0] = 0xfd;
    k.remote_ip[15] = 1;
  } else {
    const uint8_t cl[4] = {10, 0, 0, static_cast<uint8_t>(2 + (i & 1))}, s[4] = {10, 0, 0, 1};
    std::memcpy(k.local_ip, cl, 4);
    std::memcpy(k.remote_ip, s, 4);
  }
  k.local_port = static_cast<uint16_t>(40000 + i);
  k.remote_port = i == 5 ? kNoListenerPort : kPort;
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  infergate::fuzz::resetSecrets(0x1f2e3d4c5b6a7988ull);
  Reader r(data, size);
  const uint8_t c0 = r.u8(), c1 = r.u8(), c2 = r.u8(), c3 = r.u8();

  Harness h;
  TcpOptions& o = h.opts;
  o.max_connections = kMaxConns;
  o.syn_backlog = 4;
  o.rcv_buf = (c3 & 2) ? 4096 : 16384;
  o.chunk_size = 2048;
  o.pool_keep_chunks = 8;
  o.timer_slots = 256;
  o.max_ooo_ranges = 4;
  o.challenge_ack_limit = 10;
  o.syn_ack_retries = 2;
  o.max_retries = 3;
  static const SynCookies kCookies[4] = {SynCookies::kOff, SynCookies::kOnOverflow,
                                         SynCookies::kAlways, SynCookies::kAlways};
  o.syn_cookies = kCookies[c0 & 3];
  o.window_scaling = c0 & 4;
  o.sack = c0 & 8;
  o.timestamps = c0 & 0x10;
  o.verify_checksums = !(c0 & 0x20);
  if (c0 & 0x40) o.keepalive_idle_ns = 2000 * kMs;
  if (c0 & 0x80) o.isn_fn = [](const FlowKey&) { return 0xfffffff0u; };
  o.cookie_jar = std::make_shared<SynCookieJar>(ig_sipkey{1, 2}, ig_sipkey{3, 4}, 0);
  static const uint32_t kMtu[16] = {1500, 576, 9000, 1280, 1500, 1500, 1500, 1500,
                                    1500, 1500, 1500, 1500, 1500, 1500, 1500, 1500};
  h.dev = std::make_unique<FakePacketDevice>(kMtu[c2 >> 4], 256);
  if ((c2 & 0xf) != 0xf) h.dev->tx_limit = 64 * (c2 & 0xf);
  static const uint32_t kHold[4] = {0, 2, 16, 256};
  static const uint32_t kHoldPerConn[4] = {256, 1, 3, 8};
  h.dev->hold_budget = kHold[(c3 >> 2) & 3];
  o.max_held_frames_per_connection = kHoldPerConn[(c3 >> 4) & 3];
  h.session_mode = c1;
  Harness* hp = &h;
  h.stack = std::make_unique<TcpStack>(o, *h.dev, h.clock);
  FUZZ_CHECK(h.stack
                 ->listen(kPort,
                          [hp](net::Transport& t) {
                            auto s = std::make_shared<FuzzSession>(t, hp->session_mode, hp);
                            hp->sessions.push_back(s);
                            return s;
                          })
                 .ok());
  for (int i = 0; i < kClients; ++i) h.clients[i] = makeClient(i);

  for (int records = 0; !r.empty() && records < 256; ++records) {
    const uint8_t head = r.u8();
    Client& c = h.clients[(head >> 2) & 15];
    switch (head & 3) {
      case 0: h.segment(r, 0, c, head); break;
      case 1: h.raw(r); break;
      case 2: h.sessionAction(r); break;
      case 3: h.segment(r, 3, c, head); break;
    }
    h.drain();
    h.checkInvariants();
  }
  // Let every timer run out: retransmissions give up, TIME_WAIT ends.
  for (int i = 0; i < 4; ++i) {
    h.now += 30'000 * kMs;
    h.stack->poll(h.now);
    h.drain();
    h.checkInvariants();
  }
  if (c3 & 1) {
    h.stack->abortAll();
    h.drain();
    FUZZ_CHECK(h.stack->connectionCount() == 0);
    FUZZ_CHECK(h.dev->outstanding() == 0);
  }
  if (std::getenv("FUZZ_TCP_STATS")) {  // docs/FUZZING.md: which paths an input reaches
    const TcpCounters& k = h.stack->counters();
    std::fprintf(stderr,
                 "stats: accepted=%lu cookies_sent=%lu cookies_validated=%lu cookies_rejected=%lu "
                 "half_open_evicted=%lu refused=%lu backlog_full=%lu xdp_rejected=%lu "
                 "xdp_reject_ignored=%lu retransmits=%lu fast_retransmits=%lu out_of_order=%lu "
                 "challenge_acks=%lu zero_window_probes=%lu keepalive_probes=%lu timeouts=%lu "
                 "time_wait_recycled=%lu rst_in=%lu bytes_in=%lu bytes_out=%lu paws=%lu "
                 "beyond_window=%lu ooo_limit=%lu tx_no_frame=%lu bad_tcp_checksum=%lu "
                 "ooo_frames_held=%lu held_bytes_delivered=%lu hold_fallbacks=%lu "
                 "copied_ooo=%lu copied_paused=%lu\n",
                 k.accepted, k.cookies_sent, k.cookies_validated, k.cookies_rejected,
                 k.half_open_evicted, k.refused, k.syn_backlog_full, k.xdp_rejected,
                 k.xdp_reject_ignored, k.retransmits, k.fast_retransmits, k.out_of_order,
                 k.challenge_acks, k.zero_window_probes, k.keepalive_probes, k.timeouts,
                 k.time_wait_recycled, k.rst_in, k.bytes_in, k.bytes_out,
                 k.dropped(DropReason::kPaws), k.dropped(DropReason::kBeyondWindow),
                 k.dropped(DropReason::kOooLimit), k.dropped(DropReason::kTxNoFrame),
                 k.dropped(DropReason::kBadTcpChecksum), k.ooo_frames_held_total,
                 k.ooo_held_bytes_delivered, k.ooo_hold_fallbacks, k.rx_copied_ooo_bytes,
                 k.rx_copied_paused_bytes);
  }
  h.stack.reset();  // sessions see onClosed before the device goes
  // Every frame the stack received went back to the device exactly once.
  FUZZ_CHECK(h.dev->outstanding() == 0);
  FUZZ_CHECK(h.dev->double_releases == 0 && h.dev->unknown_releases == 0);
  return 0;
}
