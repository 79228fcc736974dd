// CIDR parsing and matching (common/cidr.h): the trusted-source lists and the XDP CIDR rules.
#include "common/cidr.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

namespace infergate::common {
namespace {

IpBytes ip(const char* text) {
  absl::StatusOr<Cidr> c = parseCidr(text);
  EXPECT_TRUE(c.ok()) << text;
  return c->addr;
}

TEST(Cidr, ParsesAndPrintsBothFamilies) {
  EXPECT_EQ(parseCidr("10.1.2.3/8")->toString(), "10.0.0.0/8");  // host bits cleared
  EXPECT_EQ(parseCidr("192.0.2.7")->toString(), "192.0.2.7/32");
  EXPECT_EQ(parseCidr("2001:db8::1/32")->toString(), "2001:db8::/32");
  EXPECT_EQ(parseCidr("::1")->toString(), "::1/128");
  EXPECT_EQ(parseCidr("10.0.0.0/8")->prefix, 104u);
  EXPECT_EQ(parseCidr("0.0.0.0/0")->prefix, 96u);  // all of IPv4, not IPv6
}

TEST(Cidr, RefusesNonsense) {
  for (const char* bad : {"", "10.0.0.0/", "10.0.0.0/33", "::/129", "10.0.0.0/-1", "10.0.0.0/8x",
                          "example.com", "10.0.0.0/8/8", "1.2.3"}) {
    EXPECT_FALSE(parseCidr(bad).ok()) << bad;
  }
}

TEST(Cidr, ContainsRespectsThePrefixBitByBit) {
  const Cidr c = *parseCidr("10.64.0.0/10");
  EXPECT_TRUE(c.contains(ip("10.64.0.1")));
  EXPECT_TRUE(c.contains(ip("10.127.255.255")));
  EXPECT_FALSE(c.contains(ip("10.128.0.0")));
  EXPECT_FALSE(c.contains(ip("10.63.255.255")));
  EXPECT_FALSE(c.contains(ip("::ffff:b40:1")));  // 11.64.0.1
  EXPECT_FALSE(parseCidr("0.0.0.0/0")->contains(ip("2001:db8::1")));
  EXPECT_TRUE(parseCidr("::/0")->contains(ip("10.0.0.1")));  // every address
}

TEST(Cidr, SetCoversAndSockaddr) {
  absl::StatusOr<CidrSet> s = CidrSet::parse({"127.0.0.0/8", "::1"});
  ASSERT_TRUE(s.ok());
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_addr.s_addr = htonl(0x7f000005);
  std::optional<IpBytes> a = ipFromSockaddr(reinterpret_cast<sockaddr*>(&in));
  ASSERT_TRUE(a);
  EXPECT_TRUE(s->contains(*a));
  in.sin_addr.s_addr = htonl(0x0a000001);
  EXPECT_FALSE(s->contains(*ipFromSockaddr(reinterpret_cast<sockaddr*>(&in))));
  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  in6.sin6_addr = in6addr_loopback;
  EXPECT_TRUE(s->contains(*ipFromSockaddr(reinterpret_cast<sockaddr*>(&in6))));
  EXPECT_TRUE(s->covers(*parseCidr("127.1.0.0/16")));
  EXPECT_FALSE(s->covers(*parseCidr("126.0.0.0/7")));
  absl::StatusOr<CidrSet> bad = CidrSet::parse({"10.0.0.0/8", "nope"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("[1]"), std::string::npos);
}

}  // namespace
}  // namespace infergate::common
