// Socket mode's slow-reader and output-memory limits (dataplane/output_limits.h) against the
// kernel's own TCP as the client: a loopback socket with a tiny receive buffer that does not
// read. The reactor runs on its thread; the session records what it saw for the test.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "dataplane/socket_reactor.h"

namespace infergate::dataplane {
namespace {

using Clock = std::chrono::steady_clock;

// A kernel TCP client connected to 127.0.0.1:port (a receive buffer of rcvbuf bytes when > 0).
int connectLoopback(uint16_t port, int rcvbuf = 0) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

// What the reactor-thread session reports to the test thread.
struct Seen {
  std::atomic<int> requests{0};
  std::atomic<size_t> max_pending{0};
  std::atomic<bool> closed{false};
};

// Each 'g' received is a request for `body` bytes.
class BulkSession final : public net::Session {
 public:
  BulkSession(net::Transport& t, const std::string& body, Seen& seen)
      : t_(&t), body_(body), seen_(seen) {}
  void onData(const char* d, size_t n) override {
    for (size_t i = 0; i < n && t_ != nullptr; ++i) {
      if (d[i] != 'g') continue;
      seen_.requests.fetch_add(1);
      t_->send(body_);
      if (t_ == nullptr) break;
      const size_t p = t_->pendingBytes();
      if (p > seen_.max_pending.load()) seen_.max_pending.store(p);
    }
  }
  void onPeerClosed() override {}
  void onTick(uint64_t) override {}
  void onClosed() override {
    t_ = nullptr;
    seen_.closed.store(true);
  }
  bool idle() const override { return true; }

