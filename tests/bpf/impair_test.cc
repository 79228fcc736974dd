// infergate's fault injector (tools/impair): the decision function on the host, the loaded
// program through BPF_PROG_TEST_RUN (its decisions equal the host's, packet by packet), and
// the attached program on a veth pair in a private network namespace, both hooks: frames sent
// with a packet socket on one end and read after tc ingress on the other arrive exactly in
// the order the host predicts (drops, duplicates, held frames released after the next one),
// the counters match, and the same seed gives the same arrivals.
// The BPF parts need root; they skip with a message otherwise.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/pkt_cls.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/bpf/netns_env.h"
#include "ig_impair.skel.h"
#include "tools/impair/impair_decide.h"
#include "tools/impair/impairer.h"

namespace infergate::impair {
namespace {

constexpr char kPinDir[] = "/sys/fs/bpf/igimp";

ig_impair_config sharedConfig(uint64_t seed, double drop, double dup, double reorder) {
  ImpairConfig c;
  c.seed = seed;
  c.drop = drop;
  c.duplicate = dup;
  c.reorder = reorder;
  return toShared(c);
}

// |observed - n p| within 5 standard deviations (plus one for tiny n p).
void expectBinomial(uint64_t observed, uint64_t n, double p, const char* what) {
  double mean = n * p, sd = std::sqrt(n * p * (1 - p));
  EXPECT_NEAR(static_cast<double>(observed), mean, 5 * sd + 1) << what << " over " << n << " packets";
}

// ---- the decision function (host) ----

TEST(ImpairDecide, FractionsMatchProbabilities) {
  const double d = 0.05, r = 0.01, u = 0.01;
  ig_impair_config c = sharedConfig(7, d, u, r);
  const uint64_t n = 1000000;
  uint64_t drops = 0, holds = 0, dups = 0;
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t x = ig_impair_decide(&c, i);
    drops += x == IG_IMP_DROP;
    holds += x == IG_IMP_HOLD;
    dups += x == IG_IMP_DUP;
  }
  expectBinomial(drops, n, d, "drops");
  expectBinomial(holds, n, (1 - d) * r, "holds");
  expectBinomial(dups, n, (1 - d) * (1 - r) * u, "duplicates");
}

TEST(ImpairDecide, SameSeedSameDecisionsOtherSeedOthers) {
  ig_impair_config a = sharedConfig(42, 0.2, 0.1, 0.1), b = a, other = sharedConfig(43, 0.2, 0.1, 0.1);
  int differ = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    ASSERT_EQ(ig_impair_decide(&a, i), ig_impair_decide(&b, i)) << i;
    differ += ig_impair_decide(&a, i) != ig_impair_decide(&other, i);
  }
  EXPECT_GT(differ, 1000);
}

TEST(ImpairDecide, ZeroNeverOneAlways) {
  ig_impair_config never = sharedConfig(1, 0, 0, 0), always_drop = sharedConfig(1, 1, 0, 0),
                   always_hold = sharedConfig(1, 0, 0, 1), always_dup = sharedConfig(1, 0, 1, 0);
  for (uint64_t i = 0; i < 100000; ++i) {
    ASSERT_EQ(ig_impair_decide(&never, i), uint32_t{IG_IMP_PASS});
    ASSERT_EQ(ig_impair_decide(&always_drop, i), uint32_t{IG_IMP_DROP});
    ASSERT_EQ(ig_impair_decide(&always_hold, i), uint32_t{IG_IMP_HOLD});
    ASSERT_EQ(ig_impair_decide(&always_dup, i), uint32_t{IG_IMP_DUP});
  }
  EXPECT_FALSE(probabilityToThreshold(1.5).ok());
  EXPECT_FALSE(probabilityToThreshold(-0.1).ok());
  EXPECT_FALSE(probabilityToThreshold(std::nan("")).ok());
  EXPECT_EQ(*probabilityToThreshold(0.5), 0x80000000u);
}

