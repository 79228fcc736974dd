// Issue 19: per-tenant limits (frontend/tenants.h): classification by API key and source CIDR,
// the token bucket with its Retry-After refill hint, the in-flight cap, the metrics, and the
// refusals of an inconsistent configuration.
#include "frontend/tenants.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "backends/retry_after.h"

namespace infergate::frontend {
namespace {

common::Cidr cidr(const char* text) {
  absl::StatusOr<common::Cidr> c = common::parseCidr(text);
  EXPECT_TRUE(c.ok()) << text;
  return c.ok() ? *c : common::Cidr{};
}

common::IpBytes ip(const char* text) { return cidr(text).addr; }

TenantLimits limits(double rate, uint64_t burst, uint32_t max_concurrent,
                    std::optional<int> priority_class) {
  TenantLimits l;
  l.rate = rate;
  l.burst = burst;
  l.max_concurrent = max_concurrent;
  l.priority_class = priority_class;
  return l;
}

TenantSpec tenant(std::string name, std::vector<const char*> sources, std::vector<std::string> keys,
                  TenantLimits limits = {}) {
  TenantSpec t;
  t.name = std::move(name);
  for (const char* s : sources) t.sources.push_back(cidr(s));
  t.api_keys = std::move(keys);
  t.limits = limits;
  return t;
}

class TenantsTest : public ::testing::Test {
 protected:
  void make(TenantsOptions o) {
    absl::StatusOr<std::unique_ptr<TenantLimiter>> l =
        TenantLimiter::create(std::move(o), &clock_, &metrics_);
    ASSERT_TRUE(l.ok()) << l.status();
    limiter_ = std::move(*l);
  }
  double sample(const std::string& series) {
    const std::string text = "\n" + metrics_.renderPrometheus();
    const std::string key = "\n" + series + " ";
    const size_t p = text.find(key);
    if (p == std::string::npos) return -1;
    return std::stod(text.substr(p + key.size(), text.find('\n', p + 1) - p - key.size()));
  }

