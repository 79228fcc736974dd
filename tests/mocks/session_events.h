#pragma once
// The events other than data that session tests and fuzzers give a protocol session over a
// FakeTransport: time passing, and the peer's FIN.

#include <cstdint>

#include "net/session.h"
#include "tests/mocks/fake_transport.h"

namespace infergate::mocks {

// `quarters` quarter-seconds pass on the fake loop's clock, then the session's timer tick.
inline void advanceAndTick(FakeTransport& transport, net::Session& session, uint64_t quarters) {
  transport.loop_.now += quarters * 250'000'000;
  session.onTick(transport.loop_.now);
}

// The peer's FIN, delivered once: after the first call `peer_closed` is set and later calls do
// nothing.
inline void peerClosesOnce(bool& peer_closed, net::Session& session) {
  if (peer_closed) return;
  peer_closed = true;
  session.onPeerClosed();
}

}  // namespace infergate::mocks
