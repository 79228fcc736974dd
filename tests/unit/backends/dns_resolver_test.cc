// DnsResolver (backends/dns_resolver.h) against a fake DNS server on loopback (UDP, answers the
// test sets and changes), and a Pool whose endpoints come from a dns:/// entry: A and AAAA,
// NXDOMAIN and empty answers (the last good set is kept, counted), a silent server (timeout),
// the set following the answers (removed endpoints drain, added ones wait for a probe).
#include "backends/dns_resolver.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "backends/pool.h"
#include "common/metrics.h"

namespace infergate::backends {
namespace {

// A DNS server for tests: one UDP socket, A/AAAA answers per name.
class FakeDns {
 public:
  struct Records {
    std::vector<std::string> v4, v6;
    bool nxdomain = false;
    uint32_t ttl = 30;
  };
  FakeDns() {
    fd_ = ::socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { loop(); });
  }
  ~FakeDns() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::string server() const { return "127.0.0.1:" + std::to_string(port_); }
  void set(const std::string& name, Records r) {
    std::lock_guard<std::mutex> l(mu_);
    records_[name] = std::move(r);
  }
  void silent(bool s) { silent_ = s; }
  int queries() const { return queries_.load(); }

 private:
  void loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      uint8_t q[512];
      sockaddr_in from{};
      socklen_t flen = sizeof from;
      const ssize_t n = ::recvfrom(fd_, q, sizeof q, 0, reinterpret_cast<sockaddr*>(&from), &flen);
      if (n < 12) continue;
      ++queries_;
      if (silent_) continue;
      // Question: labels, then type and class.
      size_t off = 12;
      std::string name;
      while (off < static_cast<size_t>(n) && q[off] != 0) {
        const size_t l = q[off];
        if (!name.empty()) name += '.';
        name.append(reinterpret_cast<const char*>(q + off + 1), l);
        off += l + 1;
      }
      off += 1;
      if (off + 4 > static_cast<size_t>(n)) continue;
      const uint16_t qtype = static_cast<uint16_t>(q[off] << 8 | q[off + 1]);
      off += 4;
      std::string out(reinterpret_cast<const char*>(q), off);  // header + question
      out[2] = static_cast<char>(0x81);                        // QR, RD
      out[3] = static_cast<char>(0x80);                        // RA, rcode 0
      out[6] = out[7] = out[8] = out[9] = out[10] = out[11] = 0;
      Records r;
      bool known;
      {
        std::lock_guard<std::mutex> l(mu_);
        auto it = records_.find(name);
        known = it != records_.end();
        if (known) r = it->second;
      }
      if (!known || r.nxdomain) {
        out[3] = static_cast<char>(0x83);  // NXDOMAIN
      } else {
        const auto& list = qtype == 28 ? r.v6 : r.v4;
        uint16_t count = 0;
        for (const std::string& ip : list) {
          uint8_t raw[16];
          const int af = qtype == 28 ? AF_INET6 : AF_INET;
          if (inet_pton(af, ip.c_str(), raw) != 1) continue;
          const size_t rl = af == AF_INET6 ? 16 : 4;
          const uint8_t rr[] = {0xc0,
                                0x0c,
                                0,
                                static_cast<uint8_t>(qtype),
                                0,
                                1,
                                static_cast<uint8_t>(r.ttl >> 24),
                                static_cast<uint8_t>(r.ttl >> 16),
                                static_cast<uint8_t>(r.ttl >> 8),
                                static_cast<uint8_t>(r.ttl),
                                0,
                                static_cast<uint8_t>(rl)};
          out.append(reinterpret_cast<const char*>(rr), sizeof rr);
          out.append(reinterpret_cast<const char*>(raw), rl);
          ++count;
        }
        out[6] = static_cast<char>(count >> 8);
        out[7] = static_cast<char>(count & 0xff);
      }
      ::sendto(fd_, out.data(), out.size(), 0, reinterpret_cast<sockaddr*>(&from), flen);
    }
  }

  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> silent_{false};
  std::atomic<int> queries_{0};
  std::mutex mu_;
  std::map<std::string, Records> records_;
  std::thread thread_;
};

