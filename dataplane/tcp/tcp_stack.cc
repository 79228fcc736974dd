#include "dataplane/tcp/tcp_stack.h"

// The stack itself: construction, listeners and the entry points (frames in, poll). Where the
// rest is (docs/TCP.md "Where the code is"): tcp_connection.{h,cc} (the connection and its
// Transport), conn_table.h (slots, free list, FlowKey index), tcp_handshake.cc (passive open,
// SYN cookies), tcp_input.cc (segments in), tcp_output.cc (segments out), tcp_timers.cc.

#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "common/secret.h"
#include "dataplane/tcp/tcp_connection.h"

namespace infergate::dataplane::tcp {

uint8_t windowShiftFor(uint32_t rcv_buf) {
  uint8_t shift = 0;
  while ((rcv_buf >> shift) > 65535 && shift < 14) ++shift;
  return shift;
}

class TcpStack::OwnLoop final : public net::Loop {
 public:
  explicit OwnLoop(TcpStack& s) : owner_(std::this_thread::get_id()), stack_(s) {}
  void post(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);  // pairs with runPosted(); cross-thread completions only
    posted_.push_back(std::move(fn));
  }
  bool inLoopThread() const override { return std::this_thread::get_id() == owner_; }
  uint64_t nowNs() const override { return stack_.now_; }
  int index() const override { return stack_.options_.index; }
  void runPosted() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (posted_.empty()) return;
      running_.swap(posted_);
    }
    for (auto& fn : running_) fn();
    running_.clear();
  }
  std::thread::id owner_;

 private:
  TcpStack& stack_;
  std::mutex mu_;
  std::vector<std::function<void()>> posted_;
  std::vector<std::function<void()>> running_;
};

TcpStack::TcpStack(const TcpOptions& options, PacketDevice& device, const common::Clock& clock,
                   net::Loop* loop)
    : options_(options),
      device_(device),
      clock_(clock),
      now_(clock_.nowNs()),
      mtu_(device.mtu()),
      tx_checksum_(device.txChecksumOffload() ? TxChecksum::kOffload : TxChecksum::kSoftware),
      tx_meta_(device.txChecksumOffload() ? kMetaTxChecksumOffload : 0),
      pool_(options.chunk_size, options.pool_keep_chunks),
      wheel_(std::max<uint32_t>(options.max_connections, 1), options.timer_slots,
             options.timer_granularity_ns, now_),
      cookies_(options.cookie_jar ? options.cookie_jar : std::make_shared<SynCookieJar>()),
      conns_(std::max<uint32_t>(options.max_connections, 1), common::randomSipKey()),
      misc_key_(common::randomSipKey()) {
  if (options_.max_ooo_ranges > kMaxOoo) options_.max_ooo_ranges = kMaxOoo;
  if (options_.max_ooo_ranges == 0) options_.max_ooo_ranges = 1;
  if (loop == nullptr) {
    own_loop_ = std::make_unique<OwnLoop>(*this);
    loop_ = own_loop_.get();
  } else {
    loop_ = loop;
  }
  const uint32_t n = static_cast<uint32_t>(conns_.size());
  for (Conn& c : conns_) c.stack = this;
  dirty_.reserve(n);
  due_.reserve(n);
  tx_batch_.reserve(64);
  rx_batch_.resize(256);
  rx_keep_.assign(rx_batch_.size(), 0);
  rx_release_.reserve(rx_batch_.size());
  held_budget_ = std::min(options_.max_held_frames, device_.rxHoldBudget());
  if (options_.max_held_frames_per_connection == 0) held_budget_ = 0;
  held_.resize(held_budget_);
  held_free_.reserve(held_budget_);
  for (uint32_t i = held_budget_; i-- > 0;) held_free_.push_back(i);
  last_session_tick_ = now_;
  challenge_window_start_ = now_;
  challenge_limit_now_ = options_.challenge_ack_limit;
}

