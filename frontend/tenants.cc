#include "frontend/tenants.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "backends/retry_after.h"
#include "common/secret.h"
#include "fmt/format.h"

namespace infergate::frontend {

namespace {

// A tenant's token bucket. GCRA (the token bucket as one word): the theoretical arrival time of
// the next request. A request at `now` is admitted when max(tat, now) - now <= tolerance, and
// moves tat one interval on. CAS loop in takeToken(); no other writer. Shared by the limiters
// of successive reloads while the tenant's rate and burst stay the same.
struct Bucket {
  alignas(64) std::atomic<uint64_t> tat{0};
};

// A tenant's requests in flight: admit() increments (CAS under the cap), TenantLease's
// destructor decrements (release()). Shared by every limiter generation that has the tenant
// (by name), so leases of an older limiter count against the new one's cap.
struct InFlight {
  alignas(64) std::atomic<uint32_t> count{0};
};

}  // namespace

struct TenantLimiter::State {
  std::string name;
  TenantLimits limits;
  uint64_t interval_ns = 0;   // one token's refill time; 0: unlimited rate
  uint64_t tolerance_ns = 0;  // (burst - 1) x interval: how far ahead the bucket may run
  std::shared_ptr<Bucket> bucket;
  std::shared_ptr<InFlight> inflight;
  common::Counter* admitted = nullptr;
  common::Counter* rate_limited = nullptr;
  common::Counter* concurrency_limited = nullptr;
  common::Gauge* inflight_gauge = nullptr;
};

TenantLease::~TenantLease() {
  if (limiter_ != nullptr) limiter_->release(tenant_);
}

TenantLimiter::TenantLimiter(common::Clock* clock,
                             std::unique_ptr<common::MetricsRegistry> own_registry)
    : clock_(clock != nullptr ? clock : &common::SteadyClock::instance()),
      own_registry_(std::move(own_registry)) {}

TenantLimiter::~TenantLimiter() = default;

namespace {

bool validName(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

absl::Status checkLimits(const TenantLimits& l, const std::string& who) {
  if (l.rate != 0 && !(l.rate >= kMinTenantRate && l.rate <= kMaxTenantRate)) {
    return absl::InvalidArgumentError(fmt::format("{}: rate {} is outside {}..{} (0: unlimited)",
                                                  who, l.rate, kMinTenantRate, kMaxTenantRate));
  }
  if (l.burst > 1'000'000) {
    return absl::InvalidArgumentError(fmt::format("{}: burst {} is over 1000000", who, l.burst));
  }
  if (l.priority_class && (*l.priority_class < 0 || *l.priority_class > 3)) {
    return absl::InvalidArgumentError(
        fmt::format("{}: priority class {} is outside 0..3", who, *l.priority_class));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TenantLimiter>> TenantLimiter::create(
    TenantsOptions options, common::Clock* clock, common::MetricsRegistry* metrics,
    const TenantLimiter* previous) {
  if (options.tenants.size() > kMaxTenants) {
    return absl::InvalidArgumentError(
        fmt::format("{} tenants (at most {})", options.tenants.size(), kMaxTenants));
  }
  if (!validName(options.api_key_header)) {
    return absl::InvalidArgumentError(
        fmt::format("api_key_header '{}' is not a header name", options.api_key_header));
  }
  std::unique_ptr<common::MetricsRegistry> own;
  if (metrics == nullptr) {
    own = std::make_unique<common::MetricsRegistry>();
    metrics = own.get();
  }
  std::unique_ptr<TenantLimiter> l(new TenantLimiter(clock, std::move(own)));
  l->api_key_header_ = options.api_key_header;
  std::transform(l->api_key_header_.begin(), l->api_key_header_.end(), l->api_key_header_.begin(),
                 [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; });
  l->key_a_ = common::randomSipKey();
  l->key_b_ = common::randomSipKey();

  auto add = [&](std::string name, const TenantLimits& limits) -> absl::Status {
    if (absl::Status st = checkLimits(limits, "tenant '" + name + "'"); !st.ok()) return st;
    auto s = std::make_unique<State>();
    s->name = std::move(name);
    s->limits = limits;
    if (limits.rate > 0) {
      s->interval_ns = static_cast<uint64_t>(std::llround(1e9 / limits.rate));
      if (s->interval_ns == 0) s->interval_ns = 1;
      uint64_t burst = limits.burst;
      if (burst == 0) burst = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(limits.rate)));
      s->tolerance_ns = (burst - 1) * s->interval_ns;  // burst <= 1e6, interval <= 1e12: fits
    }
    // A tenant the previous generation had (by name) carries over its in-flight count always,
    // and its bucket when the rate and burst are unchanged (else a full bucket).
    const State* before = nullptr;
    if (previous != nullptr) {
      for (const std::unique_ptr<State>& p : previous->states_) {
        if (p->name == s->name) before = p.get();
      }
    }
    s->inflight = before != nullptr ? before->inflight : std::make_shared<InFlight>();
    s->bucket = before != nullptr && before->interval_ns == s->interval_ns &&
                        before->tolerance_ns == s->tolerance_ns
                    ? before->bucket
                    : std::make_shared<Bucket>();
    const common::Labels labels = {{"tenant", s->name}};
    constexpr const char* kHelp =
        "Inference requests counted against each tenant (docs/CONFIGURATION.md \"tenants\"), by "
        "result: admitted, rate_limited (over its rate: 429 with Retry-After), "
        "concurrency_limited (at its max_concurrent: 429)";
    auto counter = [&](const char* result) {
      common::Labels lb = labels;
      lb.emplace_back("result", result);
      return &metrics->counter("infergate_tenant_requests_total", kHelp, lb);
    };
    s->admitted = counter("admitted");
    s->rate_limited = counter("rate_limited");
    s->concurrency_limited = counter("concurrency_limited");
    s->inflight_gauge = &metrics->gauge("infergate_tenant_inflight",
                                        "Inference requests of each tenant in flight", labels);
    l->states_.push_back(std::move(s));
    return absl::OkStatus();
  };
  if (absl::Status st = add("default", options.default_limits); !st.ok()) return st;

  for (size_t i = 0; i < options.tenants.size(); ++i) {
    TenantSpec& t = options.tenants[i];
    if (!validName(t.name) || t.name == "default") {
      return absl::InvalidArgumentError(fmt::format(
          "tenant {}: name '{}' must be 1..64 of [A-Za-z0-9_-] and not 'default'", i, t.name));
    }
    for (size_t j = 0; j < i; ++j) {
      if (options.tenants[j].name == t.name) {
        return absl::InvalidArgumentError(fmt::format("tenant '{}' is named twice", t.name));
      }
    }
    const int index = static_cast<int>(l->states_.size());
    for (const common::Cidr& c : t.sources) {
      for (const SourceRule& r : l->sources_) {
        if (r.cidr == c) {
          return absl::InvalidArgumentError(
              fmt::format("tenant '{}': source {} is also tenant '{}''s", t.name, c.toString(),
                          l->states_[r.tenant]->name));
        }
      }
      l->sources_.push_back({c, index});
    }
    for (const std::string& k : t.api_keys) {
      if (k.empty() || k.size() > kMaxApiKeyBytes) {
        return absl::InvalidArgumentError(
            fmt::format("tenant '{}': an API key must be 1..{} bytes", t.name, kMaxApiKeyBytes));
      }
      KeyDigest d = l->digest(k);
      for (const KeyDigest& o : l->keys_) {
        if (o.a == d.a && o.b == d.b) {
          // Never the key itself: only which tenants.
          return absl::InvalidArgumentError(fmt::format(
              "tenant '{}': an API key is also tenant '{}''s", t.name, l->states_[o.tenant]->name));
        }
      }
      d.tenant = index;
      l->keys_.push_back(d);
    }
    if (absl::Status st = add(t.name, t.limits); !st.ok()) return st;
  }
  // Most specific prefix first: the first that holds an address is the longest match.
  std::stable_sort(
      l->sources_.begin(), l->sources_.end(),
      [](const SourceRule& a, const SourceRule& b) { return a.cidr.prefix > b.cidr.prefix; });
  return l;
}

TenantLimiter::KeyDigest TenantLimiter::digest(std::string_view key) const {
  // The length, then the bytes little-endian in 64-bit words, zero-padded: two SipHash-2-4
  // outputs under two process-random keys, 128 bits an attacker can neither predict nor aim
  // collisions at.
  constexpr size_t kWords = 1 + (kMaxApiKeyBytes + 7) / 8;
  std::array<__u64, kWords> w{};
  const size_t n = std::min(key.size(), kMaxApiKeyBytes);
  w[0] = key.size();
  std::memcpy(reinterpret_cast<char*>(w.data() + 1), key.data(), n);
  const uint32_t words = static_cast<uint32_t>(1 + (n + 7) / 8);
  KeyDigest d;
  d.a = ig_siphash(&key_a_, w.data(), words);
  d.b = ig_siphash(&key_b_, w.data(), words);
  return d;
}

std::optional<int> TenantLimiter::tenantOfKey(std::string_view key) const {
  if (key.empty() || key.size() > kMaxApiKeyBytes || keys_.empty()) return std::nullopt;
  const KeyDigest d = digest(key);
  // Every key is compared, whatever matched: the time depends on the number of keys only.
  int found = 0;
  for (const KeyDigest& k : keys_) {
    const uint64_t diff = (k.a ^ d.a) | (k.b ^ d.b);
    const int hit = static_cast<int>(diff == 0);
    found |= hit * k.tenant;  // digests are distinct: at most one hits
  }
  if (found == 0) return std::nullopt;
  return found;
}

int TenantLimiter::tenantOfSource(const std::optional<common::IpBytes>& peer) const {
  if (!peer) return kDefaultTenant;
  for (const SourceRule& r : sources_) {
    if (r.cidr.contains(*peer)) return r.tenant;
  }
  return kDefaultTenant;
}

int TenantLimiter::classify(int source_tenant, const std::string* api_key) const {
  if (api_key != nullptr) {
    if (std::optional<int> t = tenantOfKey(*api_key)) return *t;
  }
  return source_tenant >= 0 && static_cast<size_t>(source_tenant) < states_.size() ? source_tenant
                                                                                   : kDefaultTenant;
}

std::string sequenceOwner(const TenantLease* lease, const std::optional<common::IpBytes>& peer) {
  if (lease != nullptr) return "tenant " + lease->limiter()->name(lease->tenant());
  if (!peer) return std::string();
  return "source " + common::Cidr{*peer, 128}.toString();
}

absl::StatusOr<int> TenantLimiter::classify(int source_tenant, const std::string* api_key,
                                            size_t key_count) const {
  if (key_count > 1) {
    return absl::InvalidArgumentError(fmt::format(
        "header '{}' given {} times: one API key per request", api_key_header_, key_count));
  }
  return classify(source_tenant, key_count == 1 ? api_key : nullptr);
}

TenantAdmission TenantLimiter::admit(int tenant) const {
  if (tenant < 0 || static_cast<size_t>(tenant) >= states_.size()) tenant = kDefaultTenant;
  State& s = *states_[tenant];
  TenantAdmission a;
  a.tenant = tenant;
  // The in-flight cap first, so a refusal for it spends no token.
  const uint32_t cap = s.limits.max_concurrent;
  std::atomic<uint32_t>& inflight = s.inflight->count;
  uint32_t cur = inflight.load(std::memory_order_relaxed);
  do {
    if (cap != 0 && cur >= cap) {
      s.concurrency_limited->inc();
      a.status = backends::withRetryAfter(
          absl::ResourceExhaustedError(fmt::format(
              "tenant '{}' has {} requests in flight, its limit (max_concurrent)", s.name, cap)),
          backends::kMinRetryAfterSeconds);
      return a;
    }
    // Pairs with the fetch_sub in release().
  } while (!inflight.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel,
                                           std::memory_order_relaxed));
  if (absl::Status st = takeToken(s); !st.ok()) {
    inflight.fetch_sub(1, std::memory_order_acq_rel);  // the place taken above
    a.status = std::move(st);
    return a;
  }
  s.admitted->inc();
  s.inflight_gauge->add(1);
  a.lease = std::shared_ptr<TenantLease>(new TenantLease(this, tenant));
  return a;
}

absl::Status TenantLimiter::takeToken(State& s) const {
  if (s.interval_ns == 0) return absl::OkStatus();
  const uint64_t now = clock_->nowNs();
  std::atomic<uint64_t>& tat_word = s.bucket->tat;
  uint64_t tat = tat_word.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t base = std::max(tat, now);
    if (base - now > s.tolerance_ns) {
      s.rate_limited->inc();
      // One token is back when the bucket has run down to its tolerance again.
      const uint64_t wait = base - now - s.tolerance_ns;
      return backends::withRetryAfter(
          absl::ResourceExhaustedError(
              fmt::format("tenant '{}' is over its request rate ({} per second, burst {})", s.name,
                          s.limits.rate, s.tolerance_ns / s.interval_ns + 1)),
          backends::retryAfterFromNs(wait));
    }
    if (tat_word.compare_exchange_weak(tat, base + s.interval_ns, std::memory_order_relaxed,
                                       std::memory_order_relaxed)) {
      return absl::OkStatus();
    }
  }
}

absl::Status TenantLimiter::charge(int tenant) const {
  if (tenant < 0 || static_cast<size_t>(tenant) >= states_.size()) tenant = kDefaultTenant;
  State& s = *states_[tenant];
  absl::Status st = takeToken(s);
  if (st.ok()) s.admitted->inc();
  return st;
}

void TenantLimiter::release(int tenant) const {
  State& s = *states_[tenant];
  s.inflight->count.fetch_sub(1, std::memory_order_acq_rel);  // pairs with admit()'s CAS
  s.inflight_gauge->sub(1);
}

const std::string& TenantLimiter::name(int tenant) const {
  if (tenant < 0 || static_cast<size_t>(tenant) >= states_.size()) tenant = kDefaultTenant;
  return states_[tenant]->name;
}

std::optional<int> TenantLimiter::priorityClass(int tenant) const {
  if (tenant < 0 || static_cast<size_t>(tenant) >= states_.size()) tenant = kDefaultTenant;
  return states_[tenant]->limits.priority_class;
}

uint32_t TenantLimiter::inflight(int tenant) const {
  if (tenant < 0 || static_cast<size_t>(tenant) >= states_.size()) tenant = kDefaultTenant;
  return states_[tenant]->inflight->count.load(std::memory_order_acquire);
}

absl::Status TenantLimiters::publish(std::unique_ptr<TenantLimiter> next) {
  std::lock_guard<std::mutex> lock(mu_);
  if (next != nullptr) {
    if (all_.size() >= kMaxGenerations) {
      return absl::FailedPreconditionError(fmt::format(
          "tenants: {} limiters were published since start-up (at most {} are kept for the "
          "requests in flight): restart infergate",
          all_.size(), kMaxGenerations));
    }
    all_.push_back(std::move(next));
    current_.store(all_.back().get(), std::memory_order_release);
  } else {
    current_.store(nullptr, std::memory_order_release);
  }
  return absl::OkStatus();
}

bool TenantLimiters::full() const {
  std::lock_guard<std::mutex> lock(mu_);
  return all_.size() >= kMaxGenerations;
}

size_t TenantLimiters::generations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return all_.size();
}

}  // namespace infergate::frontend
