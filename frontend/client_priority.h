#pragma once
// Who may choose a request's priority (docs/BATCHING.md "Priority"). The x-infergate-priority
// header / gRPC metadata and the KServe `priority` parameter are a privilege: honoured only
// from trusted sources (by default loopback), or from everyone when the operator says so;
// otherwise a request's class comes from the XDP rules (ingress tag) or the model's default.
// A session decides once per connection from net::Transport::peerAddress().
//
// Threading: read-only after start-up; shared by every reactor.

#include <optional>
#include <string_view>

#include "common/cidr.h"

namespace infergate::frontend {

struct ClientPriorityPolicy {
  enum class Mode { kTrusted, kAll, kOff };
  Mode mode = Mode::kTrusted;
  common::CidrSet trusted;  // sources whose requests may set their priority (mode kTrusted)

  // An unknown peer (a transport without addresses) is trusted only in mode kAll.
  bool trusts(const std::optional<common::IpBytes>& peer) const {
    switch (mode) {
      case Mode::kAll: return true;
      case Mode::kOff: return false;
      case Mode::kTrusted: return peer.has_value() && trusted.contains(*peer);
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

}  // namespace infergate::frontend
