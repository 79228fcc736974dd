#pragma once
// POSIX shared memory for Triton's system shared memory extension: a region infergate creates
// (shm_open + ftruncate + mmap), that co-located servers map by its key after
// SystemSharedMemoryRegister, carved into fixed-size slots (one per in-flight batch).
//
// Threading: ShmRegion is immutable after create(); ShmSlots is safe from any thread (a mutex
// taken once per batch).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace infergate::backends {

class ShmRegion {
 public:
  // `key` starts with '/', e.g. "/infergate.1234.resnet". Fails (with the errno text) if the key
  // exists already or /dev/shm is not writable.
  static absl::StatusOr<std::unique_ptr<ShmRegion>> create(std::string key, size_t bytes);
  ~ShmRegion();  // munmap + shm_unlink
  const std::string& key() const { return key_; }
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  ShmRegion(std::string key, uint8_t* data, size_t size)
      : key_(std::move(key)), data_(data), size_(size) {}
  std::string key_;
  uint8_t* data_;
  size_t size_;
};

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
