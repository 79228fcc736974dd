// ns per packet of the XDP ingress program for each fixture class, measured with
// BPF_PROG_TEST_RUN (repeat) next to the bare XDP_PASS program of the same object, in the
// same run, interleaved. The difference and the ratio matter, not the absolute figures.
//
//   xdp_ingress_bench [repeat=200000] [rounds=5] [--no-flows] [--no-priority-header]
//                     [--afxdp] [--cookies] [--trusted] [--cases] [--group=<class>]
//
// --trusted: the priority header counts only from trusted sources, with the default
// priority.trusted_sources (loopback): the shipped configuration. The fixtures' client
// (10.0.0.2) is not trusted, so its headers are ignored, as they would be in production.
// --cases: also print each fixture's median ingress and XDP_PASS ns and their difference.
// --group=<class>: time only the fixtures of that class (e.g. request_h1, segment).
//
// --afxdp: the fixture classes with the afxdp configuration (redirect_xsk, tags auto, the SYN
// cookie code loaded, cookie mode off; no socket is bound, so redirects become passes).
// --cookies: the same with cookie mode on (segments without a flow slot get a cookie check).
// Both also print the SYN cookie paths, measured one run per BPF_PROG_TEST_RUN call (a repeated
// run would see the SYN-ACK it wrote into the frame), mean of `repeat / 10` calls each, next to
// the bare XDP_PASS measured the same way: a SYN answered with a cookie SYN-ACK (IPv4, IPv6,
// every option), a pure ACK deferred, a first data segment with a valid cookie.
//
// Configurations: "filter" = xdp-filter defaults (flows tracked, RSTs on, no metadata);
// rejected classes use "reject" (flows not tracked, RSTs off) because a repeated run would
// otherwise measure the rejected-flow lookup after the first iteration, or an RST that the
// first iteration already wrote into the frame.
#include <linux/bpf.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <arpa/inet.h>

#include "common/secret.h"
#include "dataplane/tcp/syncookie.h"
#include "xdp/testing/fixtures.h"
#include "xdp/testing/prog_run.h"
#include "xdp/xdp_filter.h"

using namespace infergate::xdp;
using namespace infergate::xdp::testing;

