#include "backends/shm_slots.h"

namespace infergate::backends {

ShmSlots::ShmSlots(size_t slot_bytes, size_t count) : slot_bytes_(slot_bytes), count_(count) {
  for (size_t i = count; i > 0; --i) free_.push_back(static_cast<int>(i - 1));
}

int ShmSlots::acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.empty()) return -1;
  int s = free_.back();
  free_.pop_back();
  return s;
}

void ShmSlots::release(int slot) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(slot);
}

}  // namespace infergate::backends
