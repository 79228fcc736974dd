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
#include "frontend/client_priority.h"

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

// Reload: a new limiter built from the previous one. Persisting tenants keep their in-flight
// count (leases of the old limiter release into it) and, with the same rate and burst, their
// bucket; a changed rate starts a full bucket at the new rate; a new tenant starts fresh.
TEST_F(TenantsTest, ReloadCarriesInFlightAndUnchangedBucketsByName) {
  TenantsOptions o;
  o.tenants.push_back(tenant("a", {}, {"ka"}, limits(1, 2, 2, std::nullopt)));
  o.tenants.push_back(tenant("b", {}, {"kb"}, limits(1, 1, 0, std::nullopt)));
  make(std::move(o));
  const std::string ka = "ka", kb = "kb", kc = "kc";
  TenantAdmission a1 = limiter_->admit(limiter_->classify(0, &ka));
  TenantAdmission a2 = limiter_->admit(limiter_->classify(0, &ka));
  ASSERT_TRUE(a1.status.ok());
  ASSERT_TRUE(a2.status.ok());
  ASSERT_TRUE(limiter_->admit(limiter_->classify(0, &kb)).status.ok());
  ASSERT_FALSE(limiter_->admit(limiter_->classify(0, &kb)).status.ok());  // b: burst 1 spent

  TenantsOptions n;  // reordered, a's cap raised, b's rate raised, c added
  n.tenants.push_back(tenant("c", {}, {"kc"}, limits(0, 0, 1, std::nullopt)));
  n.tenants.push_back(tenant("b", {}, {"kb"}, limits(10, 2, 0, std::nullopt)));
  n.tenants.push_back(tenant("a", {}, {"ka"}, limits(1, 2, 3, std::nullopt)));
  absl::StatusOr<std::unique_ptr<TenantLimiter>> next =
      TenantLimiter::create(std::move(n), &clock_, &metrics_, limiter_.get());
  ASSERT_TRUE(next.ok()) << next.status();
  TenantLimiter& v2 = **next;
  const int a = v2.classify(0, &ka);
  EXPECT_EQ(v2.name(a), "a");
  EXPECT_EQ(v2.inflight(a), 2u);  // carried over
  // a: under its new cap (2 < 3), but its bucket (same rate and burst) is still empty.
  TenantAdmission r = v2.admit(a);
  EXPECT_EQ(r.status.message(), "tenant 'a' is over its request rate (1 per second, burst 2)");
  EXPECT_EQ(backends::retryAfterOf(r.status), 1u);
  // b: a full bucket at the new rate: exactly burst 2, then 429 with 0.1 s -> Retry-After 1.
  const int b = v2.classify(0, &kb);
  EXPECT_TRUE(v2.admit(b).status.ok());
  EXPECT_TRUE(v2.admit(b).status.ok());
  r = v2.admit(b);
  EXPECT_EQ(r.status.message(), "tenant 'b' is over its request rate (10 per second, burst 2)");
  EXPECT_EQ(backends::retryAfterOf(r.status), 1u);
  // c: new.
  const int c = v2.classify(0, &kc);
  EXPECT_EQ(v2.name(c), "c");
  TenantAdmission c1 = v2.admit(c);
  EXPECT_TRUE(c1.status.ok());
  EXPECT_FALSE(v2.admit(c).status.ok());  // max_concurrent 1
  // An old lease releases into the shared count: the new limiter sees it, the gauge too.
  EXPECT_EQ(a1.lease->limiter(), limiter_.get());
  a1.lease.reset();
  EXPECT_EQ(v2.inflight(a), 1u);
  EXPECT_EQ(limiter_->inflight(1), 1u);
  EXPECT_EQ(sample("infergate_tenant_inflight{tenant=\"a\"}"), 1);
  // The old limiter's counters and the new one's are the same series (one per name).
  EXPECT_EQ(sample("infergate_tenant_requests_total{result=\"rate_limited\",tenant=\"b\"}"), 2);
  EXPECT_EQ(sample("infergate_tenant_requests_total{result=\"admitted\",tenant=\"a\"}"), 2);
  // A refill at the old rate (same bucket) for a: one second, one token.
  clock_.advanceNs(1'000'000'000);
  TenantAdmission a3 = v2.admit(a);
  EXPECT_TRUE(a3.status.ok()) << a3.status;
  EXPECT_EQ(v2.inflight(a), 2u);
  EXPECT_FALSE(v2.admit(a).status.ok());  // and no second token
}

TEST(TenantLimiters, PublishesAndKeepsEveryGenerationBounded) {
  common::ManualClock clock;
  common::MetricsRegistry metrics;
  TenantLimiters all;
  EXPECT_EQ(all.current(), nullptr);
  std::vector<TenantLimiter*> seen;
  for (size_t i = 0; i < TenantLimiters::kMaxGenerations; ++i) {
    auto l = TenantLimiter::create(TenantsOptions{}, &clock, &metrics, all.current());
    ASSERT_TRUE(l.ok());
    seen.push_back(l->get());
    ASSERT_TRUE(all.publish(std::move(*l)).ok());
    EXPECT_EQ(all.current(), seen.back());
  }
  EXPECT_TRUE(all.full());
  EXPECT_EQ(all.generations(), TenantLimiters::kMaxGenerations);
  auto extra = TenantLimiter::create(TenantsOptions{}, &clock, &metrics, all.current());
  ASSERT_TRUE(extra.ok());
  const absl::Status st = all.publish(std::move(*extra));
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(all.current(), seen.back());  // unchanged
  // Every generation is still alive (a lease of the first still releases into it).
  EXPECT_EQ(seen.front()->name(0), "default");
  EXPECT_TRUE(all.publish(nullptr).ok());  // tenants off
  EXPECT_EQ(all.current(), nullptr);
}

// Reactors admitting on current() while the reload thread publishes new generations: no
// lease outlives its limiter, the cap (the same in every generation, the count shared by
// name) is never exceeded, and every place comes back. Run under ASan too (build-fuzz).
TEST(TenantLimiters, SwappingWhileAdmittingIsSafe) {
  common::ManualClock clock;
  common::MetricsRegistry metrics;
  TenantLimiters all;
  auto options = [] {
    TenantsOptions o;
    o.tenants.push_back(tenant("a", {"10.0.0.0/8"}, {"ka"}, limits(0, 0, 3, std::nullopt)));
    return o;
  };
  auto first = TenantLimiter::create(options(), &clock, &metrics, nullptr);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(all.publish(std::move(*first)).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> holding{0}, over{0}, admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      const std::string key = "ka";
      std::vector<std::shared_ptr<TenantLease>> held;
      for (int i = 0; !stop.load(std::memory_order_relaxed) || i < 2000; ++i) {
        const TenantLimiter* l = all.current();
        TenantAdmission a = l->admit(l->classify(l->tenantOfSource(ip("10.1.2.3")), &key));
        if (a.status.ok()) {
          ++admitted;
          if (holding.fetch_add(1) + 1 > 3) ++over;
          held.push_back(std::move(a.lease));
        }
        // Hold a lease across the next swap sometimes, then release it (from this thread,
        // into the limiter that admitted it).
        if (held.size() > static_cast<size_t>(i % 2)) {
          holding.fetch_sub(static_cast<int>(held.size()));
          held.clear();
        }
      }
      holding.fetch_sub(static_cast<int>(held.size()));
      held.clear();
    });
  }
  for (size_t g = 1; g < TenantLimiters::kMaxGenerations; ++g) {
    auto next = TenantLimiter::create(options(), &clock, &metrics, all.current());
    ASSERT_TRUE(next.ok());
    ASSERT_TRUE(all.publish(std::move(*next)).ok());
    std::this_thread::yield();
  }
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(over.load(), 0);
  EXPECT_GT(admitted.load(), 0);
  EXPECT_EQ(all.current()->inflight(1), 0u);
  EXPECT_NE(metrics.renderPrometheus().find("infergate_tenant_inflight{tenant=\"a\"} 0"),
            std::string::npos);
}

TEST(ClientPriorityPolicies, PublishesAndKeepsEveryGenerationBounded) {
  ClientPriorityPolicies all;
  const ClientPriorityPolicy* first = all.current();
  ASSERT_NE(first, nullptr);
  EXPECT_TRUE(first->trusts(std::nullopt) == false);  // kTrusted, no trusted source
  ClientPriorityPolicy p;
  p.mode = ClientPriorityPolicy::Mode::kTrusted;
  auto set = common::CidrSet::parse({"10.1.0.0/16"});
  ASSERT_TRUE(set.ok());
  p.trusted = std::move(*set);
  ASSERT_TRUE(all.publish(p).ok());
  EXPECT_NE(all.current(), first);
  EXPECT_TRUE(all.current()->trusts(ip("10.1.2.3")));
  EXPECT_FALSE(first->trusts(ip("10.1.2.3")));  // the old one is intact
  for (size_t i = 2; i < ClientPriorityPolicies::kMaxGenerations; ++i) {
    ASSERT_TRUE(all.publish(ClientPriorityPolicy{}).ok());
  }
  EXPECT_TRUE(all.full());
  EXPECT_EQ(all.publish(ClientPriorityPolicy{}).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace infergate::frontend
