#pragma once
// The cross-thread hand-off into a reactor: any thread posts work; the reactor thread runs it.
// An eventfd wakes the reactor's epoll/poll sleep, written only when the queue goes from empty
// to non-empty. Off the packet path (backend completions), so a mutex is acceptable here.

#include <sys/eventfd.h>
#include <unistd.h>

#include <functional>
#include <mutex>
#include <vector>

namespace infergate::dataplane {

class PostQueue {
 public:
  PostQueue() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~PostQueue() {
    if (fd_ >= 0) close(fd_);
  }
  PostQueue(const PostQueue&) = delete;
  PostQueue& operator=(const PostQueue&) = delete;

  // The eventfd to watch for POLLIN/EPOLLIN; after it fires, call clearWakeup().
  int fd() const { return fd_; }

  // Thread-safe.
  void post(std::function<void()> fn) {
    bool was_empty;
    {
      std::lock_guard<std::mutex> lock(mu_);
      was_empty = posted_.empty();
      posted_.push_back(std::move(fn));
    }
    if (was_empty && fd_ >= 0) {
      const uint64_t one = 1;
      // Pairs with clearWakeup() on the reactor thread: ends its epoll_wait/poll sleep.
      [[maybe_unused]] ssize_t n = write(fd_, &one, sizeof one);
    }
  }

  void clearWakeup() {
    uint64_t v;
    [[maybe_unused]] ssize_t r = read(fd_, &v, sizeof v);
  }

  // Runs what was posted so far, on the calling (reactor) thread. Returns whether anything ran.
  bool runAll() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (posted_.empty()) return false;
      running_.swap(posted_);
    }
    for (auto& fn : running_) fn();
    running_.clear();
    return true;
  }

 private:
  int fd_;
  std::mutex mu_;  // guards posted_
  std::vector<std::function<void()>> posted_;
  std::vector<std::function<void()>> running_;  // reactor thread only
};

}  // namespace infergate::dataplane
