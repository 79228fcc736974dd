// The steady-state request path of the userspace TCP stack: C keep-alive connections, each
// sending one small request segment per round (which also acknowledges the previous response)
// and the session answering with one small response, through the fake device serving frames
// built beforehand and only counting what it transmits (no allocation of its own). The tests check what that path must do per request:
// exactly one frame out (the response, carrying the ACK), no bytes copied into the stack's
// receive buffers, and one device flush per received burst.
//
// It is also the stable per-request cost measure (docs/TCP.md "Cost of a request"): run
//   valgrind --tool=callgrind --toggle-collect='*TcpRequestPath*runRounds*'
//     build/tests/unit_dataplane_tcp_request_path_test --gtest_filter='*Measure*'
// (one command) and divide the instructions by the requests it prints.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dataplane/tcp/fake_device.h"
#include "dataplane/tcp/packet.h"
#include "dataplane/tcp/tcp_stack.h"
#include "tests/mocks/variable_clock.h"

namespace infergate::dataplane::tcp {
namespace {

constexpr uint16_t kPort = 8000;
constexpr uint64_t kUs = 1000;

// Answers each complete request ("\r\n\r\n") with a fixed response.
struct ReplySession final : net::Session {
  ReplySession(net::Transport& t, const std::string& reply) : transport(&t), reply(reply) {}
  void onData(const char* d, size_t n) override {
    bytes += n;
    if (n >= 4 && std::memcmp(d + n - 4, "\r\n\r\n", 4) == 0) {
      ++requests;
      transport->send(reply);
    }
  }
  void onPeerClosed() override {}
  void onTick(uint64_t) override {}
  void onClosed() override { transport = nullptr; }
  bool idle() const override { return true; }
  net::Transport* transport;
  const std::string& reply;
  size_t bytes = 0, requests = 0;
};

class TcpRequestPath : public ::testing::Test {
 protected:
  static constexpr uint32_t kClientIsn = 1000;
  static constexpr uint32_t kServerIsn = 5000;

  void start(size_t conns) {
    conns_ = conns;
    opts_.max_connections = 1024;
    opts_.isn_fn = [](const FlowKey&) { return kServerIsn; };
    dev_ = std::make_unique<FakePacketDevice>(1500, 4096);
    dev_->record = false;
    stack_ = std::make_unique<TcpStack>(opts_, *dev_, clock_);
    ASSERT_TRUE(stack_->listen(kPort, [this](net::Transport& t) {
                         auto s = std::make_shared<ReplySession>(t, reply_);
                         sessions_.push_back(s);
                         return s;
                       }).ok());
    // Handshakes, one burst of SYNs then one of ACKs.
    std::vector<std::vector<uint8_t>> syns, acks;
    for (size_t i = 0; i < conns; ++i) syns.push_back(frame(i, kSyn, kClientIsn, 0, {}, true));
    dev_->record = true;
    dev_->receiveFrom(syns.data(), syns.size());
    stack_->processRx(64);
    ASSERT_EQ(dev_->sent.size(), conns);
    for (size_t i = 0; i < conns; ++i) {
      Segment s;
      DropReason why;
      ASSERT_EQ(parseFrame(dev_->sent[i].data(), dev_->sent[i].size(), true, s, why), FrameKind::kTcp);
      ASSERT_EQ(s.seq, kServerIsn);
      server_ts_ = s.opt.ts_val;
      acks.push_back(frame(i, kAck, kClientIsn + 1, kServerIsn + 1, {}));
    }
    dev_->sent.clear();
    dev_->record = false;
    dev_->receiveFrom(acks.data(), acks.size());
    stack_->processRx(64);
    ASSERT_EQ(sessions_.size(), conns);
  }

  // A client frame of connection i.
  std::vector<uint8_t> frame(size_t i, uint8_t flags, uint32_t seq, uint32_t ack,
                             std::string_view payload, bool syn_opts = false) {
    FlowKey k;
    const uint8_t c[4] = {10, 0, 0, 2}, s[4] = {10, 0, 0, 1};
    std::memcpy(k.local_ip, c, 4);
    std::memcpy(k.remote_ip, s, 4);
    k.local_port = static_cast<uint16_t>(40000 + i);
    k.remote_port = kPort;
    SegmentSpec sp;
    sp.src_mac = cmac_;
    sp.dst_mac = smac_;
    sp.key = &k;
    sp.seq = seq;
    sp.ack = ack;
    sp.flags = flags;
    sp.window = syn_opts ? 65535 : 502;  // wscale 7: 64 KiB
    sp.has_ts = true;
    sp.ts_val = ++client_ts_;
    sp.ts_ecr = syn_opts ? 0 : server_ts_;
    if (syn_opts) {
      sp.mss = 1460;
      sp.wscale = 7;
      sp.sack_permitted = true;
    }
    std::vector<uint8_t> f(1600);
    f.resize(buildSegment(f.data(), f.size(), sp, reinterpret_cast<const uint8_t*>(payload.data()),
                          static_cast<uint32_t>(payload.size())));
    return f;
  }

  // Round r's frames: connection i's request r, acknowledging responses 0..r-1.
  void buildRounds(size_t rounds) {
    frames_.clear();
    for (size_t r = 0; r < rounds; ++r) {
      for (size_t i = 0; i < conns_; ++i) {
        const uint32_t seq = kClientIsn + 1 + static_cast<uint32_t>(r * request_.size());
        const uint32_t ack = kServerIsn + 1 + static_cast<uint32_t>(r * reply_.size());
        frames_.push_back(frame(i, kAck | kPsh, seq, ack, request_));
      }
    }
  }