// ---- frames ----

std::vector<uint8_t> udpFrame(const uint8_t dst_mac[6], uint32_t seq, uint8_t proto = IPPROTO_UDP,
                              uint16_t ethertype = ETH_P_IP) {
  std::vector<uint8_t> f(14 + 20 + 8 + 32, 0);
  std::memcpy(f.data(), dst_mac, 6);
  const uint8_t src[6] = {0x02, 0, 0, 0, 0, 1};
  std::memcpy(f.data() + 6, src, 6);
  f[12] = ethertype >> 8;
  f[13] = ethertype & 0xff;
  uint8_t* ip = f.data() + 14;
  ip[0] = 0x45;
  uint16_t tot = htons(static_cast<uint16_t>(f.size() - 14));
  std::memcpy(ip + 2, &tot, 2);
  ip[8] = 64;
  ip[9] = proto;
  const uint8_t saddr[4] = {10, 99, 0, 1}, daddr[4] = {10, 99, 0, 2};
  std::memcpy(ip + 12, saddr, 4);
  std::memcpy(ip + 16, daddr, 4);
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += (ip[i] << 8) | ip[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  uint16_t csum = htons(static_cast<uint16_t>(~sum));
  std::memcpy(ip + 10, &csum, 2);
  uint8_t* udp = ip + 20;
  udp[0] = 0x30, udp[1] = 0x39, udp[2] = 0x30, udp[3] = 0x3a;
  uint16_t ulen = htons(8 + 32);
  std::memcpy(udp + 4, &ulen, 2);
  uint32_t nseq = htonl(seq);
  std::memcpy(udp + 8, &nseq, 4);
  return f;
}

// ---- the program through BPF_PROG_TEST_RUN ----

struct Skel {
  ig_impair* s = nullptr;
  ~Skel() {
    if (s) ig_impair__destroy(s);
  }
};

uint64_t sumCounter(ig_impair* s, uint32_t which) {
  std::vector<uint64_t> v(static_cast<size_t>(libbpf_num_possible_cpus()));
  if (bpf_map_lookup_elem(bpf_map__fd(s->maps.ig_imp_counters), &which, v.data()) != 0) return ~0ull;
  uint64_t t = 0;
  for (uint64_t x : v) t += x;
  return t;
}

int runOnce(int prog_fd, std::vector<uint8_t>& frame) {
  LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(),
              .data_size_in = static_cast<uint32_t>(frame.size()));
  int err = bpf_prog_test_run_opts(prog_fd, &opts);
  return err ? -1000 + err : static_cast<int>(opts.retval);
}

