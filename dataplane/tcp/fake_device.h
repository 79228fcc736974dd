#pragma once
// A PacketDevice for tests: frames injected with inject() come out of rxBurst(); frames the
// stack transmits are recorded in `sent` (oldest first; with record = false only counted, in
// `tx_frames`). Transmit buffers come from a fixed set so tests can starve the stack
// (tx_limit). For cost measures, receiveFrom() serves frames the test built beforehand
// instead, without copying them.
//
// Received frames are accounted one by one (PacketDevice ownership): each rxBurst() frame gets
// its own handle and stays valid until rxRelease() names it; outstanding() is how many are
// with the caller, double_releases / unknown_releases count contract violations (tests assert
// both zero and outstanding() back to 0). rxHoldBudget() is `hold_budget` (frames the stack
// may keep past a burst; 0 makes the stack copy out-of-order data as before).

#include <algorithm>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "dataplane/packet_io.h"

namespace infergate::dataplane::tcp {

class FakePacketDevice final : public PacketDevice {
 public:
  explicit FakePacketDevice(uint32_t mtu = 1500, size_t tx_frames = 1024)
      : mtu_(mtu), buffers_(tx_frames, std::vector<uint8_t>(mtu + 14 + 64)) {
    for (size_t i = 0; i < tx_frames; ++i) free_.push_back(i);
  }

  // `meta`: what rxBurst() puts in Frame::meta (the XDP program's tag, frame_tag.h).
  void inject(std::vector<uint8_t> frame, uint64_t meta = 0) {
    rx_.push_back(std::move(frame));
    rx_meta_.push_back(meta);
  }

  // rxBurst() serves frames[0, n) (kept by the caller) before any injected ones.
  void receiveFrom(const std::vector<uint8_t>* frames, size_t n) {
    ext_ = frames;
    ext_n_ = n;
    ext_pos_ = 0;
  }

  size_t rxBurst(Frame* frames, size_t max) override {
    size_t n = 0;
    for (; n < max && ext_pos_ < ext_n_; ++n) {
      const std::vector<uint8_t>& f = ext_[ext_pos_++];
      frames[n].data = const_cast<uint8_t*>(f.data());
      frames[n].len = static_cast<uint32_t>(f.size());
      frames[n].handle = kExternal | n;  // counted only: the caller keeps these frames
      ++ext_out_;
      frames[n].meta = 0;
    }
    while (n < max && !rx_.empty()) {
      const uint64_t h = next_handle_++;
      std::vector<uint8_t>& f = out_.emplace(h, std::move(rx_.front())).first->second;
      rx_.pop_front();
      frames[n].meta = rx_meta_.front();
      rx_meta_.pop_front();
      frames[n].data = f.data();
      frames[n].len = static_cast<uint32_t>(f.size());
      frames[n].handle = h;
      ++n;
    }
    max_outstanding = std::max(max_outstanding, outstanding());
    return n;
  }
  void rxRelease(const Frame* frames, size_t n) override {
    for (size_t i = 0; i < n; ++i) {
      const uint64_t h = frames[i].handle;
      if (h & kExternal) {
        if (ext_out_ == 0) ++double_releases;
        else --ext_out_, ++released_;
        continue;
      }
      auto it = out_.find(h);
      if (it == out_.end()) {
        if (h < next_handle_) {
          ++double_releases;
        } else {
          ++unknown_releases;
        }
        continue;
      }
      if (poison_released) {  // kept, overwritten: a read after release sees 0xdb
        std::fill(it->second.begin(), it->second.end(), uint8_t{0xdb});
        graveyard_.push_back(std::move(it->second));
      }
      out_.erase(it);
      ++released_;
    }
  }
  uint32_t rxHoldBudget() const override { return hold_budget; }
  // Received frames not released yet.
  size_t outstanding() const { return out_.size() + ext_out_; }
  bool txAlloc(Frame* f) override {
    if (free_.empty() || tx_limit == 0) return false;
    if (tx_limit > 0) --tx_limit;
    const size_t i = free_.back();
    free_.pop_back();
    f->data = buffers_[i].data();
    f->capacity = static_cast<uint32_t>(buffers_[i].size());
    f->handle = i;
    f->len = 0;
    return true;
  }
  void txBurst(Frame* frames, size_t n) override {
    for (size_t i = 0; i < n; ++i) {
      if (record) sent.emplace_back(frames[i].data, frames[i].data + frames[i].len);
      if (frames[i].meta & kMetaTxChecksumOffload) ++tx_offload_marked;
      free_.push_back(frames[i].handle);  // "completed" at once
    }
    tx_frames += n;
  }
  void txFlush() override { ++flushes; }
  uint32_t mtu() const override { return mtu_; }
  bool txChecksumOffload() const override { return tx_checksum_offload; }

  std::deque<std::vector<uint8_t>> sent;
  size_t tx_offload_marked = 0;  // frames transmitted with kMetaTxChecksumOffload
  bool record = true;    // false: transmitted frames are only counted
  size_t tx_frames = 0;  // frames transmitted
  int64_t tx_limit = -1;  // < 0: unlimited; otherwise frames left before txAlloc fails
  size_t flushes = 0;
  size_t released_ = 0;
  uint32_t hold_budget = 0;
  size_t max_outstanding = 0;   // most frames out at once
  size_t double_releases = 0;   // frames released twice
  size_t unknown_releases = 0;  // handles never handed out
  bool poison_released = false; // overwrite injected frames' bytes as they are released
  bool tx_checksum_offload = false;  // what txChecksumOffload() says (read when a stack is built)

 private:
  uint32_t mtu_;
  std::vector<std::vector<uint8_t>> buffers_;
  std::vector<size_t> free_;
  std::deque<std::vector<uint8_t>> rx_;
  std::deque<uint64_t> rx_meta_;
  static constexpr uint64_t kExternal = 1ull << 63;
  std::unordered_map<uint64_t, std::vector<uint8_t>> out_;  // frames with the caller
  uint64_t next_handle_ = 1;
  size_t ext_out_ = 0;
  std::deque<std::vector<uint8_t>> graveyard_;
  const std::vector<uint8_t>* ext_ = nullptr;
  size_t ext_n_ = 0, ext_pos_ = 0;
};

}  // namespace infergate::dataplane::tcp
