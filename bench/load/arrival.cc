#include "bench/load/arrival.h"

namespace infergate::bench {

ArrivalSchedule::ArrivalSchedule(Arrival kind, double rate, uint64_t seed, uint64_t phase_ns)
    : kind_(kind),
      rate_(rate),
      interval_ns_(1e9 / rate),
      phase_ns_(phase_ns),
      t_ns_(static_cast<double>(phase_ns)),
      rng_(seed),
      exp_(1.0) {}

uint64_t ArrivalSchedule::next() {
  if (kind_ == Arrival::kConstant) {
    return phase_ns_ + static_cast<uint64_t>(static_cast<double>(k_++) * interval_ns_);
  }
  t_ns_ += exp_(rng_) * interval_ns_;
  return static_cast<uint64_t>(t_ns_);
}

}  // namespace infergate::bench
