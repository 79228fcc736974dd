#pragma once
// Arrival schedules for open-loop load: the intended send time of every request, fixed in
// advance and independent of how fast the server answers (so a stalled server cannot slow the
// generator down and hide its own stall: no coordinated omission).

#include <cstdint>
#include <random>

namespace infergate::bench {

enum class Arrival { kConstant, kPoisson };

class ArrivalSchedule {
 public:
  // `rate`: requests per second (> 0). `phase_ns`: offset of the first arrival (constant
  // schedules of several threads are staggered with it). `seed`: Poisson draws.
  ArrivalSchedule(Arrival kind, double rate, uint64_t seed, uint64_t phase_ns = 0);

  // Offset in ns from the schedule's start of the next intended send; non-decreasing.
  // Constant: phase + k / rate, computed from k (no drift). Poisson: exponential gaps of mean
  // 1 / rate.
  uint64_t next();
  double rate() const { return rate_; }

 private:
  Arrival kind_;
  double rate_;
  double interval_ns_;
  uint64_t phase_ns_;
  uint64_t k_ = 0;
  double t_ns_;
  std::mt19937_64 rng_;
  std::exponential_distribution<double> exp_;
};

}  // namespace infergate::bench
