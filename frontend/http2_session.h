#pragma once
// HTTP/2 server session (h2c with prior knowledge) carrying gRPC, on nghttp2's server session
// API driven over a net::Transport's byte stream (nghttp2_session_mem_recv / mem_send; no
// sockets here, so the same session runs over kernel sockets and infergate's own TCP).
//
// - SETTINGS from Http2SessionOptions (max concurrent streams, max frame size, header list
//   size, initial stream window; the connection window is opened to connection_window_bytes).
//   Flow control is manual: received DATA is acknowledged (nghttp2_session_consume, which sends
//   WINDOW_UPDATEs) while the connection holds less than max_connection_memory_bytes, and
//   withheld when it holds more, so a peer cannot make one connection buffer without bound.
// - Timeouts: a header block not finished in header_timeout_ns ends the connection; a stream
//   silent for stream_timeout_ns while we wait for it ends with DEADLINE_EXCEEDED; a
//   connection without streams for idle_timeout_ns ends with GOAWAY.
// - gRPC: length-prefixed messages in any DATA split, grpc-timeout as the call deadline
//   (DEADLINE_EXCEEDED when it passes), grpc-status/grpc-message trailers (Trailers-Only for
//   errors before any message), identity encoding only (UNIMPLEMENTED otherwise), unknown
//   paths UNIMPLEMENTED, content-type other than application/grpc[+proto]: HTTP 415.
// - RST_STREAM from the peer cancels the call: its reply is dropped when it comes, and it is
//   counted as CANCELLED. The call's net::CancelToken (GrpcCall::cancel) is
//   cancelled too (on RST_STREAM and when the connection is gone), so a queued request leaves
//   the batcher and frees its slot. PING is answered by nghttp2. A protocol error (bad preface, bad
//   frame size, flow-control violation, ...) sends GOAWAY with nghttp2's error code and closes
//   after the flush; nothing throws.
// - GrpcCall::priority_metadata is the request's `x-infergate-priority` metadata (kPriorityHeader)
//   and GrpcCall::priority_class the transport's ingress tag class when HEADERS arrived; the
//   service resolves the priority from them (resolvePriority).
// - shutdown(): GOAWAY, in-flight streams complete, then the connection closes.
//
// Threading: everything on the transport's loop thread; respond callbacks may come from any
// thread and are posted to the loop.

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "backends/tensor.h"
#include "frontend/client_priority.h"
#include "frontend/grpc_framing.h"
#include "frontend/grpc_services.h"
#include "frontend/peer_decisions.h"
#include "frontend/server_metrics.h"
#include "frontend/tenants.h"
#include "net/session.h"

struct nghttp2_session;

