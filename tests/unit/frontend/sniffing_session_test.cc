#include "frontend/sniffing_session.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/mocks/fake_transport.h"

namespace infergate::frontend {
namespace {

struct Recorder : net::Session {
  explicit Recorder(std::string k) : kind(std::move(k)) {}
  void onData(const char* d, size_t n) override { data.append(d, n); }
  void onPeerClosed() override { peer_closed = true; }
  void onTick(uint64_t) override { ++ticks; }
  void onClosed() override { closed = true; }
  bool idle() const override { return false; }
  void onDrain() override { drained = true; }
  std::string kind, data;
  bool peer_closed = false, closed = false, drained = false;
  int ticks = 0;
};

struct Fixture {
  mocks::FakeTransport t;
  std::vector<std::shared_ptr<Recorder>> made;
  std::shared_ptr<net::Session> s = makeSniffingSessionFactory(
      [this](net::Transport&) { return made.emplace_back(std::make_shared<Recorder>("h1")); },
      [this](net::Transport&) { return made.emplace_back(std::make_shared<Recorder>("h2")); })(t);
  SniffingSession& sniff() { return static_cast<SniffingSession&>(*s); }
};

const std::string kPreface(SniffingSession::kHttp2Preface);

TEST(SniffingSession, Http1DecidedAtFirstByte) {
  Fixture f;
  f.s->onData("G", 1);
  ASSERT_EQ(f.made.size(), 1u);
  EXPECT_EQ(f.made[0]->kind, "h1");
  f.s->onData("ET / HTTP/1.1\r\n", 15);
  EXPECT_EQ(f.made[0]->data, "GET / HTTP/1.1\r\n");
  f.s->onTick(5);
  EXPECT_EQ(f.made[0]->ticks, 1);
}

TEST(SniffingSession, Http2PrefaceAtEverySplit) {
  const std::string bytes = kPreface + "\x00\x00\x00\x04\x00\x00\x00\x00\x00" + std::string("x");
  for (size_t split = 1; split < bytes.size(); ++split) {
    Fixture f;
    f.s->onData(bytes.data(), split);
    if (split < kPreface.size()) {
      EXPECT_TRUE(f.made.empty()) << split;
      EXPECT_EQ(f.sniff().choice(), SniffingSession::Choice::kUndecided);
    }
    f.s->onData(bytes.data() + split, bytes.size() - split);
    ASSERT_EQ(f.made.size(), 1u) << split;
    EXPECT_EQ(f.made[0]->kind, "h2");
    EXPECT_EQ(f.made[0]->data, bytes) << split;
  }
}

TEST(SniffingSession, PriMethodThatIsNotThePrefaceGoesToHttp1) {
  Fixture f;
  const std::string req = "PRI * HTTP/1.1\r\nHost: x\r\n\r\n";
  for (char c : req) f.s->onData(&c, 1);
  ASSERT_EQ(f.made.size(), 1u);
  EXPECT_EQ(f.made[0]->kind, "h1");
  EXPECT_EQ(f.made[0]->data, req);
}

TEST(SniffingSession, PeerCloseAndTimeoutBeforeDeciding) {
  {
    Fixture f;
    f.s->onPeerClosed();
    EXPECT_TRUE(f.made.empty());
    EXPECT_TRUE(f.t.closed);
  }
  {
    Fixture f;
    f.s->onData("PRI", 3);
    f.s->onPeerClosed();
    ASSERT_EQ(f.made.size(), 1u);
    EXPECT_EQ(f.made[0]->kind, "h1");
    EXPECT_EQ(f.made[0]->data, "PRI");
    EXPECT_TRUE(f.made[0]->peer_closed);
  }
  {
    Fixture f;
    f.s->onTick(1);
    f.s->onTick(20'000'000'000ull);
    EXPECT_TRUE(f.made.empty());
    EXPECT_TRUE(f.t.closed);
  }
  {
    Fixture f;
    f.s->onDrain();
    f.s->onData("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
    ASSERT_EQ(f.made.size(), 1u);
    EXPECT_TRUE(f.made[0]->drained);
    f.s->onClosed();
    EXPECT_TRUE(f.made[0]->closed);
  }
}

}  // namespace
}  // namespace infergate::frontend
