#pragma once
// infergate's userspace TCP/IP stack, server side, one instance per reactor (shared-nothing).
//
// Frames come in through onFrame() (or processRx(), which pulls a burst from the device);
// segments go out through the PacketDevice's tx burst, batched and flushed at the end of each
// call. Each established connection is a net::Transport driving the net::Session
// that the listener's factory made for it, so the HTTP/1.1 session runs on it unchanged.
//
// What it does: Ethernet (replies to the MAC the segment came from), IPv4 (options skipped,
// fragments dropped), IPv6 (no extension headers: dropped and counted); ARP, ICMP and ND are
// counted and ignored (the XDP program passes them to the kernel). TCP: passive open with a
// bounded SYN queue and a hard connection cap (refusal = RST + counter); MSS, window scaling,
// SACK-permitted and timestamps negotiated (RFC 7323, PAWS); in-order delivery straight from
// the frame, out-of-order segments kept in a bounded range table and reassembled; receive
// window = the memory the connection may hold (TcpOptions::rcv_buf); SACK blocks in our ACKs;
// NewReno fast retransmit/fast recovery (RFC 6582) and congestion control (RFC 5681); RTO per
// RFC 6298 with exponential backoff; zero-window probes; delayed ACKs; RFC 5961 challenge
// ACKs; FIN both ways, half-close, FIN_WAIT_2 and a short TIME_WAIT (recycled by a newer
// SYN); keep-alive probes; software checksums, or the NIC's where the device offers them
// (PacketDevice::txChecksumOffload, Frame::meta's kMetaRx*ChecksumGood). See docs/TCP.md.
//
// Threading: everything on the reactor thread that owns the stack, except loop().post().
//
// The class is defined across dataplane/tcp/tcp_*.cc, one file per part (input, handshake,
// output, timers, connection; the table in conn_table.h): docs/TCP.md "Where the code is".

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "dataplane/output_limits.h"
#include "dataplane/packet_io.h"
#include "common/clock.h"
#include "dataplane/tcp/buffer.h"
#include "dataplane/tcp/conn_table.h"
#include "dataplane/tcp/counters.h"
#include "dataplane/tcp/packet.h"
#include "dataplane/tcp/syncookie_jar.h"
#include "dataplane/tcp/timer_wheel.h"
#include "net/session.h"

namespace infergate::dataplane::tcp {

// When the stack answers a SYN with a cookie instead of keeping a half-open connection.
enum class SynCookies : uint8_t {
  kOff,         // never: beyond syn_backlog SYNs are dropped (the client retries)
  kOnOverflow,  // when syn_backlog half-open connections exist (the default, like Linux's 1)
  kAlways,      // every SYN (like Linux's tcp_syncookies=2)
};

struct TcpOptions {
  int index = 0;                       // reactor index (Loop::index)
  uint32_t max_connections = 10000;    // hard cap on connection slots, every state included
  uint32_t syn_backlog = 1024;         // half-open (SYN_RECEIVED) connections at most
  uint32_t rcv_buf = 256 * 1024;       // receive memory per connection = largest window
  uint32_t chunk_size = 16 * 1024;     // buffer chunk size
  uint32_t pool_keep_chunks = 4096;    // free chunks kept for reuse (the rest go to malloc)
  bool window_scaling = true;          // offered back when the peer offers it
  bool sack = true;
  bool timestamps = true;
  bool verify_checksums = true;        // false only when the NIC verified them
  uint32_t initial_cwnd_segments = 10; // RFC 6928
  uint64_t initial_rto_ns = 1'000'000'000;
  uint64_t min_rto_ns = 200'000'000;   // Linux's floor; RFC 6298 says 1 s
  uint64_t max_rto_ns = 60'000'000'000;
  uint32_t syn_ack_retries = 5;
  uint32_t max_retries = 8;            // RTO expirations in a row before the connection aborts
  uint64_t delayed_ack_ns = 40'000'000;
  uint64_t time_wait_ns = 1'000'000'000;    // short TIME_WAIT (see docs/TCP.md)
  uint64_t fin_wait2_ns = 30'000'000'000;
  uint64_t keepalive_idle_ns = 0;           // 0: no keep-alive probes
  uint64_t keepalive_interval_ns = 10'000'000'000;
  uint32_t keepalive_probes = 5;
  uint64_t session_tick_ns = 100'000'000;   // Session::onTick period
  uint64_t timer_granularity_ns = 1'000'000;
  uint32_t timer_slots = 4096;              // power of two
  uint32_t max_ooo_ranges = 8;              // out-of-order holes kept per connection
  // Out-of-order segments held in their received frames instead of copied (docs/TCP.md):
  // at most this many frames per stack (and never more than the device's rxHoldBudget()) and
  // per connection; beyond, the segment is copied into the receive buffer (counted). 0: off.
  uint32_t max_held_frames = 1024;
  uint32_t max_held_frames_per_connection = 256;
  // Challenge ACKs (RFC 5961 §7): at most one per connection per challenge_ack_interval_ns,
  // and per stack a limit per second drawn at random in [limit/2, limit] each second, so the
  // global count is no side channel (CVE-2016-5696).
  uint32_t challenge_ack_limit = 1000;
  uint64_t challenge_ack_interval_ns = 100'000'000;
  // SYN cookies (dataplane/tcp/syncookie.h). Every ISN the stack picks is a cookie, so an ACK
  // completing a handshake the stack holds no state for (its SYN was answered by the XDP
  // program or by a cookie SYN-ACK of ours) creates the connection.
  SynCookies syn_cookies = SynCookies::kOnOverflow;
  // The keys, shared by every reactor and mirrored into the XDP program; nullptr: the stack
  // makes its own (random) jar and rotates it.
  std::shared_ptr<SynCookieJar> cookie_jar;
  // Send timeout and output budgets, applied to each connection's send buffer (what the
  // session queued and the peer has not acknowledged); a connection over them is reset.
  OutputLimits output;
  // Tests: fixes our initial sequence number for a flow (nullptr: the cookie).
  std::function<uint32_t(const FlowKey&)> isn_fn;
  // true: onFrame(), processRx(), poll() and abortAll() end with the device's txFlush() (a
  // kick when its ring asks). false: they only queue frames (txBurst) and the owner calls
  // flushDevice() once per loop iteration, so one kick carries everything the iteration sent
  // (the afxdp reactor).
  bool flush_each_call = true;
};

// Our window-scale shift for a receive buffer: the smallest that fits rcv_buf in 16 bits (at
// most 14). The XDP program's cookie SYN-ACKs must announce the same one.
uint8_t windowShiftFor(uint32_t rcv_buf);

class TcpStack {
 public:
  // `loop`: the reactor's loop sessions see; nullptr: the stack provides one (post() queues
  // work that poll() runs; inLoopThread() is true on the thread that constructed the stack
  // or last called bindThread()).
  TcpStack(const TcpOptions& options, PacketDevice& device, const common::Clock& clock,
           net::Loop* loop = nullptr);
  ~TcpStack();
  TcpStack(const TcpStack&) = delete;
  TcpStack& operator=(const TcpStack&) = delete;

