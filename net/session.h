#pragma once
// The seam between transports (dataplane/: kernel sockets, infergate's own TCP over AF_XDP)
// and protocol sessions (frontend/: HTTP/1.1, HTTP/2 + gRPC, the sniffing session that picks
// one). Both sides depend on this header; neither on the other (docs/ARCHITECTURE.md).
//
// A transport owns one connection's byte stream and drives a Session with what arrives; the
// session answers through the Transport. Everything here runs on the connection's reactor
// (loop) thread, except Loop::post, which any thread may call.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/cidr.h"
#include "net/ingress_tag.h"

namespace infergate::net {

// A reactor's event loop, as protocol code sees it.
class Loop {
 public:
  virtual ~Loop() = default;
  // Runs `fn` on the loop thread soon. Thread-safe; the only call allowed off the loop thread.
  virtual void post(std::function<void()> fn) = 0;
  virtual bool inLoopThread() const = 0;
  // Monotonic nanoseconds, refreshed once per loop iteration (cheap).
  virtual uint64_t nowNs() const = 0;
  // Index of the reactor (0..n-1), for per-core state and metrics.
  virtual int index() const = 0;
};

// One connection's outgoing side, as a session sees it. Valid until Session::onClosed().
class Transport {
 public:
  virtual ~Transport() = default;
  // Queues bytes for the peer, in order.
  virtual void send(std::string_view bytes) = 0;
  // Closes the connection once everything sent so far has been flushed (lingering close: the
  // transport keeps reading and discarding for a while so the peer sees the response, not a
  // reset).
  virtual void closeAfterFlush() = 0;
  // Stops/resumes delivering received bytes (back-pressure while responses are pending).
  virtual void pauseReading(bool paused) = 0;
  virtual Loop& loop() = 0;
  // Bytes queued but not yet written to the peer.
  virtual size_t pendingBytes() const = 0;
  // The ingress tag of the request starting now, when an ingress filter runs; nullopt otherwise.
  virtual std::optional<IngressTag> ingressTag() { return std::nullopt; }
  // The peer's IP address (IPv4 v4-mapped, common/cidr.h); nullopt when not known. Fixed for
  // the connection's life (sessions read it once: trusted sources for client priority).
  virtual std::optional<common::IpBytes> peerAddress() const { return std::nullopt; }
  // True while the transport is inside Session::onData() with bytes it had first copied into a
  // buffer of its own (infergate's TCP stack: data that arrived out of order and could not be
  // kept in its frames, or arrived while the session paused reading). A session adds such
  // bytes of a tensor to the request's InferRequest::received_copy_bytes (honest copy
  // accounting, docs/BATCHING.md "One copy"). False for kernel sockets (the read from the
  // socket is the kernel's copy) and for bytes delivered straight from a received frame.
  virtual bool deliveringCopy() const { return false; }
};

// A protocol session on one connection.
class Session {
 public:
  virtual ~Session() = default;
  // Bytes received from the peer, in order, any split.
  virtual void onData(const char* data, size_t len) = 0;
  // The peer closed its sending side (FIN). Pending responses may still be sent.
  virtual void onPeerClosed() = 0;
  // Periodic tick (timeouts). `now_ns` is Loop::nowNs().
  virtual void onTick(uint64_t now_ns) = 0;
  // The transport is gone (closed or reset); the session must not touch it again.
  virtual void onClosed() = 0;
  // No request in progress and no response pending: the connection may be closed without
  // losing anything (used when draining on shutdown).
  virtual bool idle() const = 0;
  // The server is draining (SIGTERM): stop taking new requests, finish the ones in flight
  // (HTTP/2 sends GOAWAY). Idle connections are closed by the transport.
  virtual void onDrain() {}
};

// The answer path from any thread back to a session: a callback that runs
// `(owner->*deliver)(key, value)` on `loop`'s thread if the owner still exists (directly when
// called on the loop thread, through Loop::post otherwise). Sessions hand one to the model per
// request (key: the request's sequence number or stream id).
template <class Owner, class Key, class Value>
std::function<void(Value)> answerOnLoop(Loop& loop, std::weak_ptr<Owner> owner, Key key,
                                        void (Owner::*deliver)(Key, Value&&)) {
  Loop* l = &loop;
  return [l, owner = std::move(owner), key, deliver](Value value) {
    if (l->inLoopThread()) {
      if (std::shared_ptr<Owner> self = owner.lock()) ((*self).*deliver)(key, std::move(value));
      return;
    }
    l->post([owner, key, deliver, value = std::move(value)]() mutable {
      if (std::shared_ptr<Owner> self = owner.lock()) ((*self).*deliver)(key, std::move(value));
    });
  };
}

// Creates the session for a newly accepted connection on a listener.
using SessionFactory = std::function<std::shared_ptr<Session>(Transport& transport)>;

}  // namespace infergate::net
