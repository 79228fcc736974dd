#pragma once
// Client-gone signal shared by a connection and the model that runs its request. The
// connection calls cancel() when its client disconnects (HTTP/1.1 connection reset/closed,
// HTTP/2 RST_STREAM); the model registers with onCancel() what cancelling means for it (the
// batcher: Batcher::cancel(ticket)). Cancellers run once, outside the token's lock, on the
// thread that calls cancel() (or onCancel() when the token is already cancelled). A canceller
// may run after its request was answered: it must then be a no-op (Batcher tickets are never
// reused). Threading: every method is safe from any thread.

#include <functional>
#include <mutex>
#include <vector>

namespace infergate::net {

class CancelToken {
 public:
  void cancel();
  bool cancelled() const;
  void onCancel(std::function<void()> canceller);
  // Drops registered cancellers (the request was answered).
  void clear();

 private:
  mutable std::mutex mu_;
  bool cancelled_ = false;
  std::vector<std::function<void()>> cancellers_;
};

}  // namespace infergate::net