  common::ManualClock clock_;
  common::MetricsRegistry metrics_;
  std::unique_ptr<TenantLimiter> limiter_;
};

TEST_F(TenantsTest, ClassifiesByKeyThenMostSpecificSourceThenDefault) {
  TenantsOptions o;
  o.tenants.push_back(tenant("lab", {"10.0.0.0/8"}, {}));
  o.tenants.push_back(tenant("team", {"10.1.0.0/16", "2001:db8::/32"}, {"team-key"}));
  o.tenants.push_back(tenant("partner", {}, {"partner-key-1", "partner-key-2"}));
  make(std::move(o));
  const int lab = 1, team = 2, partner = 3;
  EXPECT_EQ(limiter_->tenants(), 4u);
  EXPECT_EQ(limiter_->name(0), "default");
  EXPECT_EQ(limiter_->name(lab), "lab");
  // Sources: the longest prefix wins whatever the order in the config.
  EXPECT_EQ(limiter_->tenantOfSource(ip("10.2.3.4")), lab);
  EXPECT_EQ(limiter_->tenantOfSource(ip("10.1.3.4")), team);
  EXPECT_EQ(limiter_->tenantOfSource(ip("2001:db8::7")), team);
  EXPECT_EQ(limiter_->tenantOfSource(ip("192.0.2.1")), TenantLimiter::kDefaultTenant);
  EXPECT_EQ(limiter_->tenantOfSource(std::nullopt), TenantLimiter::kDefaultTenant);
  // Keys: exact bytes only.
  EXPECT_EQ(limiter_->tenantOfKey("team-key"), team);
  EXPECT_EQ(limiter_->tenantOfKey("partner-key-2"), partner);
  EXPECT_EQ(limiter_->tenantOfKey("partner-key-"), std::nullopt);
  EXPECT_EQ(limiter_->tenantOfKey(std::string_view("team-key\0", 9)),
            std::nullopt);  // no zero-padding collision
  EXPECT_EQ(limiter_->tenantOfKey(""), std::nullopt);
  EXPECT_EQ(limiter_->tenantOfKey(std::string(kMaxApiKeyBytes + 1, 'x')), std::nullopt);
  // A known key beats the source; an unknown key falls back to it.
  const std::string key = "partner-key-1", bad = "guess";
  EXPECT_EQ(limiter_->classify(lab, &key), partner);
  EXPECT_EQ(limiter_->classify(lab, &bad), lab);
  EXPECT_EQ(limiter_->classify(lab, nullptr), lab);
  EXPECT_EQ(limiter_->classify(99, nullptr), TenantLimiter::kDefaultTenant);
}

TEST_F(TenantsTest, RateRefusalCarriesTheRefillTime) {
  TenantsOptions o;
  o.tenants.push_back(tenant("a", {}, {"k"}, limits(0.2, 2, 0, std::nullopt)));
  make(std::move(o));
  // The burst: two at once.
  TenantAdmission a1 = limiter_->admit(1);
  EXPECT_TRUE(a1.status.ok());
  clock_.advanceNs(100'000'000);
  TenantAdmission a2 = limiter_->admit(1);
  EXPECT_TRUE(a2.status.ok());
  clock_.advanceNs(100'000'000);
  // The third is 4.8 s early (one token per 5 s): Retry-After 5.
  TenantAdmission r = limiter_->admit(1);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status.message(), "tenant 'a' is over its request rate (0.2 per second, burst 2)");
  EXPECT_EQ(backends::retryAfterOf(r.status), 5u);
  EXPECT_EQ(r.lease, nullptr);
  EXPECT_EQ(limiter_->inflight(1), 2u);  // the refusal holds no place
  // 4.8 s later (exactly the hint's wait, to the nanosecond) a token is back.
  clock_.advanceNs(4'799'999'999);
  r = limiter_->admit(1);
  EXPECT_FALSE(r.status.ok());
  EXPECT_EQ(backends::retryAfterOf(r.status), 1u);  // 1 ns: the minimum, 1 s
  clock_.advanceNs(1);
  EXPECT_TRUE(limiter_->admit(1).status.ok());
  EXPECT_FALSE(limiter_->admit(1).status.ok());
  EXPECT_EQ(sample("infergate_tenant_requests_total{result=\"admitted\",tenant=\"a\"}"), 3);
  EXPECT_EQ(sample("infergate_tenant_requests_total{result=\"rate_limited\",tenant=\"a\"}"), 3);
}

TEST_F(TenantsTest, RetryAfterIsCappedAndBurstDefaultsToTheRate) {
  TenantsOptions o;
  o.tenants.push_back(
      tenant("slow", {}, {}, limits(0.01, 0, 0, std::nullopt)));  // one per 100 s, burst 1
  o.tenants.push_back(tenant("fast", {}, {}, limits(3, 0, 0, std::nullopt)));  // burst 3
  make(std::move(o));
  EXPECT_TRUE(limiter_->admit(1).status.ok());
  TenantAdmission r = limiter_->admit(1);
  EXPECT_EQ(backends::retryAfterOf(r.status), 60u);  // 100 s, capped
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter_->admit(2).status.ok()) << i;
  r = limiter_->admit(2);
  EXPECT_FALSE(r.status.ok());
  EXPECT_EQ(backends::retryAfterOf(r.status), 1u);  // 1/3 s
}

TEST_F(TenantsTest, ConcurrencyCapHoldsUntilLeasesGo) {
  TenantsOptions o;
  o.tenants.push_back(tenant("a", {}, {}, limits(1, 3, 2, std::nullopt)));
  make(std::move(o));
  TenantAdmission a1 = limiter_->admit(1);
  TenantAdmission a2 = limiter_->admit(1);
  ASSERT_TRUE(a1.status.ok());
  ASSERT_TRUE(a2.status.ok());
  ASSERT_NE(a1.lease, nullptr);
  EXPECT_EQ(limiter_->inflight(1), 2u);
  EXPECT_EQ(sample("infergate_tenant_inflight{tenant=\"a\"}"), 2);
  TenantAdmission r = limiter_->admit(1);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status.message(), "tenant 'a' has 2 requests in flight, its limit (max_concurrent)");
  EXPECT_EQ(backends::retryAfterOf(r.status), 1u);
  // The refusal at the cap spent no token: the third token is still there.
  a1.lease.reset();
  EXPECT_EQ(limiter_->inflight(1), 1u);
  EXPECT_EQ(sample("infergate_tenant_inflight{tenant=\"a\"}"), 1);
  TenantAdmission a3 = limiter_->admit(1);
  EXPECT_TRUE(a3.status.ok()) << a3.status;
  EXPECT_EQ(sample("infergate_tenant_requests_total{result=\"concurrency_limited\",tenant=\"a\"}"),
            1);
}

TEST_F(TenantsTest, DefaultTenantUnlimitedUnlessConfigured) {
  make(TenantsOptions{});
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(limiter_->admit(0).status.ok());
  TenantsOptions o;
  o.default_limits = limits(1, 1, 0, 2);
  common::MetricsRegistry other;
  auto l = TenantLimiter::create(std::move(o), &clock_, &other);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ((*l)->priorityClass(0), 2);
  EXPECT_TRUE((*l)->admit(0).status.ok());
  EXPECT_FALSE((*l)->admit(0).status.ok());
  EXPECT_NE(other.renderPrometheus().find(
                "infergate_tenant_requests_total{result=\"rate_limited\",tenant=\"default\"} 1"),
            std::string::npos);
}

