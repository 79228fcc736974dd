#pragma once
// Per-tenant limits (docs/CONFIGURATION.md "tenants", docs/ERRORS.md "Retry-After"). A tenant
// is a set of source CIDRs and/or API keys (the value of a configured request header, by
// default x-api-key); every inference request (HTTP POST, gRPC ModelInfer / ModelStreamInfer /
// Predict) is counted against exactly one tenant before anything is decoded:
//   - its API key, when it presents one that a tenant lists;
//   - else the most specific tenant CIDR that holds the connection's source address;
//   - else the tenant "default".
// Each tenant has a request rate (a token bucket: `rate` per second, `burst` at once), a cap on
// its requests in flight, and a default priority class for requests whose client does not
// choose one (or may not). Over the rate: RESOURCE_EXHAUSTED (HTTP 429) with a Retry-After
// hint of the bucket's refill time for one request; at the cap: RESOURCE_EXHAUSTED (429) with
// Retry-After 1. Counted per tenant in /metrics (the label is the configured name, so the
// series are bounded by the configuration; API keys never appear anywhere: they are kept only
// as keyed 128-bit digests, compared in constant time, and never logged).
//
// Threading: one limiter is shared by every reactor. Classification is read-only; admission is
// lock-free (one CAS loop on the tenant's bucket, one on its in-flight count); leases may be
// released from any thread. Memory is fixed at construction (one state per configured tenant).
//
// Reload (docs/OPERATIONS.md "Reload"): a limiter's configuration never changes; a reload that
// changes `tenants:` builds a new limiter from the previous one (create(..., previous)) and
// publishes it in the TenantLimiters the sessions read (one acquire load per request). A
// tenant that persists by name keeps its in-flight count (the counter is shared across the
// generations, so max_concurrent holds across the reload and old leases release into it) and,
// when its rate and burst are unchanged, its token bucket; a changed rate or burst starts a
// full bucket. Metrics series are per name: a removed tenant's series stop moving.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/cidr.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/siphash.h"

namespace infergate::frontend {

inline constexpr size_t kMaxTenants = 256;
inline constexpr size_t kMaxApiKeyBytes = 256;
inline constexpr double kMaxTenantRate = 1e6;  // requests per second
inline constexpr double kMinTenantRate = 0.001;

struct TenantLimits {
  double rate = 0;              // requests per second (the bucket's refill); 0: unlimited
  uint64_t burst = 0;           // the bucket's size; 0: max(1, ceil(rate))
  uint32_t max_concurrent = 0;  // requests in flight; 0: unlimited
  // Priority class 0 (high) .. 3 (background) for requests whose client does not choose one
  // (or is not trusted to: priority.from_client); it replaces the XDP tag's class.
  std::optional<int> priority_class;
};

struct TenantSpec {
  std::string name;  // the metrics label; [A-Za-z0-9_-], not "default"
  std::vector<common::Cidr> sources;
  std::vector<std::string> api_keys;  // 1..kMaxApiKeyBytes bytes each
  TenantLimits limits;
};

struct TenantsOptions {
  std::string api_key_header = "x-api-key";  // lower-case header / gRPC metadata key
  std::vector<TenantSpec> tenants;
  TenantLimits default_limits;  // the tenant "default" (unlimited unless configured)
};

class TenantLimiter;

class TenantLease;

// Who a sequence request belongs to, for the per-client bound on sequence bindings
// (backends::SequenceParams::owner): "tenant <name>" when a tenant admitted it, else
// "source <address>"; empty when neither is known. One rule for every protocol.
std::string sequenceOwner(const TenantLease* lease, const std::optional<common::IpBytes>& peer);

// A request's place among its tenant's requests in flight: held from admission until the
// request is answered (or its connection goes), released by the destructor. Any thread.
class TenantLease {
 public:
  ~TenantLease();
  TenantLease(const TenantLease&) = delete;
  TenantLease& operator=(const TenantLease&) = delete;
  int tenant() const { return tenant_; }
  // The limiter that admitted it (a reload may have published another since; it stays alive).
  const TenantLimiter* limiter() const { return limiter_; }

 private:
  friend class TenantLimiter;
  TenantLease(const TenantLimiter* limiter, int tenant) : limiter_(limiter), tenant_(tenant) {}
  const TenantLimiter* limiter_;
  int tenant_;
};

struct TenantAdmission {
  int tenant = 0;
  // OK, or RESOURCE_EXHAUSTED naming the tenant and the limit, with a Retry-After hint
  // (backends/retry_after.h).
  absl::Status status;
  std::shared_ptr<TenantLease> lease;  // set when admitted
};

class TenantLimiter {
 public:
  static constexpr int kDefaultTenant = 0;  // tenants 1..N are the configured ones, in order