  // Accepts connections to `port` (any local address the device delivers).
  absl::Status listen(uint16_t port, net::SessionFactory factory);

  // One received Ethernet frame; what it causes is transmitted before returning. `meta`:
  // what the device put in Frame::meta (the XDP program's tag, dataplane/tcp/frame_tag.h).
  void onFrame(const uint8_t* frame, size_t len, uint64_t meta = 0);
  // Pulls up to `max` frames from the device, handles them, releases them, flushes tx.
  size_t processRx(size_t max = 64);
  // The same with the time the caller read at the top of its loop iteration (no clock read).
  size_t processRx(size_t max, uint64_t now_ns);
  // End of the owner's loop iteration (flush_each_call false): sends what connections queued
  // outside processRx()/poll() (a session answering from work run at the end of the burst),
  // then the device's txFlush() if any frame went to it since the last one.
  void flushDevice();
  // Timers, posted work, session ticks; flushes tx. Call at least every timer granularity.
  void poll(uint64_t now_ns);

  // Resets every connection (RST to the peer), e.g. on shutdown.
  void abortAll();

  net::Loop& loop() { return *loop_; }
  void bindThread();
  const TcpCounters& counters() const { return counters_; }
  size_t connectionCount() const { return conns_.used(); }
  size_t bufferBytes() const { return pool_.bytesInUse(); }
  // Received frames held for out-of-order data right now.
  size_t heldFrames() const { return held_used_; }
  uint64_t now() const { return now_; }

 private:
  struct Conn;
  class OwnLoop;
  struct Listener {
    uint16_t port;
    net::SessionFactory factory;
  };

  // Each group is defined in the file named (docs/TCP.md "Where the code is").
  size_t handleBurst(size_t n, uint64_t now_ns);  // rx_batch_[0, n): handled, released, flushed

  // tcp_input.cc: segments in.
  void handleFrame(const uint8_t* frame, size_t len);
  void handleSegment(const Segment& seg);
  bool rejectFlagApplies(const Conn& c, const Segment& seg) const;
  void handleSynchronized(Conn& c, const Segment& seg);
  void sendChallengeAck(Conn& c);
  bool processAck(Conn& c, const Segment& seg);  // false: connection freed or segment dropped
  bool sacksNewData(Conn& c, const Segment& seg);  // SACK blocks above any reported before
  void processData(Conn& c, const Segment& seg);
  void processPeerFin(Conn& c);
  void enterTimeWait(Conn& c);
  void deliver(Conn& c);
  // Held out-of-order frames (tcp_input.cc).
  struct Held;
  Held popHeld(Conn& c);
  bool holdSegment(Conn& c, uint32_t seq, const uint8_t* data, uint32_t len);
  void unholdAll(Conn& c);         // copies the held bytes into rx, releases the frames
  void releaseHeld(Conn& c);       // drops the held frames (connection freed)
  void fillFromHeld(Conn& c, const uint8_t* data, uint32_t len);
  void pushInOrder(Conn& c, const uint8_t* p, uint32_t n, bool held);
  void releaseFrame(const Frame& f);
  void popOooRange(Conn& c);

