#pragma once
// HTTP/1.1 and HTTP/2 (h2c with prior knowledge) on the same port: a net::Session that holds the
// first bytes of a connection until it can tell the HTTP/2 connection preface
// ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", RFC 9113 3.4) from an HTTP/1.x request line, then
// creates the real session with the matching factory, hands it the bytes seen so far, and
// forwards everything after that to it.
//
// The decision is made as soon as the received bytes stop being a prefix of the preface (at
// the first byte for every HTTP/1.1 method but "PRI"), or when the 24-byte preface is
// complete. A connection that closes or idles out before deciding gets no session (the
// transport closes it; `undecided_timeout_ns` bounds the wait).
//
// Threading: the transport's loop thread, as every net::Session.

#include <cstdint>
#include <memory>
#include <string>

#include "net/session.h"

namespace infergate::frontend {

class SniffingSession : public net::Session {
 public:
  static constexpr std::string_view kHttp2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

  SniffingSession(net::Transport& transport, net::SessionFactory http1, net::SessionFactory http2,
                  uint64_t undecided_timeout_ns = 10'000'000'000ull);

  void onData(const char* data, size_t len) override;
  void onPeerClosed() override;
  void onTick(uint64_t now_ns) override;
  void onClosed() override;
  bool idle() const override;
  void onDrain() override;

  // Which protocol was chosen (kUndecided until enough bytes came).
  enum class Choice { kUndecided, kHttp1, kHttp2 };
  Choice choice() const { return choice_; }

 private:
  void decide(Choice c);

  net::Transport* transport_;
  net::SessionFactory http1_, http2_;
  uint64_t undecided_timeout_ns_;
  uint64_t first_tick_ns_ = 0;
  std::string held_;  // bytes received before deciding (at most the preface's length)
  std::shared_ptr<net::Session> inner_;
  Choice choice_ = Choice::kUndecided;
  bool peer_closed_ = false;
  bool draining_ = false;
  bool closed_ = false;
};

// A net::SessionFactory for `protocol: auto` listeners.
net::SessionFactory makeSniffingSessionFactory(net::SessionFactory http1, net::SessionFactory http2);

}  // namespace infergate::frontend
