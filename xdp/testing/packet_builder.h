#pragma once
// A small packet builder for XDP fixtures: Ethernet, one or two VLAN tags, IPv4 (with
// options) or IPv6, TCP (with options) or raw L4 bytes, with correct lengths and checksums.
// Independent of classifier.h on purpose: the fixtures check the program against it.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace infergate::xdp::testing {

inline constexpr uint8_t kFin = 0x01, kSyn = 0x02, kRst = 0x04, kPsh = 0x08, kAck = 0x10,
                         kUrg = 0x20;

struct PacketSpec {
  std::array<uint8_t, 6> dst_mac{0x02, 0, 0, 0, 0, 0x01};
  std::array<uint8_t, 6> src_mac{0x02, 0, 0, 0, 0, 0x02};
  std::vector<uint16_t> vlans;       // TCIs, outermost first (0x8100 each)
  std::optional<uint16_t> ethertype; // overrides the IP ethertype
  bool ipv6 = false;
  std::string src = "10.0.0.2";      // client
  std::string dst = "10.0.0.1";      // gateway
  std::vector<uint8_t> ip_options;   // IPv4; padded to a multiple of 4
  uint8_t ip_proto = 6;              // IPv4 protocol / IPv6 next header
  uint8_t ttl = 64;
  uint16_t ip_id = 0;
  uint16_t frag = 0x4000;            // IPv4 flags + fragment offset (DF)
  uint16_t sport = 40000, dport = 8000;
  uint32_t seq = 1000, ack = 5000;
  uint8_t flags = kAck | kPsh;
  uint16_t window = 65535;
  std::vector<uint8_t> tcp_options;  // padded to a multiple of 4
  std::string payload;
  std::optional<std::vector<uint8_t>> raw_l4;  // replaces the TCP header and payload
};

std::vector<uint8_t> buildPacket(const PacketSpec& s);

// The RST (with ACK) that the program must answer `s` with.
PacketSpec rstFor(const PacketSpec& s);
// A client segment of the default flow (10.0.0.2 -> 10.0.0.1:8000) from `sport`; a SYN has ack 0.
PacketSpec flow(uint16_t sport, uint8_t flags, std::string payload = "",
                std::string src = "10.0.0.2");
// The headers of the program's answer to `s`: MACs, addresses and ports swapped, VLAN tags kept,
// TTL 64, DF, no IP options (the TCP fields are left for the caller).
PacketSpec replyTo(const PacketSpec& s);

// Internet checksum over bytes (returns the folded one's-complement sum, network order value).
uint16_t inetChecksum(const uint8_t* p, size_t n, uint32_t initial = 0);
// True when the IPv4 header checksum and the TCP checksum of a frame verify.
bool checksumsValid(const std::vector<uint8_t>& frame);

std::string hex(const std::vector<uint8_t>& b);

}  // namespace infergate::xdp::testing
