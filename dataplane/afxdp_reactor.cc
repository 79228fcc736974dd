#include "dataplane/afxdp_reactor.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

#include "common/clock.h"
#include "net/burst.h"
#include "spdlog/spdlog.h"

namespace infergate::dataplane {

AfXdpReactor::AfXdpReactor(AfXdpReactorOptions options, std::unique_ptr<PollableDevice> device)
    : ReactorThread(options.index), options_(std::move(options)), device_(std::move(device)) {
  options_.tcp.index = options_.index;
  options_.tcp.flush_each_call = false;  // run() flushes the device once per loop iteration
  now_ns_ = common::monotonicNs();
  stack_ = std::make_unique<tcp::TcpStack>(options_.tcp, *device_,
                                           common::SteadyClock::instance(), this);
}

AfXdpReactor::~AfXdpReactor() {
  stop(0);
  join();
  stack_.reset();
}

absl::Status AfXdpReactor::listen(uint16_t port, net::SessionFactory factory) {
  // Wrapped to remember the sessions (draining asks them whether they are idle). One
  // allocation per connection, none per packet.
  return stack_->listen(port, [this, f = std::move(factory)](net::Transport& t) {
    std::shared_ptr<net::Session> s = f(t);
    if (s) sessions_.push_back(s);
    return s;
  });
}

bool AfXdpReactor::runPosted() { return posted_.runAll(); }

bool AfXdpReactor::allIdle() {
  for (const auto& w : sessions_) {
    std::shared_ptr<net::Session> s = w.lock();
    if (s && !s->idle()) return false;
  }
  return true;
}

void AfXdpReactor::run() {
  enterLoopThread(options_.name, options_.cpu);
  stack_->bindThread();
  const uint64_t granularity = std::max<uint64_t>(options_.tcp.timer_granularity_ns, 100'000);
  const int sleep_ms = static_cast<int>(std::max<uint64_t>(granularity / 1'000'000, 1));
  uint64_t last_poll = 0;
  uint64_t last_compact = common::monotonicNs();
  bool draining = false;
  uint64_t drain_deadline = 0;
  pollfd pfds[2] = {{device_->fd(), POLLIN, 0}, {posted_.fd(), POLLIN, 0}};
  for (;;) {
    now_ns_ = common::monotonicNs();
    if (stop_requested_.load(std::memory_order_relaxed) && !draining) {
      draining = true;
      drain_deadline = now_ns_ + drain_ns_.load(std::memory_order_relaxed);
      for (const auto& w : sessions_) {
        if (std::shared_ptr<net::Session> s = w.lock()) s->onDrain();
      }
    }
    if (draining && (now_ns_ >= drain_deadline || allIdle())) break;

    // One clock read per iteration (above): the burst, the posted work and the timers all
    // use it; a timer fires at most one iteration late, far below its granularity.
    const size_t n = stack_->processRx(options_.burst, now_ns_);
    const bool posted = runPosted();
    net::runBurstEnd();  // models dispatch what this iteration enqueued (net/burst.h)
    if (posted || now_ns_ - last_poll >= granularity) {
      stack_->poll(now_ns_);
      last_poll = now_ns_;
    }
    if (now_ns_ - last_compact >= 100'000'000) {
      last_compact = now_ns_;
      sessions_.erase(std::remove_if(sessions_.begin(), sessions_.end(),
                                     [](const std::weak_ptr<net::Session>& w) { return w.expired(); }),
                      sessions_.end());
    }
    // One kick for every segment this iteration queued (responses of the burst, answers
    // from posted work, timers), not one per call into the stack.
    stack_->flushDevice();
    if (device_->txPending()) {
      device_->kick();
      continue;
    }
    if (n > 0 || posted) continue;
    if (options_.busy_poll) {
      device_->busyPoll();
      continue;
    }
    device_->kick();  // the fill ring may ask for a wakeup before we sleep
    const int rc = poll(pfds, 2, sleep_ms);
    if (rc > 0 && (pfds[1].revents & POLLIN)) posted_.clearWakeup();
  }
  stack_->abortAll();
  stack_->flushDevice();
  device_->kick();
  sessions_.clear();
  runPosted();  // completions that raced the close find their sessions gone
  net::runBurstEnd();
}

}  // namespace infergate::dataplane
