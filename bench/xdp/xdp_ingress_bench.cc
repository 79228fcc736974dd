// ns per packet of the XDP ingress program for each fixture class, measured with
// BPF_PROG_TEST_RUN (repeat) next to the bare XDP_PASS program of the same object, in the
// same run, interleaved. The difference and the ratio matter, not the absolute figures.
//
//   xdp_ingress_bench [repeat=200000] [rounds=5] [--no-flows] [--no-priority-header]
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

#include "xdp/testing/fixtures.h"
#include "xdp/testing/prog_run.h"
#include "xdp/xdp_filter.h"

using namespace infergate::xdp;
using namespace infergate::xdp::testing;

int main(int argc, char** argv) {
  uint32_t repeat = argc > 1 ? static_cast<uint32_t>(std::atoi(argv[1])) : 200000;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  XdpOptions filter_opts = fixtureOptions();
  filter_opts.write_metadata = false;
  XdpOptions reject_opts = filter_opts;
  reject_opts.track_flows = false;
  reject_opts.send_rst = false;
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--no-flows") {
      filter_opts.track_flows = false;
    } else if (a == "--no-priority-header") {
      filter_opts.priority_header = false;
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
  struct Acc {
    double ingress = 0, pass = 0;
    int n = 0;
  };
  std::map<std::string, Acc> groups;
  std::vector<std::string> order;
  for (const Fixture& f : fixtures()) {
    if (f.packet.size() < 14 || f.first_segment) continue;
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
  return 0;
}
