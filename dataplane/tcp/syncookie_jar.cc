#include "dataplane/tcp/syncookie_jar.h"

#include "common/secret.h"

namespace infergate::dataplane::tcp {

SynCookieJar::SynCookieJar(uint64_t rotate_ns)
    : SynCookieJar(common::randomSipKey(), common::randomSipKey(), 0, rotate_ns) {}

SynCookieJar::SynCookieJar(const ig_sipkey& k0, const ig_sipkey& k1, uint32_t gen,
                           uint64_t rotate_ns)
    : gen_(gen), rotate_ns_(rotate_ns) {
  store(0, k0);
  store(1, k1);
}

void SynCookieJar::store(uint32_t slot, const ig_sipkey& k) {
  k_[slot][0].store(k.k0, std::memory_order_relaxed);
  k_[slot][1].store(k.k1, std::memory_order_relaxed);
}

ig_cookie_keys SynCookieJar::snapshot() const {
  ig_cookie_keys out{};
  out.gen = gen_.load(std::memory_order_acquire);  // pairs with the release in rotate()
  for (int s = 0; s < 2; ++s) {
    out.key[s].k0 = k_[s][0].load(std::memory_order_relaxed);
    out.key[s].k1 = k_[s][1].load(std::memory_order_relaxed);
  }
  return out;
}

void SynCookieJar::rotate() {
  std::lock_guard<std::mutex> lock(mu_);
  const uint32_t next = gen_.load(std::memory_order_relaxed) + 1;
  store(next & 1, common::randomSipKey());  // the slot of the previous (expiring) key
  gen_.store(next, std::memory_order_release);  // pairs with the acquire in snapshot()
  rotations_.fetch_add(1, std::memory_order_relaxed);
  if (listener_) listener_(snapshot());
}

void SynCookieJar::maybeRotate(uint64_t now_ns) {
  uint64_t due = next_rotation_.load(std::memory_order_relaxed);
  if (due == 0) {
    next_rotation_.compare_exchange_strong(due, now_ns + rotate_ns_, std::memory_order_relaxed);
    return;
  }
  if (now_ns < due) return;
  if (next_rotation_.compare_exchange_strong(due, now_ns + rotate_ns_,
                                             std::memory_order_relaxed)) {
    rotate();
  }
}

void SynCookieJar::setListener(std::function<void(const ig_cookie_keys&)> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  listener_ = std::move(fn);
}

}  // namespace infergate::dataplane::tcp