namespace {

// Mean ns of one program run, over n BPF_PROG_TEST_RUN calls with repeat = 1.
double singleRunNs(int fd, const std::vector<uint8_t>& pkt, uint32_t n) {
  double sum = 0;
  for (uint32_t i = 0; i < n; ++i) sum += runXdp(fd, pkt, 1).duration_ns;
  return sum / n;
}

PacketSpec clientSyn(bool v6, uint16_t sport) {
  PacketSpec s;
  s.ipv6 = v6;
  if (v6) {
    s.src = "2001:db8::2";
    s.dst = "2001:db8::1";
  }
  s.sport = sport;
  s.flags = kSyn;
  s.seq = 1000;
  s.ack = 0;
  // Linux's SYN options: MSS, SACK-permitted, timestamps, NOP, window scale
  s.tcp_options = {2, 4, 5, 0xb4, 4, 2, 8, 10, 1, 2, 3, 4, 0, 0, 0, 0, 1, 3, 3, 7};
  return s;
}

void cookiePaths(XdpFilter& f, uint32_t n) {
  ig_cookie_keys keys{};
  keys.key[0] = infergate::common::randomSipKey();
  keys.key[1] = infergate::common::randomSipKey();
  if (!f.setCookieKeys(keys).ok() || !f.setCookieMode(true).ok()) {
    std::fprintf(stderr, "cannot turn cookie mode on\n");
    return;
  }
  std::printf("\n# SYN cookie paths: one run per call, mean of %u calls\n", n);
  std::printf("%-34s %12s %12s %10s\n", "path", "ingress ns", "xdp_pass ns", "diff ns");
  auto row = [&](const char* name, const std::vector<uint8_t>& pkt) {
    double a = singleRunNs(f.programFd(), pkt, n);
    double b = singleRunNs(f.passProgramFd(), pkt, n);
    std::printf("%-34s %12.1f %12.1f %10.1f\n", name, a, b, a - b);
  };
  row("syn -> cookie syn-ack, ipv4", buildPacket(clientSyn(false, 61000)));
  row("syn -> cookie syn-ack, ipv6", buildPacket(clientSyn(true, 61001)));
  uint32_t s4[4] = {}, d4[4] = {};
  inet_pton(AF_INET, "10.0.0.2", s4);
  inet_pton(AF_INET, "10.0.0.1", d4);
  uint32_t isn = ig_cookie_make(&keys, s4, d4, htons(61002), htons(8000), 0, 1000,
                                ig_cookie_encode_opts(1460, 7, 1, 1));
  PacketSpec ack;
  ack.sport = 61002;
  ack.flags = kAck;
  ack.seq = 1001;
  ack.ack = isn + 1;
  row("pure ack, valid cookie (deferred)", buildPacket(ack));
  ack.ack = isn + 2;
  row("pure ack, no cookie (passed)", buildPacket(ack));
  // a first data segment: a flow of its own per call would need a fresh port; the slot it
  // writes makes later calls the tracked path, so measure distinct ports
  double a = 0, b = 0;
  for (uint32_t i = 0; i < n; ++i) {
    uint16_t port = static_cast<uint16_t>(10000 + i % 50000);
    uint32_t c = ig_cookie_make(&keys, s4, d4, htons(port), htons(8000), 0, 1000,
                                ig_cookie_encode_opts(1460, 7, 1, 1));
    PacketSpec d;
    d.sport = port;
    d.seq = 1001;
    d.ack = c + 1;
    d.payload = "GET /v2/health/ready HTTP/1.1\r\nHost: gw\r\n\r\n";
    auto pkt = buildPacket(d);
    a += runXdp(f.programFd(), pkt, 1).duration_ns;
    b += runXdp(f.passProgramFd(), pkt, 1).duration_ns;
  }
  std::printf("%-34s %12.1f %12.1f %10.1f\n", "first data, valid cookie, request", a / n, b / n,
              (a - b) / n);
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t repeat = argc > 1 ? static_cast<uint32_t>(std::atoi(argv[1])) : 200000;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  XdpOptions filter_opts = fixtureOptions();
  filter_opts.tags = XdpOptions::TagPlacement::kOff;
  XdpOptions reject_opts = filter_opts;
  reject_opts.track_flows = false;
  reject_opts.send_rst = false;
  bool afxdp = false, cookies = false, cases = false;
  std::string only_group;
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--afxdp" || a == "--cookies") {
      afxdp = true;
      cookies = a == "--cookies";
      for (XdpOptions* o : {&filter_opts, &reject_opts}) {
        o->redirect_xsk = true;
        // Tags as afxdp loads them; no socket is bound, so nothing is redirected and a prefix
        // is never written (bench/xdp/tag_placement_bench measures the placements).
        o->tags = XdpOptions::TagPlacement::kAuto;
        o->reject_mid_stream = false;
        o->synack_mss = 1460;
      }
    } else if (a == "--no-flows") {
      filter_opts.track_flows = false;
    } else if (a == "--no-priority-header") {
      filter_opts.priority_header = false;
    } else if (a == "--trusted") {
      for (XdpOptions* o : {&filter_opts, &reject_opts}) {
        o->priority_from = XdpOptions::PriorityFrom::kTrusted;
        o->trusted_sources = XdpOptions{}.trusted_sources;
      }
    } else if (a == "--cases") {
      cases = true;
    } else if (a.rfind("--group=", 0) == 0) {
      only_group = a.substr(8);
    } else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  auto filter = XdpFilter::load(filter_opts);
  auto reject = XdpFilter::load(reject_opts);
  if (!filter.ok() || !reject.ok()) {
    std::fprintf(stderr, "cannot load the XDP program (needs root or CAP_BPF+CAP_PERFMON): %s\n",
                 std::string((filter.ok() ? reject.status() : filter.status()).message()).c_str());
    return 1;
  }
  if (cookies) {
    ig_cookie_keys keys{};
    keys.key[0] = infergate::common::randomSipKey();
    keys.key[1] = infergate::common::randomSipKey();
    for (auto* f : {&filter, &reject})
      if (!(***f).setCookieKeys(keys).ok() || !(***f).setCookieMode(true).ok()) return 1;
  }
  struct Acc {
    double ingress = 0, pass = 0;
    int n = 0;
  };
  std::map<std::string, Acc> groups;
  std::vector<std::string> order;
  for (const Fixture& f : fixtures()) {
    if (f.packet.size() < 14 || f.first_segment) continue;
    if (!only_group.empty() && f.group != only_group) continue;
    bool rejected = f.action == XDP_TX || f.action == XDP_DROP;
    XdpFilter& prog = rejected ? **reject : **filter;
    std::vector<double> ing, pas;
    for (int r = 0; r < rounds; ++r) {
      RunResult a = runXdp(prog.programFd(), f.packet, repeat);
      RunResult b = runXdp(prog.passProgramFd(), f.packet, repeat);
      if (a.err || b.err) {
        std::fprintf(stderr, "%s: test run failed\n", f.name.c_str());
        return 1;
      }
      ing.push_back(a.duration_ns);
      pas.push_back(b.duration_ns);
    }
    std::sort(ing.begin(), ing.end());
    std::sort(pas.begin(), pas.end());
    std::string g = f.group;
    if (!groups.count(g)) order.push_back(g);
    Acc& acc = groups[g];
    acc.ingress += ing[ing.size() / 2];  // median of rounds
    acc.pass += pas[pas.size() / 2];
    acc.n++;
    if (cases)
      std::printf("case %-14s %-48s %8.1f %8.1f %8.1f\n", g.c_str(), f.name.c_str(),
                  ing[ing.size() / 2], pas[pas.size() / 2], ing[ing.size() / 2] - pas[pas.size() / 2]);
  }
  std::printf("# XDP ingress vs bare XDP_PASS, BPF_PROG_TEST_RUN repeat=%u, median of %d rounds,\n"
              "# mean over the fixtures of each class\n",
              repeat, rounds);
  std::printf("%-14s %5s %12s %12s %10s %7s\n", "class", "cases", "ingress ns", "xdp_pass ns",
              "diff ns", "ratio");
  for (const auto& g : order) {
    const Acc& a = groups[g];
    double i = a.ingress / a.n, p = a.pass / a.n;
    std::printf("%-14s %5d %12.1f %12.1f %10.1f %7.2f\n", g.c_str(), a.n, i, p, i - p, i / p);
  }
  if (afxdp) {
    XdpOptions o = filter_opts;
    auto c = XdpFilter::load(o);
    if (!c.ok()) return 1;
    cookiePaths(**c, std::max<uint32_t>(1000, repeat / 10));
  }
  return 0;
}
