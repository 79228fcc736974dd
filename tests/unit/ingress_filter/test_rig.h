#pragma once
// A FilteringDevice over the tests' FakePacketDevice, configured like the XDP program
// (xdp::buildConfig and xdp::cidrEntries over XdpOptions, as the app does), on a manual clock.

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "common/clock.h"
#include "dataplane/ingress_filter/ingress_filter.h"
#include "dataplane/tcp/fake_device.h"
#include "xdp/xdp_filter.h"

namespace infergate::dataplane::ingress_filter {

inline FilterOptions filterOptionsFor(const xdp::XdpOptions& xo) {
  FilterOptions o;
  absl::Status s = xdp::buildConfig(xo, &o.config);
  EXPECT_TRUE(s.ok()) << s;
  auto cidrs = xdp::cidrEntries(xo);
  EXPECT_TRUE(cidrs.ok()) << cidrs.status();
  if (cidrs.ok())
    for (const xdp::CidrEntry& e : *cidrs) o.cidrs.push_back({e.cidr, e.cls, e.exempt, e.trusted});
  o.bucket_entries = xo.bucket_entries;
  o.flow_secret = {0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  return o;
}

struct Rig {
  explicit Rig(const FilterOptions& o) {
    auto f = FilteringDevice::create(dev, o, clock);
    EXPECT_TRUE(f.ok()) << f.status();
    if (f.ok()) filter = std::move(*f);
  }
  // One rxBurst through the filter; the frames it passed (the caller releases them).
  std::vector<Frame> burst(size_t max = 64) {
    std::vector<Frame> fr(max);
    fr.resize(filter->rxBurst(fr.data(), max));
    return fr;
  }
  void release(const std::vector<Frame>& fr) { filter->rxRelease(fr.data(), fr.size()); }
  // Injects one frame, runs one burst, releases what passed; returns the passed frames' meta
  // and bytes (copied before the release).
  struct Passed {
    std::vector<uint64_t> meta;
    std::vector<std::vector<uint8_t>> bytes;
  };
  Passed run(const std::vector<uint8_t>& frame) {
    dev.inject(frame);
    Passed p;
    std::vector<Frame> fr = burst();
    for (const Frame& f : fr) {
      p.meta.push_back(f.meta);
      p.bytes.emplace_back(f.data, f.data + f.len);
    }
    release(fr);
    return p;
  }

  tcp::FakePacketDevice dev;
  common::ManualClock clock;
  std::unique_ptr<FilteringDevice> filter;
};

}  // namespace infergate::dataplane::ingress_filter