namespace infergate::frontend {

struct Http2SessionOptions {
  uint32_t max_concurrent_streams = 128;
  uint32_t max_frame_size = 16384;               // SETTINGS_MAX_FRAME_SIZE (16384..16777215)
  uint32_t max_header_list_bytes = 16384;        // SETTINGS_MAX_HEADER_LIST_SIZE, enforced
  uint32_t initial_window_bytes = 1 << 20;       // SETTINGS_INITIAL_WINDOW_SIZE (per stream)
  uint32_t connection_window_bytes = 16 << 20;   // connection-level receive window
  size_t max_message_bytes = 64ull << 20;        // one gRPC message; larger: RESOURCE_EXHAUSTED
  uint64_t idle_timeout_ns = 60'000'000'000ull;  // no stream open: GOAWAY and close
  size_t max_pending_bytes = 8 << 20;            // unsent bytes before reading pauses
  // A request HEADERS block not complete (CONTINUATION frames outstanding) this long after it
  // began: the connection ends (GOAWAY). nghttp2 accepts no other frame meanwhile.
  uint64_t header_timeout_ns = 10'000'000'000ull;
  // A stream waiting for the client (request message not complete, or a client-streaming call
  // with nothing outstanding) that receives nothing for this long ends with
  // DEADLINE_EXCEEDED and RST_STREAM; the connection goes on.
  uint64_t stream_timeout_ns = 60'000'000'000ull;
  // A unary call whose request message is not complete this long after its HEADERS ends with
  // DEADLINE_EXCEEDED, however steadily it trickles (stream_timeout_ns measures only the gaps).
  uint64_t request_deadline_ns = 300'000'000'000ull;
  // Memory one connection may hold: partial gRPC messages being gathered, responses not yet
  // handed to nghttp2 and bytes queued in the transport. Flow control is manual: a stream's
  // received DATA is acknowledged (stream WINDOW_UPDATE) only while the connection is under
  // this budget (one stream gathering a message is let finish it), so a connection holds at
  // most this + max_message_bytes + max_concurrent_streams * initial_window_bytes.
  // At least max_message_bytes.
  size_t max_connection_memory_bytes = 96ull << 20;
  // Who may set a call's priority; null: every client (unit tests, embeddings).
  // `live_client_priority`, when set, wins: the policy in effect (a reload replaces it; the
  // session decides again for its peer when it changes).
  const ClientPriorityPolicy* client_priority = nullptr;
  const ClientPriorityPolicies* live_client_priority = nullptr;
  // Per-tenant limits (frontend/tenants.h); null: none. A call of an inference method
  // (GrpcMethod::limited) is counted against its tenant (the api_key_header metadata, else the
  // connection's source) when its headers are complete: refused, it ends at once with
  // RESOURCE_EXHAUSTED and the Retry-After hint in its trailers; admitted, it holds a place
  // among the tenant's requests in flight until it ends (a ModelStreamInfer stream: one place
  // for the whole stream, one token per request message; over the rate the stream ends with
  // the refusal). The limiter in effect is read per call (a reload replaces it); its
  // current() null: none.
  const TenantLimiters* tenants = nullptr;
  // Flood limits, ours rather than whatever the linked nghttp2 defaults to (RFC 9113 §10.5;
  // CVE-2019-9512/9515, CVE-2023-44487 rapid reset, CVE-2024-27316 CONTINUATION flood). Over
  // any of them the connection ends with GOAWAY (ENHANCE_YOUR_CALM where nghttp2 says so).
  size_t max_outbound_ack = 1000;       // queued SETTINGS/PING ACKs the peer does not read
  size_t max_settings_entries = 32;     // entries in one SETTINGS frame
  uint64_t stream_reset_burst = 1000;   // RST_STREAMs from the peer: token bucket burst
  uint64_t stream_reset_rate = 33;      //   and refill per second
  size_t max_continuations = 8;         // CONTINUATION frames after one HEADERS
  size_t max_hpack_table_bytes = 4096;  // our HPACK encoder's dynamic table
};

// Counters a session keeps (per connection; the reactor/lead may aggregate them).
struct Http2SessionStats {
  uint64_t streams = 0;
  uint64_t cancelled = 0;  // RST_STREAM by the peer before the call ended
  uint64_t deadline_exceeded = 0;
  uint64_t protocol_errors = 0;      // connection-level errors (GOAWAY sent)
  uint64_t gathered_bytes = 0;       // request bytes copied to reassemble split messages (by the
                                     // reader, or by a sink's fallback; 0 on the streamed path)
  uint64_t service_exceptions = 0;   // a service threw: its stream failed (RESOURCE_EXHAUSTED /
                                     // INTERNAL), the connection went on
  uint64_t callback_exceptions = 0;  // an exception reached an nghttp2 callback: connection ended
  uint64_t stream_id_errors = 0;     // HEADERS on a stream identifier that went down (§5.1.1)
  uint64_t flood_trips = 0;          // a flood limit above ended the connection (GOAWAY
                                     // ENHANCE_YOUR_CALM, or nghttp2's flood / settings error)
  uint64_t header_timeouts = 0;      // a header block not finished in header_timeout_ns
  uint64_t stream_timeouts = 0;      // a stream silent for stream_timeout_ns while we waited
  uint64_t window_withheld = 0;      // times the memory budget stopped WINDOW_UPDATEs
  uint64_t peak_memory_bytes = 0;    // highest memoryBytes() seen
};

class Http2Session : public net::Session, public std::enable_shared_from_this<Http2Session> {
 public:
  Http2Session(net::Transport& transport, GrpcServices& services,
               const Http2SessionOptions& options, ServerMetrics* metrics);
  ~Http2Session() override;

