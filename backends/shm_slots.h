#pragma once
// Fixed-size slots (one per in-flight batch) carved out of a shared memory region, for Triton's
// shared memory extensions (backends/triton_backend.h). The region itself is a PinnedRegion
// with a shared_key (backends/pinned_memory.h).
//
// Threading: safe from any thread (a mutex taken once per batch).

#include <cstddef>
#include <mutex>
#include <vector>

namespace infergate::backends {

// `count` slots of `slot_bytes` (a multiple of 64) in one region.
class ShmSlots {
 public:
  ShmSlots(size_t slot_bytes, size_t count);
  // Slot index, or -1 when all are in use.
  int acquire();
  void release(int slot);
  size_t slotBytes() const { return slot_bytes_; }
  size_t count() const { return count_; }

 private:
  size_t slot_bytes_;
  size_t count_;
  std::mutex mu_;
  std::vector<int> free_;
};

}  // namespace infergate::backends
