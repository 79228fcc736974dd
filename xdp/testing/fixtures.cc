#include "xdp/testing/fixtures.h"

#include <linux/bpf.h>

#include "tests/mocks/h2_frame_header.h"
#include "xdp/ingress_shared.h"

namespace infergate::xdp::testing {
namespace {

constexpr uint8_t kReq = IG_TF_REQUEST_START;
constexpr uint8_t kH2 = IG_TF_HTTP2;
constexpr uint8_t kFirst = IG_TF_FIRST_SEGMENT;

std::string h2Frame(uint32_t len, uint8_t type, uint8_t flags, uint32_t sid, size_t body = SIZE_MAX) {
  std::string f = mocks::h2FrameHeader(len, type, flags, sid);
  f += std::string(body == SIZE_MAX ? len : body, '\0');
  return f;
}

const std::string kPreface("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);

class Table {
 public:
  std::vector<Fixture> out;

  PacketSpec base(bool v6 = false) {
    PacketSpec s;
    s.ipv6 = v6;
    if (v6) {
      s.src = "2001:db8::2";
      s.dst = "2001:db8::1";
    }
    s.sport = static_cast<uint16_t>(20000 + out.size());  // a flow of its own per fixture
    return s;
  }
  PacketSpec req(const std::string& payload, bool v6 = false) {
    PacketSpec s = base(v6);
    s.payload = payload;
    return s;
  }

  Fixture& add(const std::string& name, const std::string& group, const PacketSpec& s, int action,
               int reason, uint8_t flags = 0, int cls = -1) {
    Fixture f;
    f.name = name;
    f.group = group;
    f.spec = s;
    f.packet = buildPacket(s);
    f.action = action;
    f.reason = reason;
    f.tag_flags = flags;
    f.cls = cls;
    out.push_back(std::move(f));
    return out.back();
  }
  Fixture& raw(const std::string& name, const std::string& group, std::vector<uint8_t> pkt,
               int action, int reason) {
    Fixture f;
    f.name = name;
    f.group = group;
    f.packet = std::move(pkt);
    f.action = action;
    f.reason = reason;
    out.push_back(std::move(f));
    return out.back();
  }
  void pass(const std::string& name, const std::string& group, const PacketSpec& s, int reason) {
    add(name, group, s, XDP_PASS, reason);
  }
  void drop(const std::string& name, const PacketSpec& s, int reason) {
    add(name, "drop_header", s, XDP_DROP, reason);
  }
  void ok(const std::string& name, const std::string& group, const PacketSpec& s, int cls = 1,
          uint8_t flags = kReq) {
    add(name, group, s, XDP_PASS, IG_R_REQUEST, flags, cls);
  }
  void segment(const std::string& name, const PacketSpec& s) {
    add(name, "segment", s, XDP_PASS, IG_R_SEGMENT);
  }
  void rst(const std::string& name, const std::string& group, const PacketSpec& s, int reason,
           uint8_t flags = kReq) {
    Fixture& f = add(name, group, s, XDP_TX, reason, flags);
    f.expected_out = buildPacket(rstFor(s));
  }
  void first(const std::string& name, const PacketSpec& s, int action, int reason,
             uint8_t flags, int cls = -1) {
    Fixture& f = add(name, action == XDP_TX ? "reject_h1" : "request_h1", s, action, reason,
                     flags, cls);
    f.first_segment = true;
    PacketSpec syn = s;
    syn.seq = s.seq - 1;
    syn.ack = 0;
    syn.flags = kSyn;
    syn.payload.clear();
    f.syn = buildPacket(syn);
    if (action == XDP_TX) f.expected_out = buildPacket(rstFor(s));
  }
};

std::vector<Fixture> makeFixtures() {
  Table t;
  const std::string kGet = "GET /v2/models/identity/ready HTTP/1.1\r\nHost: gw\r\n\r\n";
  const std::string kPost =
      "POST /v2/models/identity/infer HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
      "Content-Length: 64\r\n\r\n{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]}";

  // ---- not ours: passed untouched
  {
    PacketSpec s = t.base();
    s.ethertype = 0x0806;
    s.raw_l4 = std::vector<uint8_t>(28, 0);
    t.pass("arp", "non_service", s, IG_R_NOT_IP);
  }
  {
    PacketSpec s = t.base();
    s.ethertype = 0x88cc;
    s.raw_l4 = std::vector<uint8_t>(40, 0);
    t.pass("lldp", "non_service", s, IG_R_NOT_IP);
  }
  {
    PacketSpec s = t.base();
    s.ip_proto = 1;
    s.raw_l4 = std::vector<uint8_t>{8, 0, 0xf7, 0xff, 0, 0, 0, 0};
    t.pass("icmp echo", "non_service", s, IG_R_NOT_TCP);
  }
  {
    PacketSpec s = t.base();
    s.ip_proto = 17;
    s.raw_l4 = std::vector<uint8_t>{0x9c, 0x40, 0x1f, 0x40, 0, 12, 0, 0, 'a', 'b', 'c', 'd'};
    t.pass("udp to service port", "non_service", s, IG_R_NOT_TCP);
  }
  {
    PacketSpec s = t.base(true);
    s.ip_proto = 58;
    s.raw_l4 = std::vector<uint8_t>(24, 0);
    (*s.raw_l4)[0] = 135;
    t.pass("icmpv6 neighbour solicitation", "non_service", s, IG_R_NOT_TCP);
  }
  {
    PacketSpec s = t.req("SSH-2.0-OpenSSH_9.2\r\n");
    s.dport = 22;
    t.pass("ssh", "non_service", s, IG_R_NOT_SERVICE);
  }
  {
    PacketSpec s = t.req("DELETE /secret HTTP/1.1\r\n\r\n");
    s.dport = 8080;
    t.pass("bad request to another port", "non_service", s, IG_R_NOT_SERVICE);
  }
  {
    PacketSpec s = t.req("", true);
    s.dport = 443;
    s.flags = kSyn;
    t.pass("ipv6 syn to another port", "non_service", s, IG_R_NOT_SERVICE);
  }
  {
    PacketSpec s = t.req("x");
    s.vlans = {100};
    s.dport = 22;
    t.pass("vlan to another port", "non_service", s, IG_R_NOT_SERVICE);
  }
  // IPv4 fragments and IPv6 extension headers (XdpOptions::fragments = kDrop): what carries
  // TCP to a service port past the checks is dropped; the rest goes to the kernel.
  {
    PacketSpec s = t.req(kGet);
    s.frag = 0x2000;  // MF
    t.add("ipv4 first fragment to a service port", "drop_header", s, XDP_DROP, IG_R_IP_FRAGMENT);
  }
  {
    PacketSpec s = t.req(kGet);
    s.frag = 0x2000;
    s.dport = 22;
    t.pass("ipv4 first fragment to another port", "non_service", s, IG_R_IP_FRAGMENT);
  }
  {
    PacketSpec s = t.base();
    s.frag = 0x0010;
    s.raw_l4 = std::vector<uint8_t>(32, 'z');
    t.pass("ipv4 later fragment", "non_service", s, IG_R_IP_FRAGMENT);
  }
  {
    PacketSpec s = t.base();
    s.frag = 0x0001;  // offset 8: would overwrite the flags of the first (RFC 1858)
    s.raw_l4 = std::vector<uint8_t>(32, 'z');
    t.add("ipv4 fragment at offset 8", "drop_header", s, XDP_DROP, IG_R_IP_FRAGMENT);
  }
  // IPv6: an extension header, then a TCP header (ports only matter) to `dport`
  auto v6ext = [&](uint8_t first, std::vector<uint8_t> ext, uint16_t dport) {
    PacketSpec s = t.base(true);
    s.ip_proto = first;
    std::vector<uint8_t> l4 = std::move(ext);
    std::vector<uint8_t> tcp(20, 0);
    tcp[0] = 0x9c;
    tcp[1] = 0x40;
    tcp[2] = static_cast<uint8_t>(dport >> 8);
    tcp[3] = static_cast<uint8_t>(dport);
    tcp[12] = 0x50;
    tcp[13] = kAck | kPsh;
    l4.insert(l4.end(), tcp.begin(), tcp.end());
    l4.insert(l4.end(), kGet.begin(), kGet.end());
    s.raw_l4 = l4;
    return s;
  };
  const std::vector<uint8_t> kHopByHop = {6, 0, 1, 4, 0, 0, 0, 0};   // PadN, next TCP
  const std::vector<uint8_t> kFragFirst = {6, 0, 0, 1, 0, 0, 0, 7};  // offset 0, M, next TCP
  const std::vector<uint8_t> kFragLater = {6, 0, 0, 0x81, 0, 0, 0, 7};  // offset 16
  t.add("ipv6 hop-by-hop header to a service port", "drop_header", v6ext(0, kHopByHop, 8000),
        XDP_DROP, IG_R_IPV6_EXT);
  t.pass("ipv6 hop-by-hop header to another port", "non_service", v6ext(0, kHopByHop, 443),
         IG_R_IPV6_EXT);
  t.add("ipv6 first fragment to a service port", "drop_header", v6ext(44, kFragFirst, 8000),
        XDP_DROP, IG_R_IPV6_EXT);
  t.pass("ipv6 later fragment", "non_service", v6ext(44, kFragLater, 8000), IG_R_IPV6_EXT);
  {
    std::vector<uint8_t> chain;  // five destination-options headers: more than we walk
    for (int i = 0; i < 5; ++i) chain.insert(chain.end(), {uint8_t(i < 4 ? 60 : 6), 0, 1, 4, 0, 0, 0, 0});
    t.add("ipv6 extension chain longer than walked", "drop_header", v6ext(60, chain, 443), XDP_DROP,
          IG_R_IPV6_EXT);
  }
  {
    PacketSpec s = t.base(true);
    s.ip_proto = 50;  // ESP: nothing to see
    s.raw_l4 = std::vector<uint8_t>(48, 0);
    t.pass("ipv6 esp", "non_service", s, IG_R_IPV6_EXT);
  }
  {
    PacketSpec s = t.req(kGet);
    s.vlans = {100, 200};
    t.pass("qinq (two tags)", "non_service", s, IG_R_NOT_IP);
  }

  // ---- handshake and control segments
  {
    PacketSpec s = t.base();
    s.flags = kSyn;
    s.ack = 0;
    t.add("syn", "syn", s, XDP_PASS, IG_R_SYN);
  }
  {
    PacketSpec s = t.base(true);
    s.flags = kSyn;
    s.ack = 0;
    t.add("ipv6 syn", "syn", s, XDP_PASS, IG_R_SYN);
  }
  {
    PacketSpec s = t.base();
    s.flags = kSyn;
    s.ack = 0;
    s.tcp_options = {2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7};
    t.add("syn with mss/sack/ts/ws options", "syn", s, XDP_PASS, IG_R_SYN);
  }
  {
    PacketSpec s = t.base();
    s.flags = kSyn;
    s.vlans = {42};
    t.add("vlan syn", "syn", s, XDP_PASS, IG_R_SYN);
  }
  {
    PacketSpec s = t.base();
    s.flags = kSyn;
    s.dport = 8001;
    t.add("syn to second service port", "syn", s, XDP_PASS, IG_R_SYN);
  }
  {
    PacketSpec s = t.base();
    s.flags = kAck;
    t.segment("pure ack", s);
  }
  {
    PacketSpec s = t.base();
    s.flags = kFin | kAck;
    t.segment("fin ack", s);
  }
  {
    PacketSpec s = t.base();
    s.flags = kRst;
    t.segment("rst", s);
  }
  {
    PacketSpec s = t.base();
    s.flags = kRst | kAck;
    t.segment("rst ack", s);
  }
  {
    PacketSpec s = t.base();
    s.flags = kSyn | kAck;
    t.segment("syn ack", s);
  }

  // ---- bad flag combinations
  const std::pair<const char*, uint8_t> bad_flags[] = {
      {"syn+fin", kSyn | kFin}, {"syn+rst", kSyn | kRst}, {"fin+rst+ack", kFin | kRst | kAck},
      {"no flags", 0},          {"fin alone", kFin},      {"xmas fin+psh+urg", kFin | kPsh | kUrg},
  };
  for (auto& [name, fl] : bad_flags) {
    PacketSpec s = t.base();
    s.flags = fl;
    t.drop(std::string("flags ") + name, s, IG_R_BAD_TCP_FLAGS);
  }
  {
    PacketSpec s = t.req(kGet);
    s.flags = kPsh;
    t.drop("psh without ack, with payload", s, IG_R_BAD_TCP_FLAGS);
  }
  {
    PacketSpec s = t.base(true);
    s.flags = kSyn | kFin;
    t.drop("ipv6 syn+fin", s, IG_R_BAD_TCP_FLAGS);
  }

  // ---- truncated and inconsistent headers, at every boundary
  {
    auto p = buildPacket(t.req(kGet));
    p.resize(10);
    t.raw("truncated ethernet", "drop_header", p, XDP_DROP, IG_R_TRUNCATED);
  }
  {
    PacketSpec s = t.req(kGet);
    s.vlans = {7};
    auto p = buildPacket(s);
    p.resize(16);
    t.raw("truncated vlan tag", "drop_header", p, XDP_DROP, IG_R_TRUNCATED);
  }
  {
    auto p = buildPacket(t.req(kGet));
    p.resize(14 + 12);
    t.raw("truncated ipv4 header", "drop_header", p, XDP_DROP, IG_R_TRUNCATED);
  }
  {
    PacketSpec s = t.req(kGet);
    s.ip_options = std::vector<uint8_t>(40, 1);  // ihl 15
    auto p = buildPacket(s);
    p.resize(14 + 40);
    t.raw("truncated ipv4 options", "drop_header", p, XDP_DROP, IG_R_TRUNCATED);
  }
  {
    auto p = buildPacket(t.req(kPost));
    p.resize(p.size() - 10);
    t.raw("ipv4 total length beyond frame", "drop_header", p, XDP_DROP, IG_R_TRUNCATED);
  }
  {
    PacketSpec s = t.base();
    s.raw_l4 = std::vector<uint8_t>{0x9c, 0x40, 0x1f, 0x40, 0, 0, 0, 1, 0, 0};
    t.drop("truncated tcp header", s, IG_R_TRUNCATED);
  }
  {
    auto p = buildPacket(t.req(kGet, true));
    p.resize(14 + 20);
    t.raw("truncated ipv6 header", "drop_header", p, XDP_DROP, IG_R_TRUNCATED);
  }
  {
    auto p = buildPacket(t.req(kPost, true));
    p.resize(p.size() - 1);
    t.raw("ipv6 payload length beyond frame", "drop_header", p, XDP_DROP, IG_R_TRUNCATED);
  }
  {
    PacketSpec s = t.base(true);
    s.raw_l4 = std::vector<uint8_t>{0x9c, 0x40, 0x1f, 0x40, 0, 0, 0, 1};
    t.drop("ipv6 truncated tcp header", s, IG_R_TRUNCATED);
  }
  {
    PacketSpec s = t.base();
    s.vlans = {5};
    s.raw_l4 = std::vector<uint8_t>{0x9c, 0x40, 0x1f, 0x40, 0, 0};
    t.drop("vlan truncated tcp header", s, IG_R_TRUNCATED);
  }
  {
    auto p = buildPacket(t.req(kGet));
    p[14] = 0x55;  // version 5
    t.raw("ipv4 version 5", "drop_header", p, XDP_DROP, IG_R_BAD_IP_HEADER);
  }
  {
    auto p = buildPacket(t.req(kGet));
    p[14] = 0x44;  // ihl 4
    t.raw("ipv4 ihl 4", "drop_header", p, XDP_DROP, IG_R_BAD_IP_HEADER);
  }
  {
    auto p = buildPacket(t.req(kGet));
    p[16] = 0;
    p[17] = 16;  // total length < ihl
    t.raw("ipv4 total length below header", "drop_header", p, XDP_DROP, IG_R_BAD_IP_HEADER);
  }
  {
    auto p = buildPacket(t.req(kGet, true));
    p[14] = 0x40;
    t.raw("ipv6 ethertype with version 4", "drop_header", p, XDP_DROP, IG_R_BAD_IP_HEADER);
  }
  {
    auto p = buildPacket(t.req(kGet));
    p[14 + 20 + 12] = 0x40;  // doff 4
    t.raw("tcp data offset 4", "drop_header", p, XDP_DROP, IG_R_BAD_TCP_HEADER);
  }
  {
    auto p = buildPacket(t.req("0123456789"));
    p[14 + 20 + 12] = 0xf0;  // doff 15 > segment
    t.raw("tcp data offset beyond segment", "drop_header", p, XDP_DROP, IG_R_BAD_TCP_HEADER);
  }
  {
    PacketSpec s = t.base();
    s.raw_l4 = std::vector<uint8_t>{0x9c, 0x40, 0x1f, 0x40, 0, 0, 0, 1, 0, 0};
    auto p = buildPacket(s);
    p.resize(64, 0);  // Ethernet padding hides the short TCP length
    t.raw("ip length shorter than tcp header (padded frame)", "drop_header", p, XDP_DROP,
          IG_R_BAD_TCP_HEADER);
  }

  // ---- good HTTP/1 request starts
  t.ok("get ready", "request_h1", t.req(kGet));
  t.ok("post infer json", "request_h1", t.req(kPost));
  t.ok("get v1 models http/1.0", "request_h1", t.req("GET /v1/models/half_plus_two HTTP/1.0\r\n\r\n"));
  t.ok("get metrics", "request_h1", t.req("GET /metrics HTTP/1.1\r\nHost: gw\r\n\r\n"));
  t.ok("ipv6 post", "request_h1", t.req(kPost, true));
  {
    PacketSpec s = t.req(kGet);
    s.vlans = {100};
    t.ok("vlan get", "request_h1", s);
  }
  {
    PacketSpec s = t.req(kGet);
    s.ip_options = {1, 1, 1, 0};  // NOP NOP NOP EOL
    t.ok("ipv4 options get", "request_h1", s);
  }
  {
    PacketSpec s = t.req(kGet);
    s.tcp_options = {1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 7};
    t.ok("tcp timestamps get", "request_h1", s);
  }
  {
    PacketSpec s = t.req(kGet);
    s.dport = 8001;
    t.ok("second service port", "request_h1", s);
  }
  t.ok("path class rule", "request_h1", t.req("POST /v2/models/urgent/infer HTTP/1.1\r\nHost: a\r\n\r\n"), 0);
  t.ok("priority header 3", "request_h1",
       t.req("POST /v2/models/m/infer HTTP/1.1\r\nHost: gw\r\nx-infergate-priority: 3\r\n\r\n"), 3);
  t.ok("priority header mixed case", "request_h1",
       t.req("POST /v2/models/m/infer HTTP/1.1\r\nHost: gw\r\nUser-Agent: curl/7.88.1\r\n"
             "X-Infergate-Priority:2\r\nAccept: */*\r\n\r\n"),
       2);
  t.ok("priority header out of range", "request_h1",
       t.req("GET /v2/health/ready HTTP/1.1\r\nx-infergate-priority: 9\r\nHost: gw\r\n\r\n"), 1);
  t.ok("priority header after end of headers ignored", "request_h1",
       t.req("POST /v2/models/m/infer HTTP/1.1\r\nHost: gw\r\n\r\nx-infergate-priority: 0\r\n\r\n"), 1);
  t.ok("path class beats priority header", "request_h1",
       t.req("GET /v2/models/urgent HTTP/1.1\r\nx-infergate-priority: 3\r\n\r\n"), 0);
  t.ok("long target", "request_h1",
       t.req("GET /v2/models/m?q=" + std::string(1200, 'a') + " HTTP/1.1\r\n\r\n"));
  t.ok("segment ends inside target", "request_h1", t.req("GET /v2/models/abc"));
  t.ok("segment ends inside version", "request_h1", t.req("GET /v2/models/abc HTT"));
  t.ok("segment ends after method", "request_h1", t.req("GET "));
  {
    PacketSpec s = t.req("GET ");
    auto f = buildPacket(s);
    f.resize(60, 0);  // Ethernet minimum: the padding is not payload
    Fixture& fx = t.raw("padded tiny segment", "request_h1", f, XDP_PASS, IG_R_REQUEST);
    fx.tag_flags = kReq;
    fx.cls = 1;
  }
  {
    PacketSpec s = t.req(kGet);
    t.first("first segment get", s, XDP_PASS, IG_R_REQUEST, kReq | kFirst, 1);
  }

  // ---- continuations: nothing one segment can prove
  t.segment("json body continuation", t.req("{\"name\":\"x\",\"data\":[1,2,3]}"));
  t.segment("lower-case text", t.req("hello world"));
  t.segment("binary tensor bytes", t.req(std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8)));
  t.segment("upper-case run without space", t.req("ABCDEFGHIJKLMNOP"));
  t.segment("ipv6 continuation", t.req("0.5, 0.25]}]}", true));
  t.segment("nine-letter token", t.req("PROPPATCHX /v2/ HTTP/1.1\r\n"));

  // ---- rejected HTTP/1 request starts: RST via XDP_TX
  t.rst("method delete", "reject_h1", t.req("DELETE /v2/models/x HTTP/1.1\r\n\r\n"), IG_R_BAD_METHOD);
  t.rst("method put", "reject_h1", t.req("PUT /v2/models/x HTTP/1.1\r\n\r\n"), IG_R_BAD_METHOD);
  t.rst("method options *", "reject_h1", t.req("OPTIONS * HTTP/1.1\r\n\r\n"), IG_R_BAD_METHOD);
  t.rst("path not allowed", "reject_h1", t.req("GET /admin HTTP/1.1\r\n\r\n"), IG_R_BAD_PATH);
  t.rst("path prefix too short", "reject_h1", t.req("GET /v2 HTTP/1.1\r\n\r\n"), IG_R_BAD_PATH);
  t.rst("absolute-form target", "reject_h1", t.req("GET http://gw/v2/ HTTP/1.1\r\n\r\n"), IG_R_BAD_PATH);
  t.rst("http/2.0 version", "reject_h1", t.req("GET /v2/health HTTP/2.0\r\n\r\n"), IG_R_BAD_VERSION);
  t.rst("http/1.2 version", "reject_h1", t.req("GET /v2/health HTTP/1.2\r\n\r\n"), IG_R_BAD_VERSION);
  t.rst("partial bad version", "reject_h1", t.req("GET /v2/health HTTP/3"), IG_R_BAD_VERSION);
  t.rst("bare lf", "reject_h1", t.req("GET /v2/health HTTP/1.1\nHost: x\n\n"), IG_R_BAD_REQUEST_LINE);
  t.rst("ctl in target", "reject_h1", t.req(std::string("GET /v2/a\x01z HTTP/1.1\r\n\r\n")),
        IG_R_BAD_REQUEST_LINE);
  t.rst("del in target", "reject_h1", t.req(std::string("GET /v2/models/abcdefgh\x7f HTTP/1.1\r\n\r\n")),
        IG_R_BAD_REQUEST_LINE);
  t.rst("non-ascii in target", "reject_h1", t.req("GET /v2/caf\xc3\xa9 HTTP/1.1\r\n\r\n"),
        IG_R_BAD_REQUEST_LINE);
  t.rst("double space", "reject_h1", t.req("GET /v2/health  HTTP/1.1\r\n\r\n"), IG_R_BAD_REQUEST_LINE);
  t.rst("garbage version", "reject_h1", t.req("GET /v2/health XTTP/1.1\r\n\r\n"), IG_R_BAD_REQUEST_LINE);
  t.rst("tab separator in long target", "reject_h1",
        t.req("GET /v2/models/" + std::string(40, 'm') + "\tHTTP/1.1\r\n\r\n"), IG_R_BAD_REQUEST_LINE);
  t.rst("ipv6 bad method", "reject_h1", t.req("PATCH /v2/x HTTP/1.1\r\n\r\n", true), IG_R_BAD_METHOD);
  {
    PacketSpec s = t.req("GET /etc/passwd HTTP/1.1\r\n\r\n");
    s.vlans = {300};
    t.rst("vlan bad path", "reject_h1", s, IG_R_BAD_PATH);
  }
  {
    PacketSpec s = t.req("TRACE /v2/ HTTP/1.1\r\n\r\n");
    s.ip_options = {0x94, 0x04, 0, 0};  // router alert: the RST carries no options
    t.rst("ipv4 options bad method", "reject_h1", s, IG_R_BAD_METHOD);
  }
  {
    PacketSpec s = t.req("GET /admin HTTP/1.1\r\n\r\n");
    s.tcp_options = {1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 7};
    s.seq = 0xfffffff0;  // the ack wraps
    t.rst("tcp options, sequence wrap", "reject_h1", s, IG_R_BAD_PATH);
  }
  {
    PacketSpec s = t.req("TLS", false);
    s.payload = std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11);
    t.first("first segment tls client hello", s, XDP_TX, IG_R_BAD_REQUEST_LINE, kFirst);
  }
  {
    PacketSpec s = t.req("get /v2/health HTTP/1.1\r\n\r\n");
    t.first("first segment lower-case method", s, XDP_TX, IG_R_BAD_REQUEST_LINE, kFirst);
  }
  {
    PacketSpec s = t.req("hello\r\n");
    t.first("first segment text", s, XDP_TX, IG_R_BAD_REQUEST_LINE, kFirst);
  }