TEST(ImpairProgTestRun, DecisionsEqualTheHostsPacketByPacket) {
  SKIP_WITHOUT_NETNS();
  Skel skel;
  skel.s = ig_impair__open_and_load();
  ASSERT_NE(skel.s, nullptr) << "loading impair.bpf.c: " << strerror(errno);
  ig_impair_config cfg = sharedConfig(12345, 0.3, 0.2, 0);
  uint32_t zero = 0;
  ASSERT_EQ(bpf_map_update_elem(bpf_map__fd(skel.s->maps.ig_imp_config), &zero, &cfg, BPF_ANY), 0);
  int fd = bpf_program__fd(skel.s->progs.ig_impair);
  const uint8_t mac[6] = {0x02, 0, 0, 0, 0, 2};
  const uint64_t n = 5000;
  uint64_t drops = 0, dups = 0;
  for (uint64_t i = 0; i < n; ++i) {
    auto frame = udpFrame(mac, static_cast<uint32_t>(i));
    uint32_t expect = ig_impair_decide(&cfg, i);
    drops += expect == IG_IMP_DROP;
    dups += expect == IG_IMP_DUP;
    ASSERT_EQ(runOnce(fd, frame), expect == IG_IMP_DROP ? TC_ACT_STOLEN : TC_ACT_OK) << "packet " << i;
  }
  EXPECT_EQ(sumCounter(skel.s, IG_IMP_MATCHED), n);
  EXPECT_EQ(sumCounter(skel.s, IG_IMP_DROPPED), drops);
  EXPECT_EQ(sumCounter(skel.s, IG_IMP_DUPLICATED), dups);  // the copies leave through lo
  EXPECT_EQ(sumCounter(skel.s, IG_IMP_ERRORS), 0u);
  expectBinomial(drops, n, 0.3, "drops");
  expectBinomial(dups, n, 0.7 * 0.2, "duplicates");

  // Not IP (ARP) and IP of another protocol when filtered: passed, no decision taken.
  auto arp = udpFrame(mac, 0, IPPROTO_UDP, ETH_P_ARP);
  ig_impair_config all_drop = sharedConfig(1, 1, 0, 0);
  all_drop.l4_proto = IPPROTO_TCP;
  ASSERT_EQ(bpf_map_update_elem(bpf_map__fd(skel.s->maps.ig_imp_config), &zero, &all_drop, BPF_ANY), 0);
  auto udp = udpFrame(mac, 1);
  auto tcp = udpFrame(mac, 2, IPPROTO_TCP);
  EXPECT_EQ(runOnce(fd, arp), TC_ACT_OK);
  EXPECT_EQ(runOnce(fd, udp), TC_ACT_OK);
  EXPECT_EQ(runOnce(fd, tcp), TC_ACT_STOLEN);
  EXPECT_EQ(sumCounter(skel.s, IG_IMP_MATCHED), n + 1);
  EXPECT_EQ(sumCounter(skel.s, IG_IMP_PACKETS), n + 3);
  // Our own copies (marked) pass untouched even when everything would be dropped.
  LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = tcp.data(), .data_size_in = static_cast<uint32_t>(tcp.size()));
  __sk_buff ctx{};
  ctx.mark = IG_IMPAIR_DEFAULT_MARK;
  opts.ctx_in = &ctx;
  opts.ctx_size_in = sizeof(ctx);
  ASSERT_EQ(bpf_prog_test_run_opts(fd, &opts), 0);
  EXPECT_EQ(opts.retval, uint32_t{TC_ACT_OK});
  EXPECT_EQ(sumCounter(skel.s, IG_IMP_REINJECTED), 1u);
}

// ---- attached on a veth pair ----

// What the receiver must see, in order, when `n` frames are sent one by one through an
// attachment with `cfg` (single sender: packet i is the i-th decision).
std::vector<uint32_t> predictArrivals(const ig_impair_config& cfg, uint32_t n, uint64_t* held_out) {
  std::vector<uint32_t> out;
  int64_t slot = -1;
  uint64_t held = 0;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t d = ig_impair_decide(&cfg, i);
    if (d == IG_IMP_DROP) continue;
    if (d == IG_IMP_HOLD && slot < 0) {
      slot = i;
      ++held;
      continue;
    }
    out.push_back(i);
    if (d == IG_IMP_DUP) out.push_back(i);
    if (slot >= 0) {
      out.push_back(static_cast<uint32_t>(slot));
      slot = -1;
    }
  }
  *held_out = held;
  return out;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// Sends seq 0..n-1 from igi0 and returns the sequence numbers read on igi1 after tc ingress
