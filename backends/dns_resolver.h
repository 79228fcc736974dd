#pragma once
// DNS for `dns:///name:port` backend endpoints (a Kubernetes headless Service): A and AAAA
// records of a name through c-ares, asynchronous inside, with one blocking entry point for the
// pool's resolver thread (backends/pool.h) — never called on a reactor or the dispatcher.
//
// Ownership/threading: a DnsResolver owns one c-ares channel and is used by one thread at a time.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace infergate::backends {

// `dns:///name:port` -> name, port. INVALID_ARGUMENT naming what is wrong; nullopt-like
// NOT_FOUND when `entry` does not start with dns:// (a plain host:port).
struct DnsTargetSpec {
  std::string name;
  uint16_t port = 0;
};
bool isDnsEntry(std::string_view entry);
absl::StatusOr<DnsTargetSpec> parseDnsEntry(std::string_view entry);

// "ip:port" for IPv4, "[ip]:port" for IPv6.
std::string joinHostPort(const std::string& ip, uint16_t port);

class DnsResolver {
 public:
  struct Options {
    std::string server;          // "ip:port" (or "ip", port 53); empty: /etc/resolv.conf's servers
    uint64_t timeout_ms = 2000;  // a whole resolve() at most
  };
  // The outcome for one name. `status`: OK with addresses; NOT_FOUND for NXDOMAIN or no A/AAAA
  // record (an empty answer); UNAVAILABLE for a failure (timeout, refused, server failure).
  struct Answer {
    absl::Status status;
    std::vector<std::string> addresses;  // IPv4 and IPv6 text, sorted, deduplicated
    uint32_t min_ttl_s = 0;              // smallest TTL of the records (0: unknown)
  };

  // INVALID_ARGUMENT for a bad server, INTERNAL when c-ares cannot start.
  static absl::StatusOr<std::unique_ptr<DnsResolver>> create(const Options& options);
  ~DnsResolver();
  DnsResolver(const DnsResolver&) = delete;
  DnsResolver& operator=(const DnsResolver&) = delete;

  // Resolves every name at once (A and AAAA each), waiting up to timeout_ms on the calling
  // thread; answers parallel to `names`.
  std::vector<Answer> resolve(const std::vector<std::string>& names);

 private:
  struct Impl;
  explicit DnsResolver(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace infergate::backends
