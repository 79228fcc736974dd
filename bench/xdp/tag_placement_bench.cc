// ns per packet of the XDP ingress program in afxdp mode for each tag placement (docs/HOSTS.md):
// the tag in XDP metadata (bpf_xdp_adjust_meta) against the 16-byte prefix (bpf_xdp_adjust_head,
// the fallback for kernels that refuse metadata), next to the bare XDP_PASS program, in one run.
//
//   tag_placement_bench [calls=20000] [rounds=5]
//
// The tag is written only on a redirect, so each program runs with an AF_XDP socket bound on
// queue 0 of a veth pair (one per placement) in a private network namespace (made at start,
// gone at exit): a service frame's verdict is XDP_REDIRECT, as in afxdp mode (BPF_PROG_TEST_RUN
// does not carry the redirect out). Each figure is the mean of `calls` BPF_PROG_TEST_RUN calls of
// one run each: a repeated run would prepend a second tag to the frame the first one wrote.
// Placements are interleaved per packet, the first alternating by round; medians over rounds. Needs
// root. A placement the kernel refuses is reported as such.
#include <linux/bpf.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <bpf/bpf.h>

#include "dataplane/xsk/xsk_device.h"
#include "xdp/testing/fixtures.h"
#include "xdp/testing/packet_builder.h"
#include "xdp/testing/prog_run.h"
#include "xdp/xdp_filter.h"

using namespace infergate::xdp;
using namespace infergate::xdp::testing;
using Placement = XdpOptions::TagPlacement;

namespace {

double meanNs(int fd, const std::vector<uint8_t>& pkt, uint32_t n, uint32_t* retval) {
  double sum = 0;
  for (uint32_t i = 0; i < n; ++i) {
    RunResult r = runXdp(fd, pkt, 1);
    sum += r.duration_ns;
    *retval = r.retval;
  }
  return sum / n;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const uint32_t calls = argc > 1 ? static_cast<uint32_t>(std::atoi(argv[1])) : 20000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  if (geteuid() != 0) {
    std::fprintf(stderr, "needs root (a network namespace, XDP, AF_XDP)\n");
    return 1;
  }
  if (unshare(CLONE_NEWNET | CLONE_NEWNS) != 0) {
    std::perror("unshare");
    return 1;
  }
  mount("", "/", nullptr, MS_REC | MS_PRIVATE, nullptr);
  // One veth pair per placement: each program keeps its own socket bound on queue 0.
  if (std::system("ip link add igb0 type veth peer name igb1 && ip link set igb0 up && "
                  "ip link set igb1 up && ip link add igc0 type veth peer name igc1 && "
                  "ip link set igc0 up && ip link set igc1 up") != 0) {
    std::fprintf(stderr, "cannot create the veth pair\n");
    return 1;
  }
  struct Loaded {
    std::unique_ptr<XdpFilter> filter;
    std::unique_ptr<infergate::dataplane::xsk::XskDevice> dev;
  };
  std::map<std::string, Loaded> progs;
  for (Placement p : {Placement::kMetadata, Placement::kPrefix}) {
    const char* ifname = p == Placement::kMetadata ? "igb0" : "igc0";
    XdpOptions o = fixtureOptions();
    o.interface = ifname;
    o.redirect_xsk = true;
    o.reject_mid_stream = false;
    o.track_flows = false;  // every call judged alone
    o.tags = p;
    const std::string name(tagPlacementName(p));
    auto f = XdpFilter::load(o);
    if (!f.ok()) {
      std::printf("# %s: not loaded: %s\n", name.c_str(),
                  std::string(f.status().message()).c_str());
      continue;
    }
    infergate::dataplane::xsk::XskOptions so;
    so.interface = ifname;
    so.rx_frames = 64;
    so.hold_frames = 32;
    so.tx_frames = 64;
    so.tag_mode = static_cast<uint8_t>((*f)->tagMode());
    so.xskmap_fd = (*f)->xskMapFd();
    auto d = infergate::dataplane::xsk::XskDevice::open(so);
    if (!d.ok()) {
      std::fprintf(stderr, "AF_XDP socket: %s\n", std::string(d.status().message()).c_str());
      return 1;
    }
    bpf_prog_info info{};
    uint32_t len = sizeof(info);
    bpf_obj_get_info_by_fd((*f)->programFd(), &info, &len);
    std::printf("# %s: loaded (%s); verified_insns %u\n", name.c_str(), (*f)->tagReason().c_str(),
                info.verified_insns);
    progs[name] = Loaded{std::move(*f), std::move(*d)};
  }
  if (progs.empty()) return 1;

  PacketSpec req;
  req.payload =
      "POST /v2/models/identity/infer HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}";
  PacketSpec seg = req;
  seg.payload = std::string(1200, 'x');  // a continuation segment (not a request start)
  PacketSpec syn = req;
  syn.payload.clear();
  syn.flags = kSyn;
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> packets = {
      {"request start (HTTP/1.1)", buildPacket(req)},
      {"segment (1200 bytes)", buildPacket(seg)},
      {"syn", buildPacket(syn)}};

  std::printf("# %u calls of one run each per figure, %d rounds, medians; ns per packet\n", calls,
              rounds);
  std::map<std::string, std::vector<double>> ingress, pass;
  std::map<std::string, uint32_t> verdict;
  std::vector<std::string> order;
  for (auto& [name, l] : progs) order.push_back(name);
  for (int r = 0; r < rounds; ++r) {
    for (const auto& [what, pkt] : packets) {
      // Placements interleaved per packet, the first one alternating by round.
      for (size_t i = 0; i < order.size(); ++i) {
        const std::string& name = order[(i + static_cast<size_t>(r)) % order.size()];
        Loaded& l = progs[name];
        uint32_t rv = 0, pv = 0;
        pass[name + "|" + what].push_back(meanNs(l.filter->passProgramFd(), pkt, calls, &pv));
        ingress[name + "|" + what].push_back(meanNs(l.filter->programFd(), pkt, calls, &rv));
        verdict[name + "|" + what] = rv;
      }
    }
  }
  std::printf("%-10s %-26s %10s %12s %10s %9s\n", "placement", "packet", "ingress", "xdp_pass",
              "diff", "verdict");
  for (const auto& [what, pkt] : packets) {
    for (auto& [name, l] : progs) {
      const std::string k = name + "|" + what;
      const double a = median(ingress[k]), b = median(pass[k]);
      std::printf("%-10s %-26s %10.1f %12.1f %10.1f %9s\n", name.c_str(), what.c_str(), a, b, a - b,
                  verdict[k] == XDP_REDIRECT ? "redirect" : std::to_string(verdict[k]).c_str());
    }
  }
  if (progs.size() == 2) {
    std::printf("# prefix - metadata (ingress - xdp_pass):");
    for (const auto& [what, pkt] : packets) {
      const double m = median(ingress["metadata|" + what]) - median(pass["metadata|" + what]);
      const double p = median(ingress["prefix|" + what]) - median(pass["prefix|" + what]);
      std::printf("  %s %+.1f", what.c_str(), p - m);
    }
    std::printf("\n");
  }
  return 0;
}