TcpStack::~TcpStack() {
  for (Conn& c : conns_) {
    if (c.state == TcpState::kClosed) continue;
    releaseHeld(c);  // the device outlives the stack (PacketDevice ownership)
    c.rx.clear(pool_);
    tx_freed_ += static_cast<int64_t>(c.tx.size());
    c.tx.clear(pool_);
    if (c.session) {
      auto sp = std::move(c.session);
      sp->onClosed();
    }
  }
  publishOutput();
}

void TcpStack::bindThread() {
  if (own_loop_) own_loop_->owner_ = std::this_thread::get_id();
}

absl::Status TcpStack::listen(uint16_t port, net::SessionFactory factory) {
  for (const Listener& l : listeners_) {
    if (l.port == port) return absl::AlreadyExistsError("port " + std::to_string(port) + " already has a listener");
  }
  listeners_.push_back(Listener{port, std::move(factory)});
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// Entry points

void TcpStack::onFrame(const uint8_t* frame, size_t len, uint64_t meta) {
  now_ = clock_.nowNs();
  cur_meta_ = meta;
  handleFrame(frame, len);
  cur_meta_ = 0;
  flushDirty();
  flushTx();
}

size_t TcpStack::processRx(size_t max) {
  if (max > rx_batch_.size()) max = rx_batch_.size();
  const size_t n = device_.rxBurst(rx_batch_.data(), max);
  if (n == 0) return 0;
  return handleBurst(n, clock_.nowNs());
}

size_t TcpStack::processRx(size_t max, uint64_t now_ns) {
  if (max > rx_batch_.size()) max = rx_batch_.size();
  const size_t n = device_.rxBurst(rx_batch_.data(), max);
  if (n == 0) return 0;
  return handleBurst(n, now_ns);
}

size_t TcpStack::handleBurst(size_t n, uint64_t now_ns) {
  now_ = now_ns;
  for (size_t i = 0; i < n; ++i) {
    cur_meta_ = rx_batch_[i].meta;
    cur_frame_ = static_cast<int32_t>(i);
    handleFrame(rx_batch_[i].data, rx_batch_[i].len);
  }
  cur_frame_ = -1;
  cur_meta_ = 0;
  if (held_in_burst_ == 0) {
    device_.rxRelease(rx_batch_.data(), n);
  } else {
    // Some frames stay with their connections (out-of-order segments): release the others.
    rx_release_.clear();
    for (size_t i = 0; i < n; ++i) {
      if (rx_keep_[i]) rx_keep_[i] = 0;
      else rx_release_.push_back(rx_batch_[i]);
    }
    held_in_burst_ = 0;
    if (!rx_release_.empty()) device_.rxRelease(rx_release_.data(), rx_release_.size());
  }
  flushDirty();
  flushTx();
  return n;
}

void TcpStack::poll(uint64_t now_ns) {
  now_ = now_ns;
  cookies_->maybeRotate(now_);
  if (own_loop_) own_loop_->runPosted();
  wheel_.advance(now_, due_);
  for (size_t i = 0; i < due_.size(); ++i) {
    Conn& c = conns_[due_[i]];
    if (c.state != TcpState::kClosed) onTimer(c);
  }
  due_.clear();
  if (now_ - last_session_tick_ >= options_.session_tick_ns) {
    last_session_tick_ = now_;
    for (Conn& c : conns_) {
      if (c.session && !c.app_close) {
        if (c.out_paused || (!c.tx.empty() && options_.output.globalPause())) {
          updateOutputPause(c);  // the process budget may have changed
        }
        std::shared_ptr<net::Session> sp = c.session;
        sp->onTick(now_);
      }
    }
  }
  flushDirty();
  flushTx();
}

void TcpStack::abortAll() {
  for (Conn& c : conns_) {
    if (c.state != TcpState::kClosed) resetConn(c, true);
  }
  publishOutput();
  flushTx();
}

}  // namespace infergate::dataplane::tcp