  // tcp_handshake.cc: passive open, SYN cookies, SYN_RECEIVED.
  const Listener* findListener(uint16_t port, uint16_t* index) const;
  uint32_t makeIsn(const Segment& syn);
  void handleListen(const Segment& seg);
  void initConn(Conn& c, const Segment& syn_or_ack, uint16_t listener, uint32_t client_isn,
                uint32_t iss, uint32_t peer_mss, int peer_wscale, bool sack, bool ts,
                uint32_t ts_val);
  void sendCookieSynAck(const Segment& syn);
  Conn* allocOrRefuse(const Segment& seg);
  bool checkCookie(const Segment& seg, ig_cookie_opts* out) const;
  bool acceptCookie(const Segment& seg, uint16_t listener);
  void sendSynAck(Conn& c);
  void handleSynReceived(Conn& c, const Segment& seg);

  // tcp_output.cc: segments out (markDirty and tsNow: inline in tcp_connection.h).
  void markDirty(Conn& c);
  void flushDirty();
  void queueTx(const Frame& f);  // into the tx batch; a full batch goes to the device
  void flushTx();
  void kickDevice();  // device txFlush() when frames went to it since the last one
  void publishOutput();  // tx_freed_ into options_.output.used
  void updateOutputPause(Conn& c);
  uint16_t advertisedWindow(Conn& c);
  uint32_t tsNow(const Conn& c) const;
  bool sendSegment(Conn& c, uint32_t seq, uint32_t len, uint8_t flags);
  void sendRstFor(const Segment& seg);
  void retransmitHead(Conn& c);
  void output(Conn& c);

  // tcp_timers.cc.
  void armTimer(Conn& c);
  void onTimer(Conn& c);
  void rtoExpired(Conn& c);
  void rttSample(Conn& c, uint64_t rtt_ns);

  // tcp_connection.cc: a connection's life in the stack.
  Conn* allocConn();
  Conn* evictTimeWait();  // TIME_WAIT first, then half-open
  void setState(Conn& c, TcpState s);
  void detachSession(Conn& c);
  void freeConn(Conn& c);
  void resetConn(Conn& c, bool send_rst);

  TcpOptions options_;
  PacketDevice& device_;
  const common::Clock& clock_;  // must outlive the stack
  std::unique_ptr<OwnLoop> own_loop_;
  net::Loop* loop_;
  uint64_t now_ = 0;
  uint64_t cur_meta_ = 0;  // Frame::meta of the frame being handled
  uint32_t mtu_;
  // The device's txChecksumOffload(), read once: how segments are finished, and the Frame::meta
  // every queued frame carries (packet_io.h, kMetaTxChecksumOffload).
  TxChecksum tx_checksum_;
  uint64_t tx_meta_;
  TcpCounters counters_;
  ChunkPool pool_;
  TimerWheel wheel_;
  uint32_t syn_received_ = 0;
  struct EvictList {
    uint32_t head = 0xffffffffu;
    uint32_t tail = 0xffffffffu;
  };
  EvictList lists_[2];  // [0] TIME_WAIT, [1] SYN_RECEIVED connections, oldest first
  std::vector<Listener> listeners_;
  std::vector<uint32_t> dirty_;
  std::vector<uint32_t> due_;
  std::vector<Frame> tx_batch_;
  std::vector<Frame> rx_batch_;
  // Frames held for out-of-order segments: a pool of slots, each connection's a list sorted by
  // sequence number (Conn::held_head). rx_keep_[i]: rx_batch_[i] is held (not released at the
  // end of the burst); cur_frame_: the frame being handled (nullptr outside a device burst).
  struct Held {
    Frame frame;
    const uint8_t* data = nullptr;
    uint32_t seq = 0, len = 0;
    uint32_t next = 0xffffffffu;
  };
  std::vector<Held> held_;
  std::vector<uint32_t> held_free_;
  uint32_t held_used_ = 0;
  uint32_t held_budget_ = 0;  // min(max_held_frames, device rxHoldBudget())
  std::vector<uint8_t> rx_keep_;
  std::vector<Frame> rx_release_;
  uint32_t held_in_burst_ = 0;
  int32_t cur_frame_ = -1;  // index in rx_batch_ of the frame being handled; -1: none
  bool in_batch_ = false;
  bool tx_unflushed_ = false;  // frames went to the device since its last txFlush()
  int64_t tx_freed_ = 0;  // send-buffer bytes freed since the last publishOutput()
  uint64_t last_session_tick_ = 0;
  uint64_t challenge_window_start_ = 0;
  uint32_t challenge_count_ = 0;
  uint32_t challenge_limit_now_ = 0;  // this second's random global limit
  std::shared_ptr<SynCookieJar> cookies_;
  // Every connection slot and the FlowKey index (keyed from getrandom; declared here so the
  // keys are drawn in the same order as before: the jar's, the table's, misc_key_).
  ConnTable<Conn> conns_;
  ig_sipkey misc_key_{};   // timestamp offsets, challenge-ACK limits (getrandom)
  uint64_t misc_counter_ = 0;
};

}  // namespace infergate::dataplane::tcp