TEST_F(TenantsTest, KeysNeverAppearInMetricsOrErrors) {
  TenantsOptions o;
  o.tenants.push_back(tenant("a", {}, {"s3cr3t-key"}, limits(1, 1, 0, std::nullopt)));
  make(std::move(o));
  const std::string key = "s3cr3t-key";
  const int t = limiter_->classify(0, &key);
  EXPECT_TRUE(limiter_->admit(t).status.ok());
  const absl::Status st = limiter_->admit(t).status;
  EXPECT_EQ(std::string(st.message()).find("s3cr3t"), std::string::npos);
  EXPECT_EQ(metrics_.renderPrometheus().find("s3cr3t"), std::string::npos);
}

TEST_F(TenantsTest, ConcurrentAdmissionNeverExceedsCapOrBurst) {
  TenantsOptions o;
  o.tenants.push_back(tenant("capped", {}, {}, limits(0, 0, 3, std::nullopt)));
  o.tenants.push_back(tenant("bucket", {}, {}, limits(0.001, 500, 0, std::nullopt)));
  make(std::move(o));
  std::atomic<int> over{0}, bucket_ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        TenantAdmission a = limiter_->admit(1);
        if (a.status.ok() && limiter_->inflight(1) > 3) ++over;
        if (limiter_->admit(2).status.ok()) ++bucket_ok;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(over.load(), 0);
  EXPECT_EQ(limiter_->inflight(1), 0u);
  EXPECT_EQ(bucket_ok.load(), 500);  // the clock stands still: exactly the burst
}

TEST(TenantsCreate, RefusesWhatTheConfigCannotDescribe) {
  auto refused = [](TenantsOptions o) {
    auto l = TenantLimiter::create(std::move(o), nullptr, nullptr);
    return l.ok() ? std::string("ok") : std::string(l.status().message());
  };
  {
    TenantsOptions o;
    o.tenants.push_back(tenant("default", {}, {}));
    EXPECT_EQ(refused(o),
              "tenant 0: name 'default' must be 1..64 of [A-Za-z0-9_-] and not 'default'");
  }
  {
    TenantsOptions o;
    o.tenants.push_back(tenant("a b", {}, {}));
    EXPECT_NE(refused(o).find("name 'a b'"), std::string::npos);
  }
  {
    TenantsOptions o;
    o.tenants.push_back(tenant("a", {}, {}));
    o.tenants.push_back(tenant("a", {}, {}));
    EXPECT_EQ(refused(o), "tenant 'a' is named twice");
  }
  {
    TenantsOptions o;
    o.tenants.push_back(tenant("a", {"10.0.0.0/8"}, {}));
    o.tenants.push_back(tenant("b", {"10.0.0.0/8"}, {}));
    EXPECT_EQ(refused(o), "tenant 'b': source 10.0.0.0/8 is also tenant 'a''s");
  }
  {
    TenantsOptions o;
    o.tenants.push_back(tenant("a", {}, {"same"}));
    o.tenants.push_back(tenant("b", {}, {"same"}));
    EXPECT_EQ(refused(o), "tenant 'b': an API key is also tenant 'a''s");
  }
  {
    TenantsOptions o;
    o.tenants.push_back(tenant("a", {}, {std::string(kMaxApiKeyBytes + 1, 'k')}));
    EXPECT_EQ(refused(o), "tenant 'a': an API key must be 1..256 bytes");
  }
  {
    TenantsOptions o;
    o.tenants.push_back(tenant("a", {}, {}, limits(2e6, 0, 0, std::nullopt)));
    EXPECT_NE(refused(o).find("rate 2000000 is outside"), std::string::npos) << refused(o);
  }
  {
    TenantsOptions o;
    o.tenants.push_back(tenant("a", {}, {}, limits(0, 0, 0, 4)));
    EXPECT_EQ(refused(o), "tenant 'a': priority class 4 is outside 0..3");
  }
  {
    TenantsOptions o;
    o.api_key_header = "x api";
    EXPECT_EQ(refused(o), "api_key_header 'x api' is not a header name");
  }
  {
    TenantsOptions o;
    for (size_t i = 0; i <= kMaxTenants; ++i)
      o.tenants.push_back(tenant("t" + std::to_string(i), {}, {}));
    EXPECT_EQ(refused(o), "257 tenants (at most 256)");
  }
}

}  // namespace
}  // namespace infergate::frontend