TEST(DnsEntry, Parses) {
  absl::StatusOr<DnsTargetSpec> s = parseDnsEntry("dns:///triton.ns.svc.cluster.local:8001");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->name, "triton.ns.svc.cluster.local");
  EXPECT_EQ(s->port, 8001);
  EXPECT_TRUE(isDnsEntry("dns:///a:1"));
  EXPECT_FALSE(isDnsEntry("10.0.0.1:8001"));
  EXPECT_EQ(parseDnsEntry("10.0.0.1:8001").status().code(), absl::StatusCode::kNotFound);
  for (const char* bad :
       {"dns:///a", "dns:///a:0", "dns:///a:65536", "dns:///:80", "dns://8.8.8.8/a:80",
        "dns:///a b:80", "dns:///a..b:80", "dns:///a:80x"}) {
    EXPECT_EQ(parseDnsEntry(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(joinHostPort("10.0.0.1", 80), "10.0.0.1:80");
  EXPECT_EQ(joinHostPort("fd00::1", 80), "[fd00::1]:80");
}

TEST(DnsResolver, AAndAaaaRecords) {
  FakeDns dns;
  dns.set("svc.test", {{"10.0.0.2", "10.0.0.1"}, {"fd00::7"}, false, 17});
  auto r = DnsResolver::create({dns.server(), 2000});
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<DnsResolver::Answer> a = (*r)->resolve({"svc.test"});
  ASSERT_EQ(a.size(), 1u);
  ASSERT_TRUE(a[0].status.ok()) << a[0].status;
  EXPECT_EQ(a[0].addresses, (std::vector<std::string>{"10.0.0.1", "10.0.0.2", "fd00::7"}));
  EXPECT_EQ(a[0].min_ttl_s, 17u);
}

TEST(DnsResolver, NxdomainEmptyAndSilent) {
  FakeDns dns;
  dns.set("gone.test", {{}, {}, true});
  dns.set("empty.test", {{}, {}, false});
  dns.set("ok.test", {{"10.1.1.1"}, {}, false});
  auto r = DnsResolver::create({dns.server(), 1000});
  ASSERT_TRUE(r.ok());
  std::vector<DnsResolver::Answer> a = (*r)->resolve({"gone.test", "empty.test", "ok.test"});
  EXPECT_EQ(a[0].status.code(), absl::StatusCode::kNotFound) << a[0].status;
  EXPECT_EQ(a[1].status.code(), absl::StatusCode::kNotFound) << a[1].status;
  ASSERT_TRUE(a[2].status.ok());
  EXPECT_EQ(a[2].addresses, (std::vector<std::string>{"10.1.1.1"}));
  dns.silent(true);
  const auto t0 = std::chrono::steady_clock::now();
  a = (*r)->resolve({"ok.test"});
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_EQ(a[0].status.code(), absl::StatusCode::kUnavailable) << a[0].status;
  EXPECT_LE(ms, 1500);  // the whole budget, not c-ares' own retries beyond it
}

TEST(DnsResolver, BadServerRefused) {
  EXPECT_EQ(DnsResolver::create({"not an address", 1000}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

class NullClient : public EndpointClient {
 public:
  explicit NullClient(std::string a) : a_(std::move(a)) {}
  const std::string& address() const override { return a_; }
  absl::Status probe(bool) override { return absl::OkStatus(); }
  void send(const Batch&, const SendOptions&, SendDone done) override {
    done(std::vector<BatchTensor>{}, false);
  }

 private:
  std::string a_;
};

TEST(PoolDns, EndpointsFollowTheAnswersAndKeepTheLastGoodSet) {
  FakeDns dns;
  dns.set("pool.test", {{"10.0.0.1", "10.0.0.2"}, {"fd00::1"}, false, 30});
  RemoteBackendConfig cfg;
  cfg.endpoints = {"dns:///pool.test:8001", "127.0.0.9:9"};
  cfg.dns_server = dns.server();
  cfg.health_check_interval_ms = 3600 * 1000;
  cfg.startup_timeout_ms = 0;
  cfg.dns_refresh_ms = 3600 * 1000;  // resolutions only when the test asks
  common::MetricsRegistry metrics;
  std::vector<std::unique_ptr<EndpointClient>> clients;
  clients.push_back(std::make_unique<NullClient>("127.0.0.9:9"));
  Pool pool("m", "triton", cfg, std::move(clients), &metrics);
  pool.setClientFactory([](const std::string& a) { return std::make_unique<NullClient>(a); });
  ASSERT_TRUE(pool.start(true).ok());  // resolves first
  EXPECT_EQ(pool.endpoints(), (std::vector<std::string>{"127.0.0.9:9", "10.0.0.1:8001",
                                                        "10.0.0.2:8001", "[fd00::1]:8001"}));
  // One removed, one added.
  dns.set("pool.test", {{"10.0.0.2", "10.0.0.3"}, {"fd00::1"}, false, 30});
  pool.resolveAll();
  EXPECT_EQ(pool.endpoints(), (std::vector<std::string>{"127.0.0.9:9", "10.0.0.2:8001",
                                                        "[fd00::1]:8001", "10.0.0.3:8001"}));
  pool.reap();  // 10.0.0.1 was idle: closed
  EXPECT_EQ(pool.status().size(), 4u);
  // NXDOMAIN, then an empty answer, then silence: the last good set stays.
  dns.set("pool.test", {{}, {}, true});
  pool.resolveAll();
  dns.set("pool.test", {{}, {}, false});
  pool.resolveAll();
  EXPECT_EQ(pool.endpoints().size(), 4u);
  const std::string text = metrics.renderPrometheus();
  EXPECT_NE(text.find("infergate_backend_dns_empty_total{model=\"m\"} 2"), std::string::npos)
      << text;
  EXPECT_NE(text.find("infergate_backend_dns_resolutions_total{model=\"m\"} 4"), std::string::npos);
  EXPECT_NE(text.find("infergate_backend_endpoints{model=\"m\"} 4"), std::string::npos);
}

TEST(PoolDns, ResolverThreadRefreshesOnItsInterval) {
  FakeDns dns;
  dns.set("t.test", {{"10.0.0.1"}, {}, false, 1});
  RemoteBackendConfig cfg;
  cfg.endpoints = {"dns:///t.test:1"};
  cfg.dns_server = dns.server();
  cfg.health_check_interval_ms = 3600 * 1000;
  cfg.startup_timeout_ms = 0;
  cfg.dns_refresh_ms = 100;
  cfg.dns_min_refresh_ms = 20;
  Pool pool("m", "triton", cfg, {}, nullptr);
  pool.setClientFactory([](const std::string& a) { return std::make_unique<NullClient>(a); });
  ASSERT_TRUE(pool.start(true).ok());
  EXPECT_EQ(pool.endpoints(), (std::vector<std::string>{"10.0.0.1:1"}));
  dns.set("t.test", {{"10.0.0.5"}, {}, false, 1});
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (pool.endpoints() != std::vector<std::string>{"10.0.0.5:1"} &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(pool.endpoints(), (std::vector<std::string>{"10.0.0.5:1"}));
}

}  // namespace
}  // namespace infergate::backends
