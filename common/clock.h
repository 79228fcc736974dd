#pragma once
// The one time source of the process: CLOCK_MONOTONIC in nanoseconds. Code that needs the time
// takes a Clock& (tests hand it a ManualClock and move it by hand); code with no clock to hand
// calls monotonicNs().
// Threading: every method may be called from any thread.

#include <atomic>
#include <cstdint>

namespace infergate::common {

// CLOCK_MONOTONIC in nanoseconds.
uint64_t monotonicNs();

class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t nowNs() const = 0;
};

// CLOCK_MONOTONIC (monotonicNs()).
class SteadyClock final : public Clock {
 public:
  uint64_t nowNs() const override { return monotonicNs(); }
  static SteadyClock& instance();
};

// A clock tests move by hand.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(uint64_t start_ns = 1'000'000'000) : now_(start_ns) {}
  uint64_t nowNs() const override { return now_.load(std::memory_order_relaxed); }
  void advanceNs(uint64_t ns) { now_.fetch_add(ns, std::memory_order_relaxed); }
  void advanceUs(uint64_t us) { advanceNs(us * 1000); }
  void setNs(uint64_t ns) { now_.store(ns, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> now_;
};

}  // namespace infergate::common
