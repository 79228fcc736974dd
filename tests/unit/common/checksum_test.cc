// common/checksum.h: the one Internet checksum (the XDP program, the TCP stack, the packet
// builder all use it).
#include "common/checksum.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace {

// RFC 1071 section 3's example: the bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2.
TEST(Checksum, Rfc1071Example) {
  const __u8 b[] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
  EXPECT_EQ(ig_csum_partial(b, sizeof(b), 0), 0xddf2u);
  EXPECT_EQ(ig_csum_fold(ig_csum_partial(b, sizeof(b), 0)), static_cast<__u16>(~0xddf2u));
}

// Every length (odd ones padded with a zero byte) and a carried-in sum agree with the 16-bit
// reference loop; the checksum of data with its checksum in place is zero.
TEST(Checksum, PartialMatchesReferenceAndVerifies) {
  std::vector<__u8> data(301);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<__u8>(0xff - i * 7);
  for (size_t len = 0; len <= data.size(); ++len) {
    uint64_t ref = 0x1234;
    for (size_t i = 0; i + 1 < len; i += 2) {
      ref += static_cast<uint32_t>(data[i] << 8 | data[i + 1]);
    }
    if (len & 1) ref += static_cast<uint32_t>(data[len - 1]) << 8;
    while (ref >> 16) ref = (ref & 0xffff) + (ref >> 16);
    const __u32 sum = ig_csum_partial(data.data(), len, 0x1234);
    EXPECT_LE(sum, 0xffffu);
    EXPECT_EQ(ig_csum_fold(sum), static_cast<__u16>(~ref)) << len;
  }
  std::vector<__u8> even(data.begin(), data.begin() + 40);
  even[10] = even[11] = 0;
  const __u16 c = ig_csum_fold(ig_csum_partial(even.data(), even.size(), 0));
  even[10] = static_cast<__u8>(c >> 8);
  even[11] = static_cast<__u8>(c);
  EXPECT_EQ(ig_csum_fold(ig_csum_partial(even.data(), even.size(), 0)), 0);
}

// The BPF side adds 32-bit words as loaded (network order in memory); stored the same way the
// field is right (RFC 1071 2(B)): it equals the big-endian sum's checksum byte-swapped on a
// little-endian host.
TEST(Checksum, Add32OverLoadedWordsMatchesPartial) {
  const __u8 b[] = {0x45, 0x00, 0x00, 0x3c, 0x1c, 0x46, 0x40, 0x00,
                    0x40, 0x06, 0x00, 0x00, 0xac, 0x10, 0x0a, 0x63, 0xac, 0x10, 0x0a, 0x0c};
  __u32 sum = 0;
  for (size_t i = 0; i < sizeof(b); i += 4) {
    __u32 w;
    std::memcpy(&w, b + i, 4);
    sum = ig_csum_add32(sum, w);
  }
  const __u16 native = ig_csum_fold(sum);
  __u8 stored[2];
  std::memcpy(stored, &native, 2);
  const __u16 be = ig_csum_fold(ig_csum_partial(b, sizeof(b), 0));
  EXPECT_EQ(stored[0], be >> 8);
  EXPECT_EQ(stored[1], be & 0xff);
  EXPECT_EQ(be, 0xb1e6);  // the IPv4 header example checksum
}

}  // namespace
