#pragma once
// A common::Clock that reads a variable the test moves by hand, for code that is also handed
// the time as an argument (TcpStack::poll(now)): the test keeps one `now` for both.

#include <cstdint>

#include "common/clock.h"

namespace infergate::mocks {

class VariableClock final : public common::Clock {
 public:
  explicit VariableClock(const uint64_t& now) : now_(now) {}
  uint64_t nowNs() const override { return now_; }

 private:
  const uint64_t& now_;
};

}  // namespace infergate::mocks
