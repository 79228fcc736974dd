#pragma once
// A fake EndpointClient for the Pool tests (pool_test.cc, pool_endpoints_test.cc): what it
// answers and what it saw live in a FakeEndpointState the test keeps (shared, so that it
// outlives the client the pool owns and closes).

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backends/pool.h"

namespace infergate::backends::test_util {

struct FakeEndpointState {
  std::mutex mu;
  absl::Status probe = absl::OkStatus();
  // What send() does: complete inline with `result` (and not_sent), or hold the call.
  bool hold = false;
  absl::Status result = absl::OkStatus();
  bool not_sent = false;
  int sends = 0;
  int probes = 0;
  int fresh_probes = 0;  // probe(true): the set-up redone
  bool shut = false;     // shutdown() called
  SendOptions last;      // of the last send
  std::deque<EndpointClient::SendDone> held;
  std::function<void()> during_probe;  // run inside probe(), unlocked (a race to stage)

  // Answers every held call (empty outputs, sent); returns how many there were.
  size_t releaseHeld() {
    std::deque<EndpointClient::SendDone> h;
    {
      std::lock_guard<std::mutex> l(mu);
      h.swap(held);
    }
    for (auto& done : h) done(std::vector<BatchTensor>{}, false);
    return h.size();
  }
};

class FakeEndpointClient : public EndpointClient {
 public:
  FakeEndpointClient(std::string a, std::shared_ptr<FakeEndpointState> s)
      : addr_(std::move(a)), s_(std::move(s)) {}
  const std::string& address() const override { return addr_; }
  absl::Status probe(bool fresh) override {
    if (s_->during_probe) s_->during_probe();
    std::lock_guard<std::mutex> l(s_->mu);
    ++s_->probes;
    if (fresh) ++s_->fresh_probes;
    return s_->probe;
  }
  void send(const Batch&, const SendOptions& o, SendDone done) override {
    absl::Status r;
    bool ns;
    {
      std::lock_guard<std::mutex> l(s_->mu);
      ++s_->sends;
      s_->last = o;
      if (s_->hold) {
        s_->held.push_back(std::move(done));
        return;
      }
      r = s_->result;
      ns = s_->not_sent;
    }
    if (r.ok()) {
      done(std::vector<BatchTensor>{}, false);
    } else {
      done(r, ns);
    }
  }
  void shutdown() override {
    std::lock_guard<std::mutex> l(s_->mu);
    s_->shut = true;
  }

 private:
  std::string addr_;
  std::shared_ptr<FakeEndpointState> s_;
};

// What a batch was answered: how many times, and the last status.
struct BatchResult {
  std::atomic<int> calls{0};
  absl::Status status;
};

// A BatchDone that records into `r` (which must outlive the call).
inline BatchDone collect(BatchResult& r) {
  return [&r](BatchOutputs out) {
    r.status = out.status();
    r.calls.fetch_add(1);
  };
}

}  // namespace infergate::backends::test_util