  // INVALID_ARGUMENT for what the config loader also refuses (names, duplicates, ranges), so
  // an embedding cannot build a limiter the config could not describe. `clock` nullptr: the
  // steady clock; `metrics` nullptr: a private registry. Both must outlive the limiter.
  // `previous` (a reload): the limiter in effect, whose tenants persisting by name carry over
  // their in-flight count and, with the same rate and burst, their bucket; it must outlive
  // the new one (TenantLimiters keeps every generation).
  static absl::StatusOr<std::unique_ptr<TenantLimiter>> create(
      TenantsOptions options, common::Clock* clock, common::MetricsRegistry* metrics,
      const TenantLimiter* previous = nullptr);
  ~TenantLimiter();

  // The tenant of a connection's source address (decided once per connection): the most
  // specific tenant CIDR that holds it; kDefaultTenant when none does or it is unknown.
  int tenantOfSource(const std::optional<common::IpBytes>& peer) const;
  // The tenant whose API key is `key`; nullopt when none (the digest is compared against every
  // configured key, in constant time per key).
  std::optional<int> tenantOfKey(std::string_view key) const;
  // A request's tenant: its key's (when `api_key` is non-null and names one), else the source's.
  int classify(int source_tenant, const std::string* api_key) const;
  // The same for a request whose api_key_header came `key_count` times (`api_key`: the first),
  // the one rule for every protocol: more than once is INVALID_ARGUMENT, since which value
  // counts would otherwise depend on the protocol (and a proxy in front may pick another).
  absl::StatusOr<int> classify(int source_tenant, const std::string* api_key,
                               size_t key_count) const;

  // Counts one request against `tenant`: its in-flight cap first, then one token of its rate.
  TenantAdmission admit(int tenant) const;
  // One more request inside an admitted call (a ModelStreamInfer stream's later messages):
  // one token of the rate, no new in-flight place. OK or the rate refusal admit() gives.
  // (A lease's own limiter: lease.limiter()->charge(lease.tenant()).)
  absl::Status charge(int tenant) const;

  const std::string& name(int tenant) const;
  std::optional<int> priorityClass(int tenant) const;
  const std::string& apiKeyHeader() const { return api_key_header_; }
  uint32_t inflight(int tenant) const;
  size_t tenants() const { return states_.size(); }

 private:
  struct State;
  struct KeyDigest {
    uint64_t a = 0, b = 0;
    int tenant = 0;
  };
  TenantLimiter(common::Clock* clock, std::unique_ptr<common::MetricsRegistry> own_registry);
  KeyDigest digest(std::string_view key) const;
  absl::Status takeToken(State& s) const;  // one token of `s`'s bucket, or the refusal
  friend class TenantLease;
  void release(int tenant) const;

  common::Clock* clock_;
  std::unique_ptr<common::MetricsRegistry> own_registry_;
  std::string api_key_header_;
  std::vector<std::unique_ptr<State>> states_;  // [0] default, then the configured tenants
  struct SourceRule {
    common::Cidr cidr;
    int tenant;
  };
  std::vector<SourceRule> sources_;  // most specific first
  std::vector<KeyDigest> keys_;
  ig_sipkey key_a_{}, key_b_{};
};

// The tenant limiter in effect, replaced whole by a configuration reload. Every generation
// published stays alive until this object goes (a reactor may be inside a call on an older one,
// and leases release into the limiter that admitted them): no reclamation, no per-request
// reference count. Bounded: at most kMaxGenerations limiters are ever published; the reload
// after that is refused (restart infergate). A limiter is ~0.3 KiB per tenant.
//
// Threading: current() from any thread (one acquire load); publish() from one thread at a
// time (the reload, serialized by the server), also safe against itself (a mutex).
class TenantLimiters {
 public:
  static constexpr size_t kMaxGenerations = 64;

  TenantLimiters() = default;
  TenantLimiters(const TenantLimiters&) = delete;
  TenantLimiters& operator=(const TenantLimiters&) = delete;

  // The limiter in effect; null while tenants are off.
  TenantLimiter* current() const { return current_.load(std::memory_order_acquire); }
  // Makes `next` (null: tenants off) the limiter in effect. FAILED_PRECONDITION, and nothing
  // changes, when kMaxGenerations limiters were published already.
  absl::Status publish(std::unique_ptr<TenantLimiter> next);
  // Whether publish() of a limiter would be refused (checked before a reload applies anything).
  bool full() const;
  size_t generations() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<TenantLimiter>> all_;  // every limiter published, oldest first
  std::atomic<TenantLimiter*> current_{nullptr};
};

}  // namespace infergate::frontend