  // ---- HTTP/2 prior knowledge
  const std::string settings = h2Frame(18, 4, 0, 0);
  t.ok("h2 preface settings window headers", "request_h2",
       t.req(kPreface + settings + h2Frame(4, 8, 0, 0) + h2Frame(30, 1, 4, 1)), 1, kReq | kH2);
  t.ok("h2 preface only", "request_h2", t.req(kPreface), 1, kReq | kH2);
  t.ok("h2 partial preface", "request_h2", t.req(kPreface.substr(0, 16)), 1, kReq | kH2);
  t.ok("h2 empty settings", "request_h2", t.req(kPreface + h2Frame(0, 4, 0, 0)), 1, kReq | kH2);
  t.ok("h2 unknown frame type ignored", "request_h2",
       t.req(kPreface + settings + h2Frame(3, 0x20, 0xff, 0)), 1, kReq | kH2);
  t.ok("h2 settings header only (body in next segment)", "request_h2",
       t.req(kPreface + h2Frame(36, 4, 0, 0, 0)), 1, kReq | kH2);
  t.ok("ipv6 h2", "request_h2", t.req(kPreface + settings, true), 1, kReq | kH2);
  t.rst("h2 wrong preface", "reject_h2", t.req("PRI * HTTP/1.1\r\n\r\nSM\r\n\r\n"), IG_R_BAD_H2_PREFACE, kH2);
  t.rst("h2 partial wrong preface", "reject_h2", t.req("PRI * HTTP/3"), IG_R_BAD_H2_PREFACE, kH2);
  t.rst("h2 settings ack first", "reject_h2", t.req(kPreface + h2Frame(0, 4, 1, 0)), IG_R_BAD_H2_FRAME, kH2);
  t.rst("h2 headers before settings", "reject_h2", t.req(kPreface + h2Frame(10, 1, 4, 1)),
        IG_R_BAD_H2_FRAME, kH2);
  t.rst("h2 settings length 7", "reject_h2", t.req(kPreface + h2Frame(7, 4, 0, 0)), IG_R_BAD_H2_FRAME, kH2);
  t.rst("h2 settings on stream 1", "reject_h2", t.req(kPreface + h2Frame(6, 4, 0, 1)), IG_R_BAD_H2_FRAME, kH2);
  t.rst("h2 frame over max size", "reject_h2", t.req(kPreface + settings + h2Frame(20000, 0, 0, 1, 0)),
        IG_R_BAD_H2_FRAME, kH2);
  t.rst("h2 headers on even stream", "reject_h2", t.req(kPreface + settings + h2Frame(5, 1, 4, 2)),
        IG_R_BAD_H2_FRAME, kH2);
  t.rst("h2 headers on stream 0", "reject_h2", t.req(kPreface + settings + h2Frame(5, 1, 4, 0)),
        IG_R_BAD_H2_FRAME, kH2);
  t.rst("h2 push promise from client", "reject_h2", t.req(kPreface + settings + h2Frame(4, 5, 4, 1)),
        IG_R_BAD_H2_FRAME, kH2);
  t.rst("h2 ping length 4", "reject_h2", t.req(kPreface + settings + h2Frame(4, 6, 0, 0)),
        IG_R_BAD_H2_FRAME, kH2);
  t.rst("h2 window update length 3", "reject_h2", t.req(kPreface + settings + h2Frame(3, 8, 0, 0)),
        IG_R_BAD_H2_FRAME, kH2);
  t.rst("h2 rst_stream on stream 0", "reject_h2", t.req(kPreface + settings + h2Frame(4, 3, 0, 0)),
        IG_R_BAD_H2_FRAME, kH2);
  t.rst("h2 priority length 4", "reject_h2", t.req(kPreface + settings + h2Frame(4, 2, 0, 1)),
        IG_R_BAD_H2_FRAME, kH2);
  t.rst("h2 goaway on stream 3", "reject_h2", t.req(kPreface + settings + h2Frame(8, 7, 0, 3)),
        IG_R_BAD_H2_FRAME, kH2);
  t.rst("h2 data on stream 0", "reject_h2", t.req(kPreface + settings + h2Frame(4, 0, 0, 0)),
        IG_R_BAD_H2_FRAME, kH2);
  t.rst("ipv6 h2 bad frame", "reject_h2", t.req(kPreface + h2Frame(5, 4, 0, 0), true), IG_R_BAD_H2_FRAME, kH2);
  return std::move(t.out);
}

}  // namespace

XdpOptions fixtureOptions() {
  XdpOptions o;
  o.interface = "lo";
  o.service_ports = {8000, 8001};
  o.methods = {"GET", "POST"};
  o.path_prefixes = {"/v2/", "/v1/models/", "/metrics"};
  o.path_classes = {{"/v2/models/urgent", 0}};
  o.default_class = 1;
  o.send_rst = true;
  o.track_flows = true;
  o.tags = XdpOptions::TagPlacement::kAuto;  // metadata where the kernel accepts it (else none: no socket)
  o.priority_header = true;
  // Not the config file's defaults: the tables judge mid-stream request starts, and the
  // priority header counts from every source (the fixtures' clients are not loopback).
  o.reject_mid_stream = true;
  o.priority_from = XdpOptions::PriorityFrom::kAll;
  o.trusted_sources = {};
  return o;
}

const std::vector<Fixture>& fixtures() {
  static const std::vector<Fixture> kAll = makeFixtures();
  return kAll;
}

}  // namespace infergate::xdp::testing