 private:
  net::Transport* t_;
  const std::string& body_;
  Seen& seen_;
};

class SocketReactorOutputTest : public ::testing::Test {
 protected:
  void start(size_t body_bytes) {
    body_.assign(body_bytes, 'x');
    metrics_ = std::make_unique<ConnectionMetrics>(registry_);
    ReactorOptions ro;
    ro.metrics = metrics_.get();
    ro.output = limits;
    ro.output.used = &used_;
    reactor_ = std::make_unique<SocketReactor>(ro);
    absl::StatusOr<int> fd = openListener("127.0.0.1", 0, &port_);
    ASSERT_TRUE(fd.ok()) << fd.status();
    reactor_->addListener(*fd, [this](net::Transport& t) {
      return std::make_shared<BulkSession>(t, body_, seen_);
    });
    reactor_->start();
  }
  void TearDown() override {
    if (client_ >= 0) close(client_);
    for (int fd : others_) close(fd);
    if (reactor_) {
      reactor_->stop(0);
      reactor_->join();
    }
  }
  // A kernel TCP client with a tiny receive buffer (a window of a few KiB).
  void connectClient() {
    client_ = connectLoopback(port_, 4096);
    ASSERT_GE(client_, 0);
    ASSERT_FALSE(HasFailure());
  }
  int newClient(int rcvbuf) {
    const int fd = connectLoopback(port_, rcvbuf);
    others_.push_back(fd);
    return fd;
  }
  void write(const std::string& s) {
    ASSERT_EQ(::send(client_, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
  }
  template <typename Pred>
  bool waitFor(Pred p, std::chrono::milliseconds limit) {
    const auto end = Clock::now() + limit;
    while (Clock::now() < end) {
      if (p()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return p();
  }

  OutputLimits limits;
  common::MetricsRegistry registry_;
  common::Gauge used_;
  std::unique_ptr<ConnectionMetrics> metrics_;
  std::unique_ptr<SocketReactor> reactor_;
  std::string body_;
  Seen seen_;
  uint16_t port_ = 0;
  int client_ = -1;
  std::vector<int> others_;
};

// One request for 8 MiB, never read: the kernel takes what fits in its buffers, the rest
// waits in the reactor. It drains nothing for send_timeout: the connection is reset, counted,
// and its bytes given back to the process budget.
TEST_F(SocketReactorOutputTest, SendTimeoutClosesAClientThatNeverReads) {
  limits.send_timeout_ns = 1'000'000'000;
  limits.min_drain_bytes = 64 * 1024;
  start(8 << 20);
  connectClient();
  const auto t0 = Clock::now();
  write("g");
  ASSERT_TRUE(waitFor([&] { return used_.value() > 0; }, std::chrono::seconds(2)));
  ASSERT_TRUE(waitFor([&] { return seen_.closed.load(); }, std::chrono::seconds(10)));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  EXPECT_GE(took.count(), 1000);
  EXPECT_LE(took.count(), 2500);
  EXPECT_EQ(metrics_->send_timeouts.value(), 1u);
  EXPECT_GT(metrics_->output_discarded_bytes.value(), 4u << 20);
  EXPECT_EQ(used_.value(), 0);
  // The client sees a reset once it reads past what had reached it.
  char buf[65536];
  ssize_t n = 1;
  while (n > 0) n = recv(client_, buf, sizeof buf, 0);
  EXPECT_LT(n, 0);
  EXPECT_EQ(errno, ECONNRESET);
}

// 100 pipelined requests for 256 KiB each in one segment: before the limit the connection
// queued 25 MiB for a client that reads nothing. Now a send that would take the queue past
// max_bytes_per_connection resets the connection, and the rest is counted as lost.
TEST_F(SocketReactorOutputTest, PipelinedLargeResponsesAreBoundedPerConnection) {
  limits.send_timeout_ns = 0;
  limits.max_bytes_per_connection = 1 << 20;
  start(256 << 10);
  connectClient();
  write(std::string(100, 'g'));
  ASSERT_TRUE(waitFor([&] { return seen_.closed.load(); }, std::chrono::seconds(5)));
  EXPECT_LE(seen_.max_pending.load(), size_t{1} << 20);
  EXPECT_EQ(metrics_->output_limit_closes.value(), 1u);
  EXPECT_GE(metrics_->output_discarded_bytes.value(), 90u * (256 << 10));
  EXPECT_EQ(used_.value(), 0);
}

// Back-pressure: once half the per-connection limit is queued the reactor stops reading, so
// the session sees no new requests; when the client drains, reading resumes and every
// request is answered.
TEST_F(SocketReactorOutputTest, ReadingPausesUntilTheClientDrains) {
  limits.send_timeout_ns = 0;
  // Pause at 8 MiB; the requests still unread when reading resumes arrive in one read and are
  // answered at once, so the limit leaves room for them.
  limits.max_bytes_per_connection = 16 << 20;
  const size_t kBody = 1 << 20;
  const int kRequests = 16;
  start(kBody);
  connectClient();
  for (int i = 0; i < kRequests; ++i) {
    write("g");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // The kernel took what its send buffer holds; behind it 8 MiB were queued before reading
  // stopped, plus at most the response of the request that crossed the mark.
  const int answered = seen_.requests.load();
  EXPECT_LT(answered, kRequests);
  EXPECT_EQ(metrics_->output_read_pauses.value(), 1u);
  EXPECT_GE(used_.value(), 8 << 20);
  EXPECT_LT(used_.value(), 9 << 20);
  std::printf("paused after %d of %d requests, %lld bytes queued in the reactor\n", answered,
              kRequests, static_cast<long long>(used_.value()));
  size_t got = 0;
  char buf[65536];
  const auto end = Clock::now() + std::chrono::seconds(20);
  while (got < kRequests * kBody && Clock::now() < end) {
    const ssize_t n = recv(client_, buf, sizeof buf, 0);
    ASSERT_GT(n, 0) << strerror(errno);
    got += static_cast<size_t>(n);
  }
  EXPECT_EQ(got, kRequests * kBody);
  EXPECT_EQ(seen_.requests.load(), kRequests);
  EXPECT_FALSE(seen_.closed.load());
  EXPECT_TRUE(waitFor([&] { return used_.value() == 0; }, std::chrono::seconds(2)));
}

// The process budget: a second response queued behind an unsent one while the process would
// exceed max_bytes resets that connection; a connection that then holds output while the
// process is at half the budget stops being read; a client with nothing queued is served.
TEST_F(SocketReactorOutputTest, ProcessBudget) {
  limits.send_timeout_ns = 0;
  limits.max_bytes = 6 << 20;  // pause at 3 MiB; bodies of 8 MiB
  start(8 << 20);
  const int a = newClient(4096);
  ASSERT_EQ(::send(a, "gg", 2, MSG_NOSIGNAL), 2);  // 8 MiB accepted, 8 more would exceed
  ASSERT_TRUE(waitFor([&] { return metrics_->output_process_closes.value() == 1; },
                      std::chrono::seconds(5)));
  EXPECT_TRUE(waitFor([&] { return used_.value() == 0; }, std::chrono::seconds(2)));
  const int b = newClient(4096);
  ASSERT_EQ(::send(b, "g", 1, MSG_NOSIGNAL), 1);
  ASSERT_TRUE(waitFor([&] { return seen_.requests.load() == 3; }, std::chrono::seconds(2)));
  EXPECT_TRUE(waitFor([&] { return metrics_->output_read_pauses.value() >= 1; },
                      std::chrono::seconds(2)));
  ASSERT_EQ(::send(b, "g", 1, MSG_NOSIGNAL), 1);  // not read while b holds output
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(seen_.requests.load(), 3);
  // c has nothing queued: its request is read and answered in full meanwhile.
  const int c = newClient(0);
  ASSERT_EQ(::send(c, "g", 1, MSG_NOSIGNAL), 1);
  size_t got = 0;
  char buf[65536];
  while (got < (8u << 20)) {
    const ssize_t n = recv(c, buf, sizeof buf, 0);
    ASSERT_GT(n, 0) << strerror(errno);
    got += static_cast<size_t>(n);
  }
  EXPECT_EQ(seen_.requests.load(), 4);
  EXPECT_EQ(metrics_->output_process_closes.value(), 1u);
  EXPECT_EQ(metrics_->output_limit_closes.value(), 0u);
}

// Connection ticks: every connection is ticked once per tick_ns (to 9/8 of it), counted from
// its accept, by the FIFO of due connections rather than a scan of all of them.
struct TickLog {
  std::mutex mu;
  std::vector<std::vector<uint64_t>> ticks;  // per connection, the now_ns of each tick
  std::vector<uint64_t> accepted_ns;         // per connection, the loop's now_ns at accept
  std::vector<Clock::time_point> closed_at;  // per connection; epoch = still open
};

// Records its ticks; closes its connection once it has been quiet for `idle_ns` (what
// Http1Session does with limits.idle_timeout_ms).
class TickSession final : public net::Session {
 public:
  TickSession(net::Transport& t, TickLog& log, uint64_t idle_ns) : t_(&t), log_(log), idle_ns_(idle_ns) {
    std::lock_guard<std::mutex> lock(log_.mu);
    id_ = log_.ticks.size();
    log_.ticks.emplace_back();
    log_.closed_at.emplace_back();
    last_ = t.loop().nowNs();
    log_.accepted_ns.push_back(last_);
  }
  void onData(const char*, size_t) override { last_ = t_->loop().nowNs(); }
  void onPeerClosed() override {}
  void onTick(uint64_t now_ns) override {
    {
      std::lock_guard<std::mutex> lock(log_.mu);
      log_.ticks[id_].push_back(now_ns);
    }
    if (idle_ns_ != 0 && now_ns - last_ > idle_ns_ && t_ != nullptr) t_->closeAfterFlush();
  }
  void onClosed() override {
    t_ = nullptr;
    std::lock_guard<std::mutex> lock(log_.mu);
    log_.closed_at[id_] = Clock::now();
  }
  bool idle() const override { return true; }

 private:
  net::Transport* t_;
  TickLog& log_;
  uint64_t idle_ns_;
  uint64_t last_ = 0;
  size_t id_ = 0;
};

class SocketReactorTickTest : public ::testing::Test {
 protected:
  void start(uint64_t tick_ns, uint64_t idle_ns) {
    ReactorOptions ro;
    ro.tick_ns = tick_ns;
    reactor_ = std::make_unique<SocketReactor>(ro);
    absl::StatusOr<int> fd = openListener("127.0.0.1", 0, &port_);
    ASSERT_TRUE(fd.ok()) << fd.status();
    reactor_->addListener(*fd, [this, idle_ns](net::Transport& t) {
      return std::make_shared<TickSession>(t, log_, idle_ns);
    });
    reactor_->start();
  }
  int connectOne() {
    const int fd = connectLoopback(port_);
    clients_.push_back(fd);
    return fd;
  }
  size_t sessions() {
    std::lock_guard<std::mutex> lock(log_.mu);
    return log_.ticks.size();
  }
  void TearDown() override {
    for (int fd : clients_) close(fd);
    if (reactor_) {
      reactor_->stop(0);
      reactor_->join();
    }
  }
  TickLog log_;
  std::unique_ptr<SocketReactor> reactor_;
  uint16_t port_ = 0;
  std::vector<int> clients_;
};

TEST_F(SocketReactorTickTest, EveryConnectionIsTickedOncePerPeriod) {
  constexpr uint64_t kTick = 40'000'000;
  start(kTick, 0);
  for (int i = 0; i < 6; ++i) {  // accepted at different times: different phases
    connectOne();
    std::this_thread::sleep_for(std::chrono::milliseconds(7));
  }
  for (int i = 0; i < 200 && sessions() < 6; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(sessions(), 6u);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  std::lock_guard<std::mutex> lock(log_.mu);
  for (size_t c = 0; c < log_.ticks.size(); ++c) {
    const std::vector<uint64_t>& t = log_.ticks[c];
    // ~600 ms / 40..45 ms; a loaded machine may run the loop late, never early.
    EXPECT_GE(t.size(), 6u) << "connection " << c;
    EXPECT_LE(t.size(), 16u) << "connection " << c;
    // Its own phase: the first tick one period after its accept (a global tick for all
    // connections would come sooner to most of them).
    if (!t.empty()) {
      EXPECT_GE(t[0] - log_.accepted_ns[c], kTick) << "connection " << c;
    }
    for (size_t i = 1; i < t.size(); ++i) {
      EXPECT_GE(t[i] - t[i - 1], kTick) << "connection " << c << " tick " << i;
    }
  }
}

TEST_F(SocketReactorTickTest, IdleTimeoutFiresAtItsTime) {
  constexpr uint64_t kTick = 100'000'000;  // the default period
  constexpr uint64_t kIdle = 300'000'000;
  start(kTick, kIdle);
  const int early = connectOne();
  ASSERT_EQ(::send(early, "x", 1, MSG_NOSIGNAL), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  const auto t0 = Clock::now();
  const int late = connectOne();
  ASSERT_EQ(::send(late, "x", 1, MSG_NOSIGNAL), 1);
  // The early one times out first although both are in the tick FIFO; each at its own time.
  char b;
  timeval tv{2, 0};
  setsockopt(late, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ASSERT_EQ(recv(late, &b, 1, 0), 0) << "the idle connection was not closed";
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  EXPECT_GE(took, 300);
  EXPECT_LE(took, 300 + 113 + 150);  // one period (to 9/8 of it) of lateness, plus slack
  std::lock_guard<std::mutex> lock(log_.mu);
  ASSERT_EQ(log_.closed_at.size(), 2u);
  EXPECT_NE(log_.closed_at[0], Clock::time_point{});
  EXPECT_LT(log_.closed_at[0], log_.closed_at[1]);
}

// Draining closes idle connections at once (not at their next tick), and the loop ends.
TEST_F(SocketReactorTickTest, DrainClosesIdleConnectionsAtOnce) {
  start(10'000'000'000, 0);  // ticks far apart: only the drain itself can close them
  const int a = connectOne();
  const int b = connectOne();
  // Both have spoken (a keep-alive connection between requests): idle to their clients too.
  ASSERT_EQ(::send(a, "x", 1, MSG_NOSIGNAL), 1);
  ASSERT_EQ(::send(b, "x", 1, MSG_NOSIGNAL), 1);
  for (int i = 0; i < 200 && sessions() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(sessions(), 2u);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the bytes are read
  const auto t0 = Clock::now();
  reactor_->stop(5'000'000'000);
  reactor_->join();
  EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count(), 500);
  std::lock_guard<std::mutex> lock(log_.mu);
  EXPECT_NE(log_.closed_at[0], Clock::time_point{});
  EXPECT_NE(log_.closed_at[1], Clock::time_point{});
}

// A connection accepted moments before the drain whose first request has not arrived is held
// for its grace (1 s from its accept: its client has sent that request to us, during a
// restart), then closed; the drain does not wait for its deadline (5 s here).
TEST_F(SocketReactorTickTest, DrainHoldsAFreshSilentConnectionForItsGraceOnly) {
  start(10'000'000'000, 0);
  const int fresh = connectOne();
  for (int i = 0; i < 200 && sessions() < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(sessions(), 1u);
  const auto t0 = Clock::now();
  reactor_->stop(5'000'000'000);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  {
    std::lock_guard<std::mutex> lock(log_.mu);
    EXPECT_EQ(log_.closed_at[0], Clock::time_point{}) << "closed before its grace ended";
  }
  reactor_->join();
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  EXPECT_GE(took, 700);
  EXPECT_LT(took, 2000);
  char c;
  EXPECT_EQ(recv(fresh, &c, 1, 0), 0);
}

}  // namespace
}  // namespace infergate::dataplane
