#pragma once
// The two error helpers CONVENTIONS.md asks for, besides statuses:
//  - a broken invariant the process cannot survive: IG_CHECK(cond, "format {}", args) or
//    common::fatal(msg), a release assert (on in every build) that prints one line naming the
//    file, line and what broke, and aborts;
//  - a should-never-happen that can be survived: common::Anomaly, which logs the first
//    occurrence (warn), counts every one in infergate_anomalies_total{what="<name>"} and lets
//    the caller carry on.
// Threading: both are safe from any thread; Anomaly::record is one relaxed add after the first.

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "fmt/format.h"

namespace infergate::common {

class Counter;

// Prints "infergate: fatal: <msg>" to stderr and aborts.
[[noreturn]] void fatal(std::string_view msg);
[[noreturn]] void checkFailed(const char* file, int line, const char* condition,
                              std::string_view msg);

#define IG_CHECK(cond, ...)                                                                    \
  do {                                                                                         \
    if (!(cond)) [[unlikely]]                                                                  \
      ::infergate::common::checkFailed(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__)); \
  } while (0)

// One kind of should-never-happen, e.g. `static common::Anomaly stray("tcp_stray_ack");`.
// `name` becomes the metric's label: [a-z0-9_]+, unique per process.
class Anomaly {
 public:
  explicit Anomaly(std::string name);
  // Logs `what` the first time (with the name), counts every time.
  void record(std::string_view what);
  uint64_t count() const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  Counter& counter_;
  std::atomic<bool> logged_{false};
};

}  // namespace infergate::common
