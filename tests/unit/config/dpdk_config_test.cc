// The `dpdk:` section and `mode: dpdk` (docs/DPDK.md): every key read into DpdkConfig, the
// defaults, and each refusal naming its key path.
#include <gtest/gtest.h>

#include <cctype>

#include <string>
#include <string_view>

#include "config/config.h"

namespace infergate::config {
namespace {

constexpr std::string_view kBase = R"yaml(
listeners:
  - {name: http, address: 0.0.0.0, port: 8000}
models:
  - name: m
    inputs:  [{name: IN, datatype: FP32, shape: [4]}]
    outputs: [{name: OUT, datatype: FP32, shape: [4]}]
)yaml";

std::string withBase(std::string_view extra) { return std::string(kBase) + std::string(extra); }

TEST(DpdkConfigTest, ModeNameRoundTrips) {
  EXPECT_EQ(modeName(Mode::kDpdk), "dpdk");
  ASSERT_TRUE(parseMode("dpdk").has_value());
  EXPECT_EQ(*parseMode("dpdk"), Mode::kDpdk);
}

TEST(DpdkConfigTest, Defaults) {
  absl::StatusOr<Config> c =
      loadConfigString(withBase("mode: dpdk\ndpdk: {ipv4: 10.0.0.1}\n"), "t");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->mode, Mode::kDpdk);
  const DpdkConfig& d = c->dpdk;
  EXPECT_TRUE(d.eal_args.empty());
  EXPECT_EQ(d.memory_mb, 0u);
  EXPECT_FALSE(d.no_huge);
  EXPECT_FALSE(d.in_memory);
  EXPECT_TRUE(d.vdevs.empty());
  EXPECT_TRUE(d.allow_pci.empty());
  EXPECT_EQ(d.file_prefix, "");
  EXPECT_EQ(d.port, 0);
  EXPECT_EQ(d.mbufs_per_queue, 8192u);
  EXPECT_EQ(d.rx_desc, 1024);
  EXPECT_EQ(d.tx_desc, 1024);
  EXPECT_EQ(d.ipv4, "10.0.0.1");
  EXPECT_EQ(d.ipv6, "");
  EXPECT_TRUE(d.checksum_offload) << "auto";
  // dpdk mode needs no xdp.interface.
  EXPECT_EQ(c->xdp.interface, "");
}

TEST(DpdkConfigTest, EveryKey) {
  absl::StatusOr<Config> c = loadConfigString(withBase(R"yaml(mode: dpdk
reactors: 2
dpdk:
  eal_args: ["--log-level=lib.eal:debug", "--telemetry"]
  memory_mb: 512
  no_huge: true
  in_memory: true
  vdevs: ["net_af_packet0,iface=veth0", "net_ring0"]
  allow_pci: ["0000:3b:00.1"]
  file_prefix: ig-a
  port: 1
  mbufs_per_queue: 16384
  rx_desc: 2048
  tx_desc: 512
  ipv4: 192.0.2.10
  ipv6: fd00::10
  checksum_offload: off
xdp:
  rate_limit: {rate_per_sec: 100, burst: 20}
  path_prefixes: [/v2/]
)yaml"),
                                              "t");
  ASSERT_TRUE(c.ok()) << c.status();
  const DpdkConfig& d = c->dpdk;
  EXPECT_EQ(c->reactors, 2);
  ASSERT_EQ(d.eal_args.size(), 2u);
  EXPECT_EQ(d.eal_args[0], "--log-level=lib.eal:debug");
  EXPECT_EQ(d.eal_args[1], "--telemetry");
  EXPECT_EQ(d.memory_mb, 512u);
  EXPECT_TRUE(d.no_huge);
  EXPECT_TRUE(d.in_memory);
  ASSERT_EQ(d.vdevs.size(), 2u);
  EXPECT_EQ(d.vdevs[0], "net_af_packet0,iface=veth0");
  EXPECT_EQ(d.vdevs[1], "net_ring0");
  ASSERT_EQ(d.allow_pci.size(), 1u);
  EXPECT_EQ(d.allow_pci[0], "0000:3b:00.1");
  EXPECT_EQ(d.file_prefix, "ig-a");
  EXPECT_EQ(d.port, 1);
  EXPECT_EQ(d.mbufs_per_queue, 16384u);
  EXPECT_EQ(d.rx_desc, 2048);
  EXPECT_EQ(d.tx_desc, 512);
  EXPECT_EQ(d.ipv4, "192.0.2.10");
  EXPECT_EQ(d.ipv6, "fd00::10");
  EXPECT_FALSE(d.checksum_offload);
  // The classifier keys of xdp: apply in dpdk mode too.
  EXPECT_EQ(c->xdp.syn_rate_per_sec, 100u);
  EXPECT_EQ(c->xdp.syn_burst, 20u);
  ASSERT_EQ(c->xdp.path_prefixes.size(), 1u);
  EXPECT_EQ(c->xdp.path_prefixes[0], "/v2/");
}

