// SipHash-2-4 against the reference vectors (Aumasson & Bernstein, vectors.h: key 00..0f,
// message 00 01 02 ... of each length), and the secrets helper.
#include "common/siphash.h"

#include <gtest/gtest.h>

#include <cstring>

#include "common/secret.h"

namespace infergate::common {
namespace {

__u64 reference(size_t len) {
  ig_sipkey k{};
  unsigned char kb[16];
  for (int i = 0; i < 16; ++i) kb[i] = static_cast<unsigned char>(i);
  std::memcpy(&k, kb, 16);
  __u64 w[4] = {};
  unsigned char* m = reinterpret_cast<unsigned char*>(w);
  for (size_t i = 0; i < len; ++i) m[i] = static_cast<unsigned char>(i);
  return ig_siphash(&k, w, static_cast<__u32>(len / 8));
}

TEST(SipHash, ReferenceVectors) {
  EXPECT_EQ(reference(0), 0x726fdb47dd0e0e31ull);
  EXPECT_EQ(reference(8), 0x93f5f5799a932462ull);
  EXPECT_EQ(reference(16), 0x3f2acc7f57c29bdbull);
}

TEST(SipHash, KeyChangesEverything) {
  __u64 w[2] = {1, 2};
  const ig_sipkey a{1, 2}, b{1, 3};
  EXPECT_NE(ig_siphash(&a, w, 2), ig_siphash(&b, w, 2));
}

TEST(Secret, RandomKeysDiffer) {
  const ig_sipkey a = randomSipKey(), b = randomSipKey();
  EXPECT_FALSE(a.k0 == b.k0 && a.k1 == b.k1);
}

}  // namespace
}  // namespace infergate::common
