#include "frontend/sniffing_session.h"

#include <algorithm>
#include <utility>

namespace infergate::frontend {

SniffingSession::SniffingSession(net::Transport& transport, net::SessionFactory http1, net::SessionFactory http2,
                                 uint64_t undecided_timeout_ns)
    : transport_(&transport),
      http1_(std::move(http1)),
      http2_(std::move(http2)),
      undecided_timeout_ns_(undecided_timeout_ns) {}

void SniffingSession::decide(Choice c) {
  choice_ = c;
  inner_ = (c == Choice::kHttp2 ? http2_ : http1_)(*transport_);
  if (draining_) inner_->onDrain();
  std::string held = std::move(held_);
  held_.clear();
  if (!held.empty()) inner_->onData(held.data(), held.size());
  if (peer_closed_) inner_->onPeerClosed();
}

void SniffingSession::onData(const char* data, size_t len) {
  if (inner_) return inner_->onData(data, len);
  if (closed_ || len == 0) return;
  const size_t before = held_.size();
  const size_t need = kHttp2Preface.size() - before;
  const size_t take = std::min(need, len);
  held_.append(data, take);
  // Still a prefix of the preface?
  if (kHttp2Preface.substr(0, held_.size()) != held_) {
    held_.append(data + take, len - take);
    return decide(Choice::kHttp1);
  }
  if (held_.size() < kHttp2Preface.size()) return;  // wait for more
  held_.append(data + take, len - take);
  decide(Choice::kHttp2);
}

void SniffingSession::onPeerClosed() {
  peer_closed_ = true;
  if (inner_) return inner_->onPeerClosed();
  // Nothing decided and nothing more will come: hand what there is to HTTP/1.1 (it answers a
  // partial request line as it would on an HTTP/1.1 port), or just close when empty.
  if (held_.empty()) {
    transport_->closeAfterFlush();
  } else {
    decide(Choice::kHttp1);
  }
}

void SniffingSession::onTick(uint64_t now_ns) {
  if (inner_) return inner_->onTick(now_ns);
  if (closed_) return;
  if (first_tick_ns_ == 0) first_tick_ns_ = now_ns;
  if (now_ns - first_tick_ns_ >= undecided_timeout_ns_) {
    // A stalled preface: let HTTP/1.1 judge the bytes (it has its own header timeout), or
    // close a silent connection.
    if (held_.empty()) {
      closed_ = true;
      transport_->closeAfterFlush();
    } else {
      decide(Choice::kHttp1);
    }
  }
}

void SniffingSession::onClosed() {
  closed_ = true;
  if (inner_) inner_->onClosed();
}

bool SniffingSession::idle() const { return inner_ ? inner_->idle() : held_.empty(); }

void SniffingSession::onDrain() {
  draining_ = true;
  if (inner_) inner_->onDrain();
}

net::SessionFactory makeSniffingSessionFactory(net::SessionFactory http1, net::SessionFactory http2) {
  return [http1 = std::move(http1), http2 = std::move(http2)](net::Transport& t) {
    return std::make_shared<SniffingSession>(t, http1, http2);
  };
}

}  // namespace infergate::frontend
