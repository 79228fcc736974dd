#pragma once
// The TCP stack's connection table: every connection slot, preallocated (`max_connections`,
// every state included), the free list that hands out slot ids, and the index from a FlowKey
// to its slot: open addressing with linear probing and backward-shift deletion, keyed with
// SipHash under a per-stack key from getrandom(), so nobody can pick 4-tuples that share a
// probe chain. No allocation after construction.
//
// `Conn` (TcpStack::Conn, dataplane/tcp/tcp_connection.h) provides `FlowKey key`,
// `uint64_t hash` (kept here between insert and erase) and `uint32_t id` (set here: the slot's
// index). What a slot holds and when it changes state is the stack's business.
//
// Threading: the owning reactor's thread only.

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/siphash.h"
#include "dataplane/tcp/packet.h"

namespace infergate::dataplane::tcp {

template <class Conn>
class ConnTable {
 public:
  ConnTable(uint32_t slots, const ig_sipkey& key) : slots_(slots), key_(key) {
    const uint32_t n = static_cast<uint32_t>(slots_.size());
    free_list_.reserve(n);
    for (uint32_t i = 0; i < n; ++i) {
      slots_[i].id = i;
      free_list_.push_back(n - 1 - i);  // pop_back hands out 0, 1, 2...
    }
    uint64_t cap = 16;
    while (cap < 2ull * n) cap <<= 1;
    table_.assign(cap, 0);
    table_mask_ = cap - 1;
  }

  // Slots, every state included (iterate and test state != kClosed for the live ones).
  size_t size() const { return slots_.size(); }
  Conn& operator[](uint32_t id) { return slots_[id]; }
  auto begin() { return slots_.begin(); }
  auto end() { return slots_.end(); }
  // Slots handed out by alloc() and not yet release()d.
  uint32_t used() const { return used_; }

  // A free slot (its previous contents untouched), or nullptr when every slot is in use.
  Conn* alloc() {
    if (free_list_.empty()) return nullptr;
    Conn& c = slots_[free_list_.back()];
    free_list_.pop_back();
    ++used_;
    return &c;
  }
  void release(Conn& c) {
    free_list_.push_back(c.id);
    --used_;
  }

  Conn* lookup(const FlowKey& k) {
    uint64_t i = hashKey(k) & table_mask_;
    while (table_[i] != 0) {
      Conn& c = slots_[table_[i] - 1];
      if (c.key == k) return &c;
      i = (i + 1) & table_mask_;
    }
    return nullptr;
  }

  // Indexes c under c.key (which must not be indexed already).
  void insert(Conn& c) {
    c.hash = hashKey(c.key);
    uint64_t i = c.hash & table_mask_;
    while (table_[i] != 0) i = (i + 1) & table_mask_;
    table_[i] = c.id + 1;
  }

  void erase(Conn& c) {
    uint64_t i = c.hash & table_mask_;
    while (table_[i] != c.id + 1) {
      if (table_[i] == 0) return;  // not present
      i = (i + 1) & table_mask_;
    }
    table_[i] = 0;
    uint64_t j = i;
    for (;;) {  // backward-shift deletion keeps probe chains unbroken
      j = (j + 1) & table_mask_;
      if (table_[j] == 0) break;
      const uint64_t h = slots_[table_[j] - 1].hash & table_mask_;
      const bool stays = (i <= j) ? (i < h && h <= j) : (i < h || h <= j);
      if (stays) continue;
      table_[i] = table_[j];
      table_[j] = 0;
      i = j;
    }
  }

 private:
  uint64_t hashKey(const FlowKey& k) const {
    // Keyed (getrandom): nobody can pick 4-tuples that share a probe chain. SipHash-1-3, as
    // hash tables use it: its output never leaves the process.
    __u64 w[5];
    std::memcpy(w, &k, sizeof(w));
    return ig_siphash13(&key_, w, 5);
  }

  std::vector<Conn> slots_;
  std::vector<uint32_t> free_list_;
  std::vector<uint32_t> table_;  // open addressing: slot id + 1, 0 = empty
  uint64_t table_mask_ = 0;
  uint32_t used_ = 0;
  ig_sipkey key_;
};

}  // namespace infergate::dataplane::tcp
