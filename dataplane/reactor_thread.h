#pragma once
// What the socket and afxdp reactors share: one thread running the reactor's loop, the Loop
// identity sessions see (index, clock, thread), the cross-thread post queue, and the stop /
// drain request the loop polls. A reactor implements run() (woken by posted_.fd()) and, in
// its destructor, calls stop(0) and join() before its own members go.

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "dataplane/post_queue.h"
#include "net/session.h"

namespace infergate::dataplane {

class ReactorThread : public net::Loop {
 public:
  explicit ReactorThread(int index) : index_(index) {}
  ReactorThread(const ReactorThread&) = delete;
  ReactorThread& operator=(const ReactorThread&) = delete;

  void start() {
    thread_ = std::thread([this] { run(); });
  }
  // Asks the loop to stop, draining for up to `drain_ns` (what draining means is the
  // reactor's). Thread-safe.
  void stop(uint64_t drain_ns) {
    drain_ns_.store(drain_ns, std::memory_order_relaxed);
    if (!stop_requested_.exchange(true)) post([] {});  // wakes the loop
  }
  void join() {
    if (thread_.joinable()) thread_.join();
  }

  // Loop
  void post(std::function<void()> fn) override { posted_.post(std::move(fn)); }
  bool inLoopThread() const override {
    return thread_id_.load(std::memory_order_relaxed) == std::this_thread::get_id();
  }
  uint64_t nowNs() const override { return now_ns_; }
  int index() const override { return index_; }

 protected:
  // The loop, on the reactor's thread; calls enterLoopThread() first.
  virtual void run() = 0;
  // Marks the calling thread as the loop's (inLoopThread) and pins it to `cpu` (-1: no
  // pinning; a refusal is logged as "<name> <index>: cannot pin ...").
  void enterLoopThread(const std::string& name, int cpu);

  const int index_;
  std::thread thread_;
  std::atomic<std::thread::id> thread_id_{};
  uint64_t now_ns_ = 0;
  PostQueue posted_;  // cross-thread completions (off the packet path)
  std::atomic<bool> stop_requested_{false};
  std::atomic<uint64_t> drain_ns_{0};
};

}  // namespace infergate::dataplane
