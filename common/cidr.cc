#include "common/cidr.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <charconv>
#include <cstring>

#include "fmt/format.h"

namespace infergate::common {

namespace {
bool isV4Mapped(const IpBytes& a) {
  for (int i = 0; i < 10; ++i) {
    if (a[i] != 0) return false;
  }
  return a[10] == 0xff && a[11] == 0xff;
}

void maskTo(IpBytes& a, uint32_t prefix) {
  for (uint32_t i = 0; i < 16; ++i) {
    const uint32_t bit = i * 8;
    if (bit >= prefix) {
      a[i] = 0;
    } else if (prefix - bit < 8) {
      a[i] &= static_cast<uint8_t>(0xff00u >> (prefix - bit));
    }
  }
}
}  // namespace

bool Cidr::contains(const IpBytes& a) const {
  const uint32_t whole = prefix / 8;
  if (std::memcmp(a.data(), addr.data(), whole) != 0) return false;
  const uint32_t rest = prefix % 8;
  if (rest == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff00u >> rest);
  return (a[whole] & mask) == addr[whole];
}

std::string Cidr::toString() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if (isV4Mapped(addr) && prefix >= 96) {
    inet_ntop(AF_INET, addr.data() + 12, buf, sizeof buf);
    return fmt::format("{}/{}", buf, prefix - 96);
  }
  inet_ntop(AF_INET6, addr.data(), buf, sizeof buf);
  return fmt::format("{}/{}", buf, prefix);
}

absl::StatusOr<Cidr> parseCidr(std::string_view text) {
  std::string_view host = text;
  int len = -1;
  if (const size_t slash = text.find('/'); slash != std::string_view::npos) {
    host = text.substr(0, slash);
    const std::string_view n = text.substr(slash + 1);
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), len);
    if (n.empty() || ec != std::errc() || end != n.data() + n.size() || len < 0) {
      return absl::InvalidArgumentError(fmt::format("'{}': bad prefix length", text));
    }
  }
  const std::string h(host);
  Cidr c;
  in_addr a4;
  in6_addr a6;
  if (inet_pton(AF_INET, h.c_str(), &a4) == 1) {
    if (len < 0) len = 32;
    if (len > 32) return absl::InvalidArgumentError(fmt::format("'{}': prefix over 32", text));
    c.addr[10] = c.addr[11] = 0xff;
    std::memcpy(c.addr.data() + 12, &a4, 4);
    c.prefix = 96 + static_cast<uint32_t>(len);
  } else if (inet_pton(AF_INET6, h.c_str(), &a6) == 1) {
    if (len < 0) len = 128;
    if (len > 128) return absl::InvalidArgumentError(fmt::format("'{}': prefix over 128", text));
    std::memcpy(c.addr.data(), &a6, 16);
    c.prefix = static_cast<uint32_t>(len);
  } else {
    return absl::InvalidArgumentError(fmt::format("'{}' is not an IPv4 or IPv6 CIDR", text));
  }
  maskTo(c.addr, c.prefix);
  return c;
}

std::optional<IpBytes> ipFromSockaddr(const sockaddr* sa) {
  if (sa == nullptr) return std::nullopt;
  if (sa->sa_family == AF_INET) {
    sockaddr_in in;
    std::memcpy(&in, sa, sizeof in);
    return ipv4Bytes(in.sin_addr.s_addr);
  }
  if (sa->sa_family == AF_INET6) {
    sockaddr_in6 in6;
    std::memcpy(&in6, sa, sizeof in6);
    IpBytes b;
    std::memcpy(b.data(), &in6.sin6_addr, 16);
    return b;
  }
  return std::nullopt;
}

absl::StatusOr<CidrSet> CidrSet::parse(const std::vector<std::string>& texts) {
  std::vector<Cidr> out;
  out.reserve(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    absl::StatusOr<Cidr> c = parseCidr(texts[i]);
    if (!c.ok()) {
      return absl::InvalidArgumentError(fmt::format("[{}]: {}", i, std::string(c.status().message())));
    }
    out.push_back(*c);
  }
  return CidrSet(std::move(out));
}

bool CidrSet::contains(const IpBytes& a) const {
  for (const Cidr& c : cidrs_) {
    if (c.contains(a)) return true;
  }
  return false;
}

bool CidrSet::covers(const Cidr& x) const {
  for (const Cidr& c : cidrs_) {
    if (c.covers(x)) return true;
  }
  return false;
}

}  // namespace infergate::common