// (a packet socket bound to ETH_P_IP, delivered after the clsact ingress hook).
std::vector<uint32_t> sendAndReceive(uint32_t n) {
  std::vector<uint32_t> got;
  Fd tx, rx;
  tx.fd = socket(AF_PACKET, SOCK_RAW, 0);
  rx.fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(ETH_P_IP));
  if (tx.fd < 0 || rx.fd < 0) return got;
  int rcvbuf = 16 << 20;
  setsockopt(rx.fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf));
  sockaddr_ll rx_addr{};
  rx_addr.sll_family = AF_PACKET;
  rx_addr.sll_protocol = htons(ETH_P_IP);
  rx_addr.sll_ifindex = static_cast<int>(if_nametoindex("igi1"));
  if (bind(rx.fd, reinterpret_cast<sockaddr*>(&rx_addr), sizeof(rx_addr)) != 0) return got;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "igi1", IFNAMSIZ - 1);
  if (ioctl(rx.fd, SIOCGIFHWADDR, &ifr) != 0) return got;
  uint8_t mac[6];
  std::memcpy(mac, ifr.ifr_hwaddr.sa_data, 6);
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_ifindex = static_cast<int>(if_nametoindex("igi0"));
  to.sll_halen = 6;
  std::memcpy(to.sll_addr, mac, 6);
  auto drain = [&] {
    uint8_t buf[2048];
    for (;;) {
      ssize_t r = recv(rx.fd, buf, sizeof(buf), 0);
      if (r < 0) break;
      uint32_t seq;
      if (r >= 14 + 20 + 8 + 4 && buf[14 + 9] == IPPROTO_UDP) {
        std::memcpy(&seq, buf + 14 + 20 + 8, 4);
        got.push_back(ntohl(seq));
      }
    }
  };
  for (uint32_t i = 0; i < n; ++i) {
    auto f = udpFrame(mac, i);
    if (sendto(tx.fd, f.data(), f.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)) < 0)
      ADD_FAILURE() << "sendto: " << strerror(errno);
    if (i % 32 == 31) drain();
  }
  usleep(100000);
  drain();
  return got;
}

class ImpairVeth : public ::testing::TestWithParam<Hook> {
 protected:
  std::string dev() const { return GetParam() == Hook::kEgress ? "igi0" : "igi1"; }
  void TearDown() override { (void)detach(dev(), GetParam(), kPinDir); }
};

