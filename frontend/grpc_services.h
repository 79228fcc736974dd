#pragma once
// What the HTTP/2 session hands gRPC calls to: the service router (KServe v2
// GRPCInferenceService, TF Serving PredictionService). The session owns HTTP/2, framing,
// deadlines, cancellation, trailers and metrics; a GrpcServices implementation owns decoding,
// dispatch and encoding of messages.
//
// Threading: resolve() and call() run on the connection's loop thread; a GrpcRespond may be
// called from any thread (the session moves it to its loop).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "backends/tensor.h"
#include "common/cidr.h"
#include "net/cancel_token.h"

namespace infergate::frontend {

// One reply on a call. For a unary method exactly one reply ends the call with `code`. For a
// streaming method every OK reply with a message is sent as one response message and the call
// stays open; a non-OK reply ends the call with that status.
class TenantLease;  // frontend/tenants.h

struct GrpcReply {
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string message;  // grpc-message (error text), unencoded
  // An error's Retry-After hint in seconds (backends/retry_after.h; 0: none), sent as the
  // trailing metadata retry-after and grpc-retry-pushback-ms (docs/ERRORS.md "Retry-After").
  uint32_t retry_after_s = 0;
  // The response message(s) already framed with their 5-byte gRPC prefix (appendGrpcMessage /
  // writeGrpcPrefix), so encoders write once into the buffer the session sends from.
  std::string framed;
};
using GrpcRespond = std::function<void(GrpcReply)>;

struct GrpcMethod {
  int id = -1;              // -1: unknown method (UNIMPLEMENTED)
  bool client_streaming = false;  // bidirectional stream: one call() per request message
  net::Protocol protocol = net::Protocol::kGrpcKserve;  // metrics label
  // Messages that span DATA chunks go to a sink (GrpcServices::openSink, opened at the first
  // such message); a message inside one DATA chunk still goes to call(), as a view.
  bool streaming_decode = false;
  // An inference method: counted against the caller's tenant (frontend/tenants.h) when its
  // headers are complete, before any message is read.
  bool limited = false;
};

// The per-call context the session passes with each message.
struct GrpcCall {
  int32_t stream_id = 0;
  // Whose call it is, for the bound on sequences per client (frontend/tenants.h
  // sequenceOwner): the tenant that admitted it (valid while the call is dispatched; null
  // without tenants) and the connection's source address.
  const TenantLease* tenant = nullptr;
  std::optional<common::IpBytes> peer;
  uint64_t start_ns = 0;     // net::Loop::nowNs() when the call's headers arrived
  uint64_t deadline_ns = 0;  // from grpc-timeout, on the net::Loop::nowNs() clock; 0 = none
  uint64_t timeout_ns = 0;   // the grpc-timeout value itself; 0 = none
  // The `x-infergate-priority` metadata value (kPriorityHeader), as sent; nullopt when absent.
  std::optional<std::string> priority_metadata;
  // The ingress tag's priority class 0..3 (net::Transport::ingressTag() when the call's headers
  // arrived: xdp-filter and afxdp modes); nullopt without a tag.
  std::optional<int> priority_class;
  // Custom metadata ("x-" names other than the ones above and the tenants' API key header),
  // as sent: at most kMaxCustomMetadata entries, names up to 64 bytes, values up to 4 KiB (the
  // rest is not kept). What the service reads by a configured name: a model's
  // sequence_id_header (docs/BACKENDS.md "Sequences").
  static constexpr size_t kMaxCustomMetadata = 4;
  std::vector<std::pair<std::string, std::string>> custom_metadata;
  // The value of custom metadata `name` (lower case), or nullptr.
  const std::string* customMetadata(std::string_view name) const {
    for (const auto& [n, v] : custom_metadata) {
      if (n == name) return &v;
    }
    return nullptr;
  }
  // The connection's source may choose the call's priority (ClientPriorityPolicy): the
  // metadata above and the ModelInfer priority parameter count only when true.
  bool priority_trusted = true;
  // Cancelled by the session when the client resets the stream or the connection goes while
  // messages are unanswered; the service hands it to the model (InferRequest::cancel). One per
  // call (a new one for the next messages of a stream once all earlier ones are answered).
  std::shared_ptr<net::CancelToken> cancel;
  // Set by the service, read by the session when the call ends (metrics).
  int model_index = -1;
};

// Streaming decode of a call's request messages (optional, GrpcServices::openSink): instead of
// a gathered message, the session hands the sink each message's bytes as the DATA arrives, as
// pointers into the DATA chunk nghttp2 passes up (the bytes the transport delivered: the AF_XDP
// frame's payload in order, or the socket read buffer), so a decoder can write tensor bytes
// straight from there into their slots. The session keeps the framing (prefix, message limit,
// compressed flag), flow control, deadlines and the one-message rule of unary calls.
// Threading: the connection's loop thread; one sink per call, destroyed with the call.
class GrpcMessageSink {
 public:
  virtual ~GrpcMessageSink() = default;
  // A request message of `size` bytes begins (its prefix is read; size within the limit).
  virtual void begin(uint32_t size) = 0;
  // Its next `len` bytes, in order (the pieces add up to `size`); valid only during the call.
  // `copied`: net::Transport::deliveringCopy() while they were delivered (the transport had
  // copied them into a buffer of its own). A non-OK status answers the call now (refused before
  // copying, or malformed): the session ends the call with it and discards the rest unread,
  // still acknowledging it for flow control.
  virtual absl::Status piece(const char* data, size_t len, bool copied) = 0;
  // The message is complete: answer it through `respond`, exactly once (as GrpcServices::call).
  virtual void end(GrpcCall& call, GrpcRespond respond) = 0;
  // Memory the sink holds for the message in progress (counted against the connection budget).
  virtual size_t bufferedBytes() const = 0;
  // Message bytes it gathered into a buffer of its own (cumulative; Http2SessionStats).
  virtual uint64_t gatheredBytes() const = 0;
};

class GrpcServices {
 public:
  virtual ~GrpcServices() = default;
  // A sink for the request messages of `call` that span DATA chunks, for a method with
  // streaming_decode (opened at the first such message; `call` outlives the sink).
  virtual std::unique_ptr<GrpcMessageSink> openSink(const GrpcMethod& /*method*/,
                                                    GrpcCall& /*call*/) {
    return nullptr;
  }
  // Maps a :path ("/inference.GRPCInferenceService/ModelInfer") to a method.
  virtual GrpcMethod resolve(std::string_view path) const = 0;
  // One request message of `method` (valid only during the call: decode it before returning).
  // `respond` must be called exactly once per call() (for streaming methods: once per message).
  virtual void call(const GrpcMethod& method, GrpcCall& call, std::string_view message,
                    GrpcRespond respond) = 0;
};

}  // namespace infergate::frontend
