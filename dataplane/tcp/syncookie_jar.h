#pragma once
// The live SYN-cookie keys (dataplane/tcp/syncookie.h), shared by every reactor's TcpStack and
// mirrored into the XDP program's ig_cookie map by the control plane. Two keys live at once:
// the current one signs, the current and the previous one validate; rotate() replaces the
// older one. A cookie therefore stays valid for one to two rotation periods.
//
// Threading: snapshot() from any thread (relaxed atomics per word, no lock); rotate() and
// maybeRotate() from any thread (one rotation wins per period). A validation racing a rotation
// may read a half-written *expiring* key and reject that one cookie; the current key is never
// written while it is current.

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>

#include "common/siphash.h"
#include "dataplane/tcp/syncookie.h"

namespace infergate::dataplane::tcp {

class SynCookieJar {
 public:
  // Fresh random keys (getrandom). rotate_ns: the rotation period maybeRotate() keeps.
  explicit SynCookieJar(uint64_t rotate_ns = 60'000'000'000ull);
  // Fixed keys (tests).
  SynCookieJar(const ig_sipkey& k0, const ig_sipkey& k1, uint32_t gen,
               uint64_t rotate_ns = 60'000'000'000ull);

  ig_cookie_keys snapshot() const;
  // Replaces the older key with a fresh random one and makes it current; calls the listener.
  void rotate();
  // Rotates when the period has passed since the last rotation (first call: starts the clock).
  void maybeRotate(uint64_t now_ns);
  // Called after every rotation with the new keys (e.g. to update the XDP program's map).
  void setListener(std::function<void(const ig_cookie_keys&)> fn);
  uint64_t rotations() const { return rotations_.load(std::memory_order_relaxed); }

 private:
  void store(uint32_t slot, const ig_sipkey& k);
  std::atomic<uint64_t> k_[2][2];
  std::atomic<uint32_t> gen_;
  std::atomic<uint64_t> next_rotation_{0};
  std::atomic<uint64_t> rotations_{0};
  uint64_t rotate_ns_;
  std::mutex mu_;  // serialises rotate() and the listener
  std::function<void(const ig_cookie_keys&)> listener_;
};

}  // namespace infergate::dataplane::tcp
