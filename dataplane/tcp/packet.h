#pragma once
// Ethernet / IPv4 / IPv6 / TCP parsing and building, used by the stack and by the test
// clients (the same builder makes both sides' frames). No allocation; all multi-byte fields
// are converted to host order in the parsed structs.
//
// One of two L2-L4 parsers, on purpose (docs/XDP.md "Two parsers"): xdp/classifier.h's
// ig_parse_l2l4 runs first, inside the XDP program, on every frame of the wire; this one runs
// in the afxdp TCP stack on what that program admitted, verifies checksums and reads every
// TCP option. The Internet checksum both use is common/checksum.h.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "dataplane/tcp/counters.h"

namespace infergate::dataplane::tcp {

constexpr uint8_t kFin = 0x01, kSyn = 0x02, kRst = 0x04, kPsh = 0x08, kAck = 0x10;
constexpr size_t kEthHeader = 14;
constexpr uint16_t kEtherIpv4 = 0x0800, kEtherIpv6 = 0x86DD, kEtherArp = 0x0806;

// A connection's identity. "local" is the side that parses (the receiver of the frame) or
// builds (the sender). IPv4 addresses use the first 4 bytes; unused bytes are zero so the key
// can be hashed and compared as raw bytes.
struct FlowKey {
  uint8_t local_ip[16] = {};
  uint8_t remote_ip[16] = {};
  uint16_t local_port = 0;
  uint16_t remote_port = 0;
  uint8_t v6 = 0;
  uint8_t pad[3] = {};

  bool operator==(const FlowKey& o) const { return std::memcmp(this, &o, sizeof(*this)) == 0; }
  FlowKey reversed() const;
};
static_assert(sizeof(FlowKey) == 40);

constexpr int kMaxSackBlocks = 4;

struct TcpOptionValues {
  bool has_mss = false;
  uint16_t mss = 0;
  int8_t wscale = -1;  // -1: absent
  bool sack_permitted = false;
  bool has_ts = false;
  uint32_t ts_val = 0;
  uint32_t ts_ecr = 0;
  uint8_t num_sack = 0;
  uint32_t sack[kMaxSackBlocks][2] = {};  // [start, end)
};

struct Segment {
  uint8_t src_mac[6] = {};
  uint8_t dst_mac[6] = {};
  FlowKey key;  // local = destination of the frame, remote = its source
  uint32_t seq = 0;
  uint32_t ack = 0;
  uint8_t flags = 0;
  uint16_t window = 0;  // as on the wire (unscaled)
  TcpOptionValues opt;
  const uint8_t* payload = nullptr;
  uint32_t payload_len = 0;
  uint8_t ttl = 0;
};

enum class FrameKind : uint8_t { kTcp, kArp, kIcmp, kOtherIp, kDropped };

// Parses one Ethernet frame. On kDropped, `why` says why. Checksums (IPv4 header, TCP) are
// verified when `verify_checksums`.
FrameKind parseFrame(const uint8_t* frame, size_t len, bool verify_checksums, Segment& seg,
                     DropReason& why);
// The same with each checksum chosen apart: the stack skips one only where the NIC verified it
// (packet_io.h, kMetaRx*ChecksumGood).
FrameKind parseFrame(const uint8_t* frame, size_t len, bool verify_ip_checksum,
                     bool verify_tcp_checksum, Segment& seg, DropReason& why);

// What to put in a segment being built.
struct SegmentSpec {
  const uint8_t* src_mac = nullptr;
  const uint8_t* dst_mac = nullptr;
  const FlowKey* key = nullptr;  // local = sender
  uint32_t seq = 0;
  uint32_t ack = 0;
  uint8_t flags = 0;
  uint16_t window = 0;
  uint16_t mss = 0;         // 0: no MSS option
  int8_t wscale = -1;       // -1: no window-scale option
  bool sack_permitted = false;
  bool has_ts = false;
  uint32_t ts_val = 0;
  uint32_t ts_ecr = 0;
  uint8_t num_sack = 0;
  const uint32_t (*sack)[2] = nullptr;
  uint8_t ttl = 64;
};

// The same value as common/checksum.h's ig_csum_partial(data, len, sum) (a 16-bit
// one's-complement sum of big-endian words, folded, plus `sum`), computed eight bytes a step:
// the stack's checksums of frames in and out.
uint32_t checksumPartial(const uint8_t* data, size_t len, uint32_t sum);

// Bytes of Ethernet + IP + TCP headers (with options) the spec produces.
size_t headerLength(const SegmentSpec& spec);
// Writes the headers into `buf` (at least headerLength() bytes) for a payload of
// `payload_len` bytes that the caller places at buf + the returned length, then calls
// finishSegment(). Returns the header length.
size_t writeHeaders(uint8_t* buf, const SegmentSpec& spec, uint32_t payload_len);
// How finishSegment leaves the checksums.
enum class TxChecksum : uint8_t {
  kSoftware,  // IPv4 header and TCP checksums computed: the frame is complete
  kOffload,   // for a NIC that completes them (packet_io.h, kMetaTxChecksumOffload): IPv4
              // header checksum 0, the TCP field holds the pseudo-header sum (not complemented)
};
// The TCP pseudo-header sum (addresses, protocol, TCP length), folded to 16 bits, not
// complemented: what kOffload leaves in the TCP checksum field.
uint16_t pseudoHeaderSum(const uint8_t* src, const uint8_t* dst, bool v6, uint32_t tcp_len);
// Computes the TCP checksum (and the IPv4 header checksum) once the payload is in place.
void finishSegment(uint8_t* buf, size_t header_len, uint32_t payload_len, bool v6,
                   TxChecksum mode = TxChecksum::kSoftware);
// Convenience: headers + payload + checksums; returns the frame length, 0 if cap is too small.
size_t buildSegment(uint8_t* buf, size_t cap, const SegmentSpec& spec, const uint8_t* payload,
                    uint32_t payload_len, TxChecksum mode = TxChecksum::kSoftware);

}  // namespace infergate::dataplane::tcp
