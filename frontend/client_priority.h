#pragma once
// Who may choose a request's priority (docs/BATCHING.md "Priority"). The x-infergate-priority
// header / gRPC metadata and the KServe `priority` parameter are a privilege: honoured only
// from trusted sources (by default loopback), or from everyone when the operator says so;
// otherwise a request's class comes from the XDP rules (ingress tag) or the model's default.
// A session decides once per connection from net::Transport::peerAddress(), and again when a
// configuration reload publishes a new policy (ClientPriorityPolicies).
//
// Threading: a ClientPriorityPolicy is immutable once published; shared by every reactor.

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/cidr.h"

namespace infergate::frontend {

struct ClientPriorityPolicy {
  enum class Mode { kTrusted, kAll, kOff };
  Mode mode = Mode::kTrusted;
  common::CidrSet trusted;  // sources whose requests may set their priority (mode kTrusted)

  // An unknown peer (a transport without addresses) is trusted only in mode kAll.
  bool trusts(const std::optional<common::IpBytes>& peer) const {
    switch (mode) {
      case Mode::kAll:
        return true;
      case Mode::kOff:
        return false;
      case Mode::kTrusted:
        return peer.has_value() && trusted.contains(*peer);
    }
    return false;
  }
};

// "trusted" | "all" | "off"; nullopt for anything else.
inline std::optional<ClientPriorityPolicy::Mode> parseClientPriorityMode(std::string_view s) {
  if (s == "trusted") return ClientPriorityPolicy::Mode::kTrusted;
  if (s == "all") return ClientPriorityPolicy::Mode::kAll;
  if (s == "off") return ClientPriorityPolicy::Mode::kOff;
  return std::nullopt;
}

// The policy in effect, replaced whole by a configuration reload (priority.from_client,
// priority.trusted_sources; docs/OPERATIONS.md "Reload"). Every policy published stays alive
// until this object goes (a reactor may be reading an older one): bounded by kMaxGenerations
// publications, after which a reload changing the policy is refused (restart infergate).
//
// Threading: current() from any thread (one acquire load); publish() serialized by a mutex.
class ClientPriorityPolicies {
 public:
  static constexpr size_t kMaxGenerations = 64;

  explicit ClientPriorityPolicies(ClientPriorityPolicy initial = {}) {
    all_.push_back(std::make_unique<const ClientPriorityPolicy>(std::move(initial)));
    current_.store(all_.back().get(), std::memory_order_release);
  }
  ClientPriorityPolicies(const ClientPriorityPolicies&) = delete;
  ClientPriorityPolicies& operator=(const ClientPriorityPolicies&) = delete;

  // Never null.
  const ClientPriorityPolicy* current() const { return current_.load(std::memory_order_acquire); }
  // FAILED_PRECONDITION, and nothing changes, when kMaxGenerations policies exist already.
  absl::Status publish(ClientPriorityPolicy next) {
    std::lock_guard<std::mutex> lock(mu_);
    if (all_.size() >= kMaxGenerations) {
      return absl::FailedPreconditionError(
          "priority: the client priority policy was replaced too often since start-up (the "
          "older ones are kept for the sessions reading them): restart infergate");
    }
    all_.push_back(std::make_unique<const ClientPriorityPolicy>(std::move(next)));
    current_.store(all_.back().get(), std::memory_order_release);
    return absl::OkStatus();
  }
  bool full() const {
    std::lock_guard<std::mutex> lock(mu_);
    return all_.size() >= kMaxGenerations;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<const ClientPriorityPolicy>> all_;  // oldest first
  std::atomic<const ClientPriorityPolicy*> current_{nullptr};
};

}  // namespace infergate::frontend