  void onData(const char* data, size_t len) override;
  void onPeerClosed() override;
  void onTick(uint64_t now_ns) override;
  void onClosed() override;
  bool idle() const override;

  // Graceful shutdown: GOAWAY (last stream id = the last one accepted), no new streams, in-flight
  // streams finish, then the connection closes after the flush.
  void shutdown();
  void onDrain() override { shutdown(); }

  const Http2SessionStats& stats() const { return stats_; }
  // What counts against max_connection_memory_bytes now.
  size_t memoryBytes() const;

  struct Stream;  // implementation detail (public for the nghttp2 C callbacks)
  struct Callbacks;
  struct SinkFeed;

 private:
  void flush();
  void deliver(int32_t stream_id, GrpcReply&& reply);
  // `retry_after_s`: the error's Retry-After hint (0: none), sent as trailing metadata.
  void finishStream(Stream& s, absl::StatusCode code, const std::string& message,
                    uint32_t retry_after_s = 0);
  void submitHeadersIfNeeded(Stream& s);
  void onHeadersDone(Stream& s);
  void onStreamData(Stream& s, const uint8_t* data, size_t len);
  void onStreamEnd(Stream& s);
  // One complete request message: `message`, or (null) the one the stream's sink received.
  void dispatch(Stream& s, const std::string_view* message);
  // Whether this peer may choose its calls' priority under the policy in effect (decided again
  // only when a reload published another policy).
  bool priorityTrusted();
  // The tenant of this peer's source address under `limiter` (decided again only when a
  // reload published another limiter).
  int sourceTenant(const TenantLimiter& limiter);
  void record(Stream& s, absl::StatusCode code);
  // Bytes gathered across DATA frames: stats_.gathered_bytes and the server's /metrics counter.
  void addGathered(uint64_t bytes);
  void fatal(int nghttp2_error);
  void updateReading();
  // Flow control (manual): `len` DATA bytes of `s` (null: a stream we do not track) were
  // received; acknowledged now while under the memory budget, else withheld.
  void received(Stream* s, int32_t stream_id, size_t len);
  // Acknowledges withheld bytes once the connection is back under its budget.
  void grantWindow();
  void returnWithheld(Stream& s);  // acknowledges what `s` has withheld (stream window)
  void forgetStream(Stream& s);    // its held memory and withheld window, when it goes
  void rehold(Stream& s);          // recounts what `s` holds into held_bytes_

  net::Transport* transport_;
  GrpcServices& services_;
  const Http2SessionOptions& options_;
  ServerMetrics* metrics_;
  nghttp2_session* session_ = nullptr;
  std::unordered_map<int32_t, std::unique_ptr<Stream>> streams_;
  Http2SessionStats stats_;
  // RFC 9113 §5.1.1: stream identifiers the peer opened, to tell a HEADERS on a stream that
  // was opened and is now closed (nghttp2 decides) from one on an identifier that went down.
  int32_t max_peer_stream_ = 0;
  std::array<int32_t, 256> opened_{};  // the latest opened identifiers, a ring
  uint32_t opened_next_ = 0;
  uint64_t resets_received_ = 0;  // RST_STREAM frames from the peer
  uint32_t fatal_code_ = 0;       // GOAWAY code for the next callback failure (0: PROTOCOL_ERROR)
  uint64_t last_activity_ns_ = 0;
  size_t held_bytes_ = 0;      // partial messages + responses not yet handed to nghttp2
  size_t withheld_bytes_ = 0;  // received DATA whose stream window is not yet returned
  // Over budget, one stream gathering a message still gets window, so that some message can
  // always complete and free memory.
  int32_t favoured_ = 0;
  bool timed_out_ = false;  // our GOAWAY is for a header timeout, not a flood
  PeerDecisions peer_;      // priority trust and source tenant, per published policy
  int in_nghttp2_ = 0;      // inside mem_recv: mem_send must wait (nghttp2 forbids re-entry)
  bool closing_ = false;
  bool shutting_down_ = false;
  bool paused_ = false;
};

// A net::SessionFactory for gRPC (h2c prior knowledge) listeners.
net::SessionFactory makeHttp2SessionFactory(GrpcServices& services,
                                            const Http2SessionOptions& options,
                                            ServerMetrics* metrics);

}  // namespace infergate::frontend