  // The measured part: what the reactor does per loop iteration, one burst per round (the
  // clock moves 50 us per round, so timers are armed and the wheel turns as under load).
  __attribute__((noinline)) void runRounds(size_t rounds) {
    for (size_t r = 0; r < rounds; ++r) {
      dev_->receiveFrom(frames_.data() + r * conns_, conns_);
      stack_->processRx(64);
      now_ += 50 * kUs;
      stack_->poll(now_);
    }
  }

  std::string request_ =
      "POST /v2/models/identity/infer HTTP/1.1\r\nHost: 10.0.0.1:8000\r\nContent-Type: "
      "application/json\r\nContent-Length: 110\r\n\r\n";
  std::string reply_ = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 180\r\n\r\n" +
                       std::string(180, 'x');
  TcpOptions opts_;
  uint64_t now_ = 5'000'000'000ull;
  mocks::VariableClock clock_{now_};
  std::unique_ptr<FakePacketDevice> dev_;
  std::unique_ptr<TcpStack> stack_;
  std::vector<std::shared_ptr<ReplySession>> sessions_;
  std::vector<std::vector<uint8_t>> frames_;
  size_t conns_ = 0;
  uint8_t cmac_[6] = {2, 0, 0, 0, 0, 2};
  uint8_t smac_[6] = {2, 0, 0, 0, 0, 1};
  uint32_t client_ts_ = 100;
  uint32_t server_ts_ = 0;
};

TEST_F(TcpRequestPath, OneFrameOutPerRequestNoReceiveCopyOneFlushPerBurst) {
  start(32);
  constexpr size_t kRounds = 20;
  buildRounds(kRounds);
  const size_t tx0 = dev_->tx_frames, flushes0 = dev_->flushes;
  const uint64_t in0 = stack_->counters().segments_in;
  runRounds(kRounds);
  const size_t requests = kRounds * conns_;
  for (const auto& s : sessions_) EXPECT_EQ(s->requests, kRounds);
  EXPECT_EQ(stack_->counters().segments_in - in0, requests);
  EXPECT_EQ(dev_->tx_frames - tx0, requests);  // the response carries the ACK: no pure ACKs
  // One flush per received burst (the poll between bursts finds nothing to send).
  EXPECT_EQ(dev_->flushes - flushes0, kRounds);
  // In-order data goes from the frame to the session: the receive buffers hold nothing; the
  // send buffers hold the last round's responses (one chunk each), not yet acknowledged.
  EXPECT_EQ(stack_->bufferBytes(), conns_ * opts_.chunk_size);
  EXPECT_EQ(stack_->counters().retransmits, 0u);
}

TEST_F(TcpRequestPath, ResponsesAreWellFormed) {
  start(4);
  buildRounds(3);
  dev_->record = true;
  runRounds(3);
  ASSERT_EQ(dev_->sent.size(), 12u);
  for (size_t n = 0; n < dev_->sent.size(); ++n) {
    Segment s;
    DropReason why;
    ASSERT_EQ(parseFrame(dev_->sent[n].data(), dev_->sent[n].size(), true, s, why), FrameKind::kTcp)
        << "frame " << n << " checksum or header";
    const size_t r = n / 4;
    EXPECT_EQ(s.seq, kServerIsn + 1 + r * reply_.size());
    EXPECT_EQ(s.ack, kClientIsn + 1 + (r + 1) * request_.size());
    EXPECT_EQ(s.flags, kAck | kPsh);
    EXPECT_TRUE(s.opt.has_ts);
    EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(s.payload), s.payload_len), reply_);
  }
}

// flush_each_call false (the afxdp reactor): the stack queues frames and never flushes the
// device itself; the owner's one flushDevice() per loop iteration flushes once for the burst's
// responses and whatever poll() sent, and a flushDevice() with nothing queued does nothing.
TEST_F(TcpRequestPath, DeferredFlushIsOnePerIteration) {
  opts_.flush_each_call = false;
  start(8);
  buildRounds(3);
  const size_t flushes0 = dev_->flushes;
  const size_t tx0 = dev_->tx_frames;
  for (size_t r = 0; r < 3; ++r) {
    dev_->receiveFrom(frames_.data() + r * conns_, conns_);
    now_ += 50 * kUs;
    ASSERT_EQ(stack_->processRx(64, now_), conns_);
    EXPECT_EQ(stack_->now(), now_);  // the caller's time, no clock read of its own
    stack_->poll(now_);
    EXPECT_EQ(dev_->flushes, flushes0 + r) << "the stack flushed by itself";
    EXPECT_EQ(dev_->tx_frames, tx0 + (r + 1) * conns_);  // the responses are with the device
    stack_->flushDevice();
    EXPECT_EQ(dev_->flushes, flushes0 + r + 1);
    stack_->flushDevice();  // nothing new: no second flush
    EXPECT_EQ(dev_->flushes, flushes0 + r + 1);
  }
  // A session answering outside processRx()/poll() (work run at the end of the burst): the
  // iteration's flushDevice() sends it.
  const size_t tx1 = dev_->tx_frames;
  sessions_[0]->transport->send(reply_);
  stack_->flushDevice();
  EXPECT_EQ(dev_->tx_frames, tx1 + 1);
  EXPECT_EQ(dev_->flushes, flushes0 + 4);
}

// The callgrind measure (see the top of the file): 32 connections x 500 rounds.
TEST_F(TcpRequestPath, Measure) {
  start(32);
  constexpr size_t kRounds = 500;
  buildRounds(kRounds);
  runRounds(kRounds);
  for (const auto& s : sessions_) ASSERT_EQ(s->requests, kRounds);
  std::printf("requests: %zu\n", kRounds * conns_);
}

}  // namespace
}  // namespace infergate::dataplane::tcp