TEST_P(ImpairVeth, ArrivalsCountersAndSeedMatchThePrediction) {
  SKIP_WITHOUT_NETNS();
  const uint32_t n = 20000;
  ImpairConfig cfg;
  cfg.seed = 2024;
  cfg.drop = 0.05;
  cfg.duplicate = 0.02;
  cfg.reorder = 0.05;
  cfg.l4_proto = IPPROTO_UDP;  // not the kernel's own IPv6 ND/MLD frames on the veth
  ASSERT_TRUE(attach(dev(), GetParam(), cfg, kPinDir).ok());
  std::vector<uint32_t> got = sendAndReceive(n);
  auto c = readCounters(dev(), GetParam(), kPinDir);
  ASSERT_TRUE(c.ok()) << c.status();

  ig_impair_config shared = toShared(cfg);
  uint64_t held = 0;
  std::vector<uint32_t> expect = predictArrivals(shared, n, &held);
  EXPECT_EQ((*c)[IG_IMP_MATCHED], n);
  EXPECT_EQ((*c)[IG_IMP_HELD], held);
  EXPECT_EQ((*c)[IG_IMP_RELEASED], held);  // the last packet was not held in this seed's run
  EXPECT_EQ((*c)[IG_IMP_ERRORS], 0u);
  EXPECT_EQ((*c)[IG_IMP_REINJECTED], (*c)[IG_IMP_DUPLICATED] + 2 * (*c)[IG_IMP_RELEASED]);
  expectBinomial((*c)[IG_IMP_DROPPED], n, 0.05, "drops");
  expectBinomial((*c)[IG_IMP_HELD] + (*c)[IG_IMP_HOLD_BUSY], n, 0.95 * 0.05, "reorder decisions");
  expectBinomial((*c)[IG_IMP_DUPLICATED], n, 0.95 * 0.95 * 0.02, "duplicates");
  ASSERT_EQ(got.size(), expect.size());
  EXPECT_TRUE(got == expect) << "arrival order differs from the prediction";

  // What a receiver sees: late (out-of-order) first arrivals and duplicates.
  std::vector<uint8_t> seen(n, 0);
  int64_t max_seen = -1;
  uint64_t late = 0, dup_arrivals = 0, lost = 0;
  for (uint32_t s : got) {
    if (seen[s]++) {
      ++dup_arrivals;
      continue;
    }
    if (static_cast<int64_t>(s) < max_seen) ++late;
    max_seen = std::max<int64_t>(max_seen, s);
  }
  for (uint32_t i = 0; i < n; ++i) lost += seen[i] == 0;
  EXPECT_EQ(late, (*c)[IG_IMP_RELEASED]);
  EXPECT_GT(late, n * 0.02);
  EXPECT_EQ(dup_arrivals, (*c)[IG_IMP_DUPLICATED]);
  EXPECT_EQ(lost, (*c)[IG_IMP_DROPPED]);
  std::printf("[ %s ] %u sent: %zu arrived, %llu lost, %llu duplicated, %llu late\n", hookName(GetParam()), n,
              got.size(), static_cast<unsigned long long>(lost), static_cast<unsigned long long>(dup_arrivals),
              static_cast<unsigned long long>(late));

  // Same seed again (sequence restarted): the same arrivals. Another seed: others.
  ImpairUpdate again;
  again.reset = true;
  ASSERT_TRUE(configure(dev(), GetParam(), again, kPinDir).ok());
  EXPECT_TRUE(sendAndReceive(n) == got);
  ImpairUpdate other;
  other.reset = true;
  other.seed = 2025;
  ASSERT_TRUE(configure(dev(), GetParam(), other, kPinDir).ok());
  std::vector<uint32_t> got_other = sendAndReceive(n);
  EXPECT_FALSE(got_other == got);
  shared.seed = 2025;
  EXPECT_TRUE(got_other == predictArrivals(shared, n, &held));

  // Disabled: everything passes in order.
  ImpairUpdate off;
  off.enabled = false;
  off.reset = true;
  ASSERT_TRUE(configure(dev(), GetParam(), off, kPinDir).ok());
  std::vector<uint32_t> plain = sendAndReceive(1000);
  ASSERT_EQ(plain.size(), 1000u);
  for (uint32_t i = 0; i < 1000; ++i) ASSERT_EQ(plain[i], i);
}

TEST_P(ImpairVeth, DetachRemovesFilterAndPins) {
  SKIP_WITHOUT_NETNS();
  ImpairConfig cfg;
  cfg.drop = 1;
  cfg.l4_proto = IPPROTO_UDP;
  ASSERT_TRUE(attach(dev(), GetParam(), cfg, kPinDir).ok());
  EXPECT_TRUE(sendAndReceive(100).empty());
  // Attaching again replaces the filter with a fresh program (counters at 0).
  cfg.drop = 0;
  ASSERT_TRUE(attach(dev(), GetParam(), cfg, kPinDir).ok());
  EXPECT_EQ(sendAndReceive(100).size(), 100u);
  EXPECT_EQ((*readCounters(dev(), GetParam(), kPinDir))[IG_IMP_MATCHED], 100u);
  ASSERT_TRUE(detach(dev(), GetParam(), kPinDir).ok());
  EXPECT_EQ(readCounters(dev(), GetParam(), kPinDir).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(detach(dev(), GetParam(), kPinDir).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(sendAndReceive(100).size(), 100u);
}

INSTANTIATE_TEST_SUITE_P(Hooks, ImpairVeth, ::testing::Values(Hook::kEgress, Hook::kIngress),
                         [](const auto& info) { return std::string(hookName(info.param)); });

}  // namespace
}  // namespace infergate::impair

int main(int argc, char** argv) {
  return infergate::testing::runInPrivateNetns(
      argc, argv,
      {"needs root (BPF, network namespace, veth)",
       "ip link set lo up && ip link add igi0 type veth peer name igi1 && "
       "ip link set igi0 up && ip link set igi1 up",
       true});
}
