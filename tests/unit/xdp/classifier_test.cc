// The XDP classifier header compiled for the host, run over the same fixture table that
// tests/bpf runs through BPF_PROG_TEST_RUN. Needs no privileges.
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>

#include "tests/unit/xdp/classifier_ref.h"
#include "xdp/classifier.h"
#include "xdp/testing/fixtures.h"
#include "xdp/testing/packet_builder.h"
#include "xdp/xdp_filter.h"

namespace infergate::xdp::testing {
namespace {

std::string testName(const ::testing::TestParamInfo<size_t>& info) {
  std::string n = fixtures()[info.param].name;
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return std::to_string(info.param) + "_" + n;
}

class HostClassifier : public ::testing::TestWithParam<size_t> {};

TEST_P(HostClassifier, MatchesFixture) {
  const Fixture& f = fixtures()[GetParam()];
  ig_config cfg;
  ASSERT_TRUE(buildConfig(fixtureOptions(), &cfg).ok());
  std::vector<uint8_t> buf = f.packet;
  ig_parse p{};
  const uint8_t* end = buf.data() + buf.size();
  if (ig_parse_l2l4(buf.data(), end, &cfg, &p) && p.reason != IG_R_SYN && p.pl_len)
    ig_classify_payload(buf.data(), end, &cfg, &p, f.first_segment);
  EXPECT_EQ(p.action, f.action) << f.name;
  EXPECT_EQ(reasonName(p.reason), std::string(reasonName(f.reason))) << f.name;
  if (p.service && (p.action == XDP_PASS || p.action == XDP_TX)) {
    EXPECT_EQ(p.tag_flags, f.tag_flags) << f.name;
  }
  if (f.reason == IG_R_REQUEST) {
    int cls = p.cls == IG_CLASS_NONE ? fixtureOptions().default_class : p.cls;
    EXPECT_EQ(cls, f.cls) << f.name;
  }
  if (f.action == XDP_TX && p.action == XDP_TX) {
    int len = ig_build_rst(buf.data(), end, &p);
    ASSERT_GT(len, 0);
    buf.resize(static_cast<size_t>(len));
    EXPECT_EQ(hex(buf), hex(f.expected_out)) << f.name;
    EXPECT_TRUE(checksumsValid(buf)) << f.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HostClassifier,
                         ::testing::Range<size_t>(0, fixtures().size()), testName);

// Found by fuzz_xdp_classifier: a first segment of exactly 8 letters (a client writing the
// method alone) shifted a 64-bit mask by 64 (undefined; on x86 a shift by 0, so an allowed
// 8-letter method was rejected).
TEST(HostClassifierMethods, FirstSegmentOfExactlyEightLetters) {
  XdpOptions o = fixtureOptions();
  o.methods = {"GET", "PROPFIND"};
  ig_config cfg;
  ASSERT_TRUE(buildConfig(o, &cfg).ok());
  for (const char* m : {"PROPFIND", "PROPFINX"}) {
    PacketSpec s;
    s.payload = m;
    std::vector<uint8_t> buf = buildPacket(s);
    ig_parse p{};
    const uint8_t* end = buf.data() + buf.size();
    ASSERT_TRUE(ig_parse_l2l4(buf.data(), end, &cfg, &p));
    ig_classify_payload(buf.data(), end, &cfg, &p, 1);
    if (std::string(m) == "PROPFIND") {
      EXPECT_EQ(reasonName(p.reason), std::string("request")) << m;
      EXPECT_NE(p.tag_flags & IG_TF_REQUEST_START, 0) << m;
    } else {
      EXPECT_EQ(reasonName(p.reason), std::string("bad_method")) << m;
    }
  }
}

// Issue 15: the optimised HTTP stages (word loads for short targets, four words per target
// scan step, prefix words only up to the prefix's length, 64-bit header scan) must give
// exactly what the stages gave before (tests/unit/xdp/classifier_ref.h), field for field, on
// targets of every length with a bad byte at every position, cut at every length, with and
// without Ethernet padding, and on header blocks with the priority header at every line.
class ClassifierMatchesReference : public ::testing::Test {
 protected:
  void SetUp() override {
    XdpOptions o = fixtureOptions();
    o.methods = {"GET", "POST", "PUT", "PROPFIND"};
    o.path_classes = {{"/v2/models/urgent", 0}, {"/v2/models/background-batch-jobs", 3}};
    ASSERT_TRUE(buildConfig(o, &cfg_[0]).ok());
    o.priority_header = false;
    ASSERT_TRUE(buildConfig(o, &cfg_[1]).ok());
    o = fixtureOptions();
    o.path_prefixes = {};  // class rules only: every target is allowed
    ASSERT_TRUE(buildConfig(o, &cfg_[2]).ok());
  }

  // Runs both classifiers over `payload` (and over the frame with `pad` bytes of padding).
  void check(const std::string& payload, size_t pad = 0) {
    PacketSpec s;
    s.payload = payload;
    std::vector<uint8_t> f = buildPacket(s);
    f.resize(f.size() + pad, 0xa5);
    for (const ig_config& cfg : cfg_) {
      for (int first = 0; first < 2; ++first) {
        ig_parse a{};
        const uint8_t* end = f.data() + f.size();
        if (!ig_parse_l2l4(f.data(), end, &cfg, &a) || !a.pl_len) continue;
        ig_parse b = a;
        ig_classify_payload(f.data(), end, &cfg, &a, first);
        ref::ref_classify_payload(f.data(), end, &cfg, &b, first);
        ++compared_;
        ASSERT_EQ(std::memcmp(&a, &b, sizeof(a)), 0)
            << "payload '" << payload << "' pad " << pad << " first " << first << ": reason "
            << reasonName(a.reason) << " vs " << reasonName(b.reason) << ", cls " << int(a.cls)
            << " vs " << int(b.cls) << ", action " << int(a.action) << " vs " << int(b.action)
            << ", hdr " << a.hdr_off << "/" << a.hdr_len << " vs " << b.hdr_off << "/" << b.hdr_len;
      }
    }
  }

  ig_config cfg_[3];
  size_t compared_ = 0;
};

TEST_F(ClassifierMatchesReference, TargetsOfEveryLengthAndBadByte) {
  const char* prefixes[] = {"/", "/v2/", "/v2/models/urgent", "/v2/models/background-batch-jobs",
                            "/v1/models/", "/metrics", "/admin", "/v3"};
  const char bad[] = {'\x01', '\x7f', '\x80', '\t', ' ', '\xff'};
  for (const char* pre : prefixes) {
    for (size_t len = 0; len <= 1100; len += (len < 80 ? 1 : 37)) {
      std::string target = std::string(pre) + std::string(len, 'a');
      for (const char* method : {"GET ", "POST ", "PROPFIND "}) {
        std::string line = method + target + " HTTP/1.1\r\nHost: gw\r\n\r\n";
        check(line);
        check(line, 7);
      }
      if (len < 80) {
        std::string line = "GET " + target + " HTTP/1.1\r\n\r\n";
        for (size_t cut = 1; cut <= line.size(); ++cut) check(line.substr(0, cut));
        for (char c : bad) {
          for (size_t at = 1; at < target.size(); at += 3) {
            std::string t = target;
            t[at] = c;
            check("GET " + t + " HTTP/1.1\r\n\r\n");
          }
        }
      }
    }
  }
  EXPECT_GT(compared_, 50000u);
}

TEST_F(ClassifierMatchesReference, PriorityHeaderAtEveryLine) {
  const std::string lines[] = {"Host: gw\r\n", "User-Agent: curl/7.88.1\r\n", "Accept: */*\r\n",
                               "Content-Type: application/json\r\n", "Content-Length: 64\r\n",
                               "X-A: " + std::string(70, 'b') + "\r\n"};
  const std::string prio[] = {"x-infergate-priority: 3\r\n", "X-Infergate-Priority:0\r\n",
                              "x-infergate-priority:\t2\r\n", "x-infergate-priority: 9\r\n",
                              "x-infergate-priorit: 1\r\n", "x-infergate-priority 1\r\n"};
  for (const std::string& h : prio) {
    for (size_t at = 0; at <= 12; ++at) {
      std::string block;
      for (size_t i = 0; i < 12; ++i) {
        if (i == at) block += h;
        block += lines[i % 6];
      }
      std::string req = "POST /v2/models/m/infer HTTP/1.1\r\n" + block + "\r\n{\"x\":1}";
      check(req);
      for (size_t cut = 30; cut < req.size(); cut += 5) check(req.substr(0, cut));
      check("GET /v2/x HTTP/1.1\r\n\r\n" + h);  // after the end of the headers
    }
  }
  EXPECT_GT(compared_, 1000u);
}

TEST(HostClassifierTable, HasEnoughCases) {
  EXPECT_GE(fixtures().size(), 80u);
  for (const auto& f : fixtures()) {
    if (f.action == XDP_TX) {
      EXPECT_TRUE(checksumsValid(f.expected_out)) << f.name;
    }
  }
}

TEST(HostClassifierConfig, RejectsBadOptions) {
  ig_config cfg;
  XdpOptions o = fixtureOptions();
  o.methods = {"get"};
  auto s = buildConfig(o, &cfg);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("xdp.methods[0]"), std::string::npos) << s;
  o = fixtureOptions();
  o.path_prefixes = {std::string(40, 'a')};
  EXPECT_FALSE(buildConfig(o, &cfg).ok());
  o = fixtureOptions();
  o.service_ports.clear();
  EXPECT_FALSE(buildConfig(o, &cfg).ok());
  o = fixtureOptions();
  o.http2_max_frame_size = 100;
  EXPECT_FALSE(buildConfig(o, &cfg).ok());
}

// The config file's names for the option enums (config/config.cc reads xdp.attach with them).
TEST(HostClassifierConfig, OptionNames) {
  EXPECT_EQ(parseNamed(kAttachModeNames, "generic"), AttachMode::kGeneric);
  EXPECT_EQ(parseNamed(kAttachModeNames, "native"), AttachMode::kNative);
  EXPECT_FALSE(parseNamed(kAttachModeNames, "turbo").has_value());
  EXPECT_EQ(parseNamed(kFragPolicyNames, "drop_all"), FragPolicy::kDropAll);
  EXPECT_EQ(parseNamed(kSynCookiesNames, "always"), SynCookies::kAlways);
  EXPECT_EQ(parseNamed(kPriorityFromNames, "off"), XdpOptions::PriorityFrom::kOff);
  EXPECT_EQ(attachModeName(AttachMode::kGeneric), "generic");
  EXPECT_EQ(fragPolicyName(FragPolicy::kPass), "pass");
  EXPECT_EQ(synCookiesName(SynCookies::kAuto), "auto");
  EXPECT_STREQ(className(0), "high");
  EXPECT_STREQ(className(kNumClasses - 1), "background");
  EXPECT_STREQ(className(kNumClasses), "none");
}

// checkOptions is buildConfig's verdict without the output.
TEST(HostClassifierConfig, CheckOptions) {
  XdpOptions o = fixtureOptions();
  EXPECT_TRUE(checkOptions(o).ok());
  o.methods = {"TOOLONGMETHOD"};
  absl::Status s = checkOptions(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("xdp.methods[0]"), std::string::npos) << s;
}

// Issue 13, item 5: the CIDR trie carries class rules and trusted sources together.
TEST(HostClassifierConfig, CidrEntriesMergeRulesAndTrustedSources) {
  XdpOptions o = fixtureOptions();
  o.priority_from = XdpOptions::PriorityFrom::kTrusted;
  o.cidr_rules = {{"10.1.0.0/16", 3, false}, {"10.1.2.3", -1, true}, {"192.0.2.0/24", 0, false}};
  o.trusted_sources = {"10.0.0.0/8", "192.0.2.0/24"};
  auto e = cidrEntries(o);
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(e->size(), 4u);  // 192.0.2.0/24 once
  auto find = [&](const char* c) -> const CidrEntry& {
    for (const CidrEntry& x : *e) {
      if (x.cidr == *common::parseCidr(c)) return x;
    }
    ADD_FAILURE() << c;
    return e->front();
  };
  EXPECT_EQ(find("10.1.0.0/16").cls, 3);
  EXPECT_EQ(find("10.1.0.0/16").trusted, 1);
  EXPECT_EQ(find("10.1.2.3").cls, IG_CLASS_NONE);  // its own rule, as without trust...
  EXPECT_EQ(find("10.1.2.3").exempt, 1);
  EXPECT_EQ(find("10.1.2.3").trusted, 1);  // ...plus the /8's trust
  EXPECT_EQ(find("10.0.0.0/8").trusted, 1);
  EXPECT_EQ(find("10.0.0.0/8").cls, IG_CLASS_NONE);
  EXPECT_EQ(find("192.0.2.0/24").cls, 0);
  EXPECT_EQ(find("192.0.2.0/24").trusted, 1);
  // Trusted sources go into the trie only when trust decides.
  o.priority_from = XdpOptions::PriorityFrom::kAll;
  EXPECT_EQ(cidrEntries(o)->size(), 3u);
  o.priority_from = XdpOptions::PriorityFrom::kTrusted;
  o.trusted_sources = {"bad"};
  EXPECT_FALSE(cidrEntries(o).ok());
}

TEST(HostClassifierMetrics, RendersPrometheus) {
  XdpCounters c;
  c.packets[XDP_DROP][IG_R_BAD_REQUEST_LINE] = 3;
  c.bytes[XDP_DROP][IG_R_BAD_REQUEST_LINE] = 300;
  c.requests[0][IG_TV_OVERLOAD] = 2;
  std::string s = renderPrometheus(c);
  // Packets and bytes, word for word, only the pairs that saw packets.
  EXPECT_EQ(s.rfind(
                "# HELP infergate_xdp_packets_total Packets seen by the XDP ingress program, by "
                "verdict and reason.\n"
                "# TYPE infergate_xdp_packets_total counter\n"
                "infergate_xdp_packets_total{verdict=\"drop\",reason=\"bad_request_line\"} 3\n"
                "# HELP infergate_xdp_bytes_total Bytes seen by the XDP ingress program, by "
                "verdict and reason.\n"
                "# TYPE infergate_xdp_bytes_total counter\n"
                "infergate_xdp_bytes_total{verdict=\"drop\",reason=\"bad_request_line\"} 300\n"
                "# HELP infergate_xdp_requests_total ",
                0),
            0u)
      << s;
  EXPECT_NE(s.find("infergate_xdp_packets_total{verdict=\"drop\",reason=\"bad_request_line\"} 3\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("infergate_xdp_requests_total{class=\"high\",verdict=\"overload\"} 2\n"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace infergate::xdp::testing