TEST(DpdkConfigTest, SectionReadInOtherModesToo) {
  // The section is checked whatever the mode (a typo is found before the mode is switched);
  // ipv4 is required only in mode dpdk.
  absl::StatusOr<Config> c = loadConfigString(withBase("dpdk: {no_huge: true}\n"), "t");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->mode, Mode::kSocket);
  EXPECT_TRUE(c->dpdk.no_huge);
}

struct BadCase {
  const char* name;
  const char* yaml;
  const char* message;  // the whole message after "t: "
};

class DpdkConfigBadTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(DpdkConfigBadTest, RefusedNamingTheKey) {
  absl::StatusOr<Config> c = loadConfigString(withBase(GetParam().yaml), "t");
  ASSERT_FALSE(c.ok()) << GetParam().name;
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(c.status().message()), std::string("t: ") + GetParam().message);
}

const BadCase kBad[] = {
    {"ipv4 missing", "mode: dpdk\n",
     "dpdk.ipv4: required in mode 'dpdk' (the gateway's IPv4 address: there is no kernel behind a "
     "DPDK port, so infergate answers ARP and ICMP for it)"},
    {"ipv4 missing with a section", "mode: dpdk\ndpdk: {no_huge: true}\n",
     "dpdk.ipv4: required in mode 'dpdk' (the gateway's IPv4 address: there is no kernel behind a "
     "DPDK port, so infergate answers ARP and ICMP for it)"},
    {"ipv4 not an address", "dpdk: {ipv4: 10.0.0}\n",
     "dpdk.ipv4: invalid IPv4 address '10.0.0' (a unicast literal such as 10.0.0.1)"},
    {"ipv4 an IPv6 address", "dpdk: {ipv4: 'fd00::1'}\n",
     "dpdk.ipv4: invalid IPv4 address 'fd00::1' (a unicast literal such as 10.0.0.1)"},
    {"ipv4 zero", "dpdk: {ipv4: 0.0.0.0}\n",
     "dpdk.ipv4: invalid IPv4 address '0.0.0.0' (a unicast literal such as 10.0.0.1)"},
    {"ipv6 not an address", "dpdk: {ipv4: 10.0.0.1, ipv6: 10.0.0.2}\n",
     "dpdk.ipv6: invalid IPv6 address '10.0.0.2' (a unicast literal such as fd00::1)"},
    {"ipv6 unspecified", "dpdk: {ipv4: 10.0.0.1, ipv6: '::'}\n",
     "dpdk.ipv6: invalid IPv6 address '::' (a unicast literal such as fd00::1)"},
    {"unknown key", "dpdk: {hugepages: 4}\n",
     "dpdk.hugepages: unknown key 'hugepages' (expected one of eal_args, memory_mb, no_huge, "
     "in_memory, vdevs, allow_pci, file_prefix, port, mbufs_per_queue, rx_desc, tx_desc, ipv4, "
     "ipv6, checksum_offload)"},
    {"checksum_offload neither auto nor off", "dpdk: {checksum_offload: on}\n",
     "dpdk.checksum_offload: unknown value 'on' (expected auto or off)"},
    {"not a mapping", "dpdk: [a]\n", "dpdk: expected a mapping, got a sequence"},
    {"eal_args not a list", "dpdk: {eal_args: --no-pci}\n",
     "dpdk.eal_args: expected a sequence, got '--no-pci'"},
    {"eal_args entry with a space", "dpdk: {eal_args: ['-l 1']}\n",
     "dpdk.eal_args[0]: invalid entry '-l 1' (1 to 1024 printable characters, no spaces)"},
    {"vdevs empty entry", "dpdk: {vdevs: ['']}\n",
     "dpdk.vdevs[0]: invalid entry '' (1 to 1024 printable characters, no spaces)"},
    {"allow_pci a mapping", "dpdk: {allow_pci: [{a: 1}]}\n",
     "dpdk.allow_pci[0]: expected a string, got a mapping"},
    {"no_huge not a bool", "dpdk: {no_huge: yes}\n",
     "dpdk.no_huge: expected true or false, got 'yes'"},
    {"memory_mb negative", "dpdk: {memory_mb: -1}\n",
     "dpdk.memory_mb: must be between 0 and 1048576, got -1"},
    {"port too large", "dpdk: {port: 1024}\n", "dpdk.port: must be between 0 and 1023, got 1024"},
    {"mbufs_per_queue too small", "dpdk: {mbufs_per_queue: 512}\n",
     "dpdk.mbufs_per_queue: must be between 1024 and 4194304, got 512"},
    {"rx_desc not a power of two", "dpdk: {rx_desc: 1000}\n",
     "dpdk.rx_desc: 1000 is not a power of two (drivers round or refuse it)"},
    {"tx_desc too small", "dpdk: {tx_desc: 32}\n",
     "dpdk.tx_desc: must be between 64 and 32768, got 32"},
    {"file_prefix with a slash", "dpdk: {file_prefix: a/b}\n",
     "dpdk.file_prefix: invalid prefix 'a/b' (1 to 64 letters, digits, '_', '-' or '.')"},
};

INSTANTIATE_TEST_SUITE_P(All, DpdkConfigBadTest, ::testing::ValuesIn(kBad),
                         [](const ::testing::TestParamInfo<BadCase>& i) {
                           std::string n = i.param.name;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace infergate::config
