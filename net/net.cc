#include "net/cancel_token.h"
#include "net/protocol.h"

namespace infergate::net {

void CancelToken::cancel() {
  std::vector<std::function<void()>> run;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return;
    cancelled_ = true;
    run.swap(cancellers_);
  }
  for (auto& fn : run) fn();
}

bool CancelToken::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

void CancelToken::onCancel(std::function<void()> canceller) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cancelled_) {
      cancellers_.push_back(std::move(canceller));
      return;
    }
  }
  canceller();
}

void CancelToken::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  cancellers_.clear();
}

std::string_view protocolName(Protocol p) {
  switch (p) {
    case Protocol::kHttpKserve: return "kserve_http";
    case Protocol::kGrpcKserve: return "kserve_grpc";
    case Protocol::kHttpTfServing: return "tfserving_http";
    case Protocol::kGrpcTfServing: return "tfserving_grpc";
  }
  return "unknown";
}

}  // namespace infergate::net
