#pragma once
// afxdp mode: one reactor thread per NIC rx queue, pinned to a core, shared-nothing. It owns
// the queue's packet device (an AF_XDP socket, dataplane/xsk) and a userspace TCP stack
// (dataplane/tcp) whose connections drive the same net::Session objects socket mode runs
// (HTTP/1.1 + KServe v2 REST, HTTP/2 + gRPC), made by the same SessionFactory.
//
// The loop: one clock read, processRx() (a burst from the rx ring, handled, released to the
// fill ring), posted work, poll(now) every timer granularity (timers, session ticks), then one
// tx flush (kick) for everything the iteration queued. When
// nothing arrived it either busy-polls (one non-blocking recvfrom that runs the driver's
// NAPI, with SO_PREFER_BUSY_POLL) or sleeps in poll(2) on the socket and an eventfd for at
// most one timer granularity. The kernel is kicked only when a ring asks (need_wakeup).
//
// Threading: the stack, its connections and sessions live on the reactor thread. post() is
// thread-safe (backend completions); stop() may be called from any thread; tcpCounters() and
// connectionCount() may be read from any thread (plain counters, possibly stale).

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "dataplane/reactor_thread.h"
#include "dataplane/tcp/tcp_stack.h"
#include "dataplane/xsk/pollable_device.h"
#include "net/session.h"

namespace infergate::dataplane {

struct AfXdpReactorOptions {
  int index = 0;
  int cpu = -1;                   // pin the thread to this CPU; -1 = no pinning
  tcp::TcpOptions tcp;            // tcp.index is set to `index`
  bool busy_poll = false;         // spin with busyPoll() instead of sleeping in poll(2)
  uint32_t burst = 64;            // frames per processRx()
  std::string name = "afxdp";
};

class AfXdpReactor final : public ReactorThread {
 public:
  // Takes ownership of `device`. The stack is built here; call listen() before start().
  AfXdpReactor(AfXdpReactorOptions options, std::unique_ptr<PollableDevice> device);
  ~AfXdpReactor() override;

  // Accepts connections to `port` on this queue.
  absl::Status listen(uint16_t port, net::SessionFactory factory);
  // start(), join(), and stop(drain_ns): stops taking new work, waits up to `drain_ns` for the
  // sessions with a request in progress (Session::idle() false) to finish, then resets every
  // connection (RST) and ends the thread (ReactorThread).

  const tcp::TcpCounters& tcpCounters() const { return stack_->counters(); }
  size_t connectionCount() const { return stack_->connectionCount(); }
  size_t bufferBytes() const { return stack_->bufferBytes(); }
  PollableDevice& device() { return *device_; }

 private:
  void run() override;
  bool runPosted();
  bool allIdle();

  AfXdpReactorOptions options_;
  std::unique_ptr<PollableDevice> device_;
  std::unique_ptr<tcp::TcpStack> stack_;
  // Sessions made on this reactor (for draining): weak, compacted every session tick.
  std::vector<std::weak_ptr<net::Session>> sessions_;
};

}  // namespace infergate::dataplane
