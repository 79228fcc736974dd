#pragma once
// A fake loop and transport for driving protocol sessions in unit tests and fuzzers: what the
// session sends accumulates in `out`; posted work waits in `posted` until runPosted().

#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "net/session.h"

namespace infergate::mocks {

class FakeLoop : public net::Loop {
 public:
  void post(std::function<void()> fn) override { posted.push_back(std::move(fn)); }
  bool inLoopThread() const override { return std::this_thread::get_id() == owner; }
  uint64_t nowNs() const override { return now; }
  int index() const override { return 0; }
  void runPosted() {
    while (!posted.empty()) {
      auto fn = std::move(posted.front());
      posted.pop_front();
      fn();
    }
  }
  std::deque<std::function<void()>> posted;
  uint64_t now = 1'000'000'000;
  std::thread::id owner = std::this_thread::get_id();
};

class FakeTransport : public net::Transport {
 public:
  void send(std::string_view bytes) override { out.append(bytes); }
  void closeAfterFlush() override { closed = true; }
  void pauseReading(bool p) override { paused = p; }
  net::Loop& loop() override { return loop_; }
  size_t pendingBytes() const override { return 0; }
  std::optional<net::IngressTag> ingressTag() override { return tag; }
  std::optional<common::IpBytes> peerAddress() const override { return peer; }
  FakeLoop loop_;
  std::string out;
  bool closed = false;
  bool paused = false;
  std::optional<net::IngressTag> tag;
  std::optional<common::IpBytes> peer;
};

}  // namespace infergate::mocks
