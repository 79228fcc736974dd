#pragma once
// IP addresses and CIDR prefixes in one 16-byte form, as the XDP program keys its LPM trie:
// IPv6 as is, IPv4 as the v4-mapped address ::ffff:a.b.c.d with the prefix length + 96.
// Used for the trusted-source lists (client-supplied priority) and the XDP CIDR rules.
//
// Threading: plain values.

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace infergate::common {

using IpBytes = std::array<uint8_t, 16>;  // network order, IPv4 v4-mapped

struct Cidr {
  IpBytes addr{};       // bits past `prefix` are zero
  uint32_t prefix = 0;  // 0..128 over the 16-byte form (IPv4 /n is 96 + n)

  bool contains(const IpBytes& a) const;
  // `other` lies inside this prefix (equal included).
  bool covers(const Cidr& other) const { return other.prefix >= prefix && contains(other.addr); }
  std::string toString() const;  // "10.0.0.0/8", "2001:db8::/32"
  bool operator==(const Cidr&) const = default;
};

// "10.0.0.0/8", "192.0.2.7" (a host), "2001:db8::/32", "::1". Errors name the text and say
// what is wrong (not an address, prefix length not a number or too long).
absl::StatusOr<Cidr> parseCidr(std::string_view text);

// The address of an AF_INET / AF_INET6 socket address; nullopt for other families.
std::optional<IpBytes> ipFromSockaddr(const sockaddr* sa);
inline IpBytes ipv4Bytes(uint32_t addr_network_order) {
  IpBytes b{};
  b[10] = b[11] = 0xff;
  std::memcpy(b.data() + 12, &addr_network_order, 4);
  return b;
}

// A list of prefixes; contains() is a linear scan (lists are short: trusted sources).
class CidrSet {
 public:
  CidrSet() = default;
  explicit CidrSet(std::vector<Cidr> cidrs) : cidrs_(std::move(cidrs)) {}
  // Parses every entry; the error names the first bad one by index.
  static absl::StatusOr<CidrSet> parse(const std::vector<std::string>& texts);
  bool contains(const IpBytes& a) const;
  bool covers(const Cidr& c) const;  // some member covers `c`
  const std::vector<Cidr>& cidrs() const { return cidrs_; }
  bool empty() const { return cidrs_.empty(); }

 private:
  std::vector<Cidr> cidrs_;
};

}  // namespace infergate::common
