#pragma once
// What a connection's session decided about its peer, kept until a configuration reload
// publishes another policy or limiter (docs/OPERATIONS.md "Reload"): whether the peer may
// choose its requests' priority, and the tenant of its source address. Both HTTP/1.1 and
// HTTP/2 sessions hold one. Threading: the session's loop thread only.

#include "frontend/client_priority.h"
#include "frontend/tenants.h"
#include "net/session.h"

namespace infergate::frontend {

class PeerDecisions {
 public:
  // Whether the peer of `transport` (null: none) may choose its requests' priority under the
  // policy in effect: `live`'s current one when set, else `fixed` (null: everyone may).
  bool priorityTrusted(const ClientPriorityPolicies* live, const ClientPriorityPolicy* fixed,
                       const net::Transport* transport) {
    const ClientPriorityPolicy* p = live != nullptr ? live->current() : fixed;
    if (!priority_decided_ || p != priority_policy_) {
      priority_trusted_ =
          p == nullptr ||
          (transport != nullptr ? p->trusts(transport->peerAddress()) : p->trusts(std::nullopt));
      priority_policy_ = p;
      priority_decided_ = true;
    }
    return priority_trusted_;
  }

  // The tenant of the peer's source address under `limiter` (kDefaultTenant without a peer).
  int sourceTenant(const TenantLimiter& limiter, const net::Transport* transport) {
    if (&limiter != source_tenant_of_) {
      source_tenant_ = transport != nullptr ? limiter.tenantOfSource(transport->peerAddress())
                                            : TenantLimiter::kDefaultTenant;
      source_tenant_of_ = &limiter;
    }
    return source_tenant_;
  }

 private:
  bool priority_trusted_ = true;  // priority_policy_ about this peer
  bool priority_decided_ = false;
  const ClientPriorityPolicy* priority_policy_ = nullptr;  // the policy priority_trusted_ is of
  int source_tenant_ = TenantLimiter::kDefaultTenant;      // under source_tenant_of_
  const TenantLimiter* source_tenant_of_ = nullptr;
};

}  // namespace infergate::frontend
