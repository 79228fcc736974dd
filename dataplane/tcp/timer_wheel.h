#pragma once
// A hashed timer wheel for one reactor: one timer per id (a connection slot; the connection
// keeps the earliest of its own deadlines here), O(1) schedule/cancel, expiry in tick order.
// Deadlines past the wheel's horizon wait in their slot for the right round. No allocation
// after construction.

#include <cstdint>
#include <vector>

namespace infergate::dataplane::tcp {

class TimerWheel {
 public:
  static constexpr uint32_t kNone = 0xffffffffu;

  TimerWheel(uint32_t ids, uint32_t slots_pow2, uint64_t granularity_ns, uint64_t now_ns)
      : nodes_(ids), heads_(slots_pow2, kNone), mask_(slots_pow2 - 1), gran_(granularity_ns),
        cur_tick_(now_ns / granularity_ns) {}

  // (Re)arms id's timer at `at_ns`; 0 cancels.
  void schedule(uint32_t id, uint64_t at_ns) {
    Node& n = nodes_[id];
    if (n.linked) {
      if (n.at == at_ns) return;
      unlink(id);
    }
    if (at_ns == 0) return;
    n.at = at_ns;
    uint64_t tick = at_ns / gran_;
    if (tick < cur_tick_) tick = cur_tick_;
    const uint32_t slot = static_cast<uint32_t>(tick & mask_);
    n.slot = slot;
    n.prev = kNone;
    n.next = heads_[slot];
    if (n.next != kNone) nodes_[n.next].prev = id;
    heads_[slot] = id;
    n.linked = true;
  }
  void cancel(uint32_t id) {
    if (nodes_[id].linked) unlink(id);
  }
  uint64_t deadline(uint32_t id) const { return nodes_[id].linked ? nodes_[id].at : 0; }

  // Unlinks every timer due at `now_ns` and appends its id to `due`.
  void advance(uint64_t now_ns, std::vector<uint32_t>& due) {
    const uint64_t now_tick = now_ns / gran_;
    if (now_tick < cur_tick_) return;
    uint64_t ticks = now_tick - cur_tick_ + 1;
    if (ticks > heads_.size()) ticks = heads_.size();  // a long jump: visit every slot once
    for (uint64_t t = 0; t < ticks; ++t) {
      const uint32_t slot = static_cast<uint32_t>((cur_tick_ + t) & mask_);
      uint32_t id = heads_[slot];
      while (id != kNone) {
        const uint32_t next = nodes_[id].next;
        if (nodes_[id].at <= now_ns) {
          unlink(id);
          due.push_back(id);
        }
        id = next;
      }
    }
    cur_tick_ = now_tick;  // the current tick is visited again next time (later deadlines)
  }

 private:
  struct Node {
    uint64_t at = 0;
    uint32_t prev = kNone;
    uint32_t next = kNone;
    uint32_t slot = 0;
    bool linked = false;
  };
  void unlink(uint32_t id) {
    Node& n = nodes_[id];
    if (n.prev != kNone) nodes_[n.prev].next = n.next;
    else heads_[n.slot] = n.next;
    if (n.next != kNone) nodes_[n.next].prev = n.prev;
    n.linked = false;
    n.prev = n.next = kNone;
  }
  std::vector<Node> nodes_;
  std::vector<uint32_t> heads_;
  uint64_t mask_;
  uint64_t gran_;
  uint64_t cur_tick_;
};

}  // namespace infergate::dataplane::tcp
