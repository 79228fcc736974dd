#pragma once
// Pinned (page-locked) host memory for batch buffers, and a fixed-size slab pool over it.
//
// With PinnedOptions::shared_key set: a POSIX shared memory object of that key (shm_open +
// mmap MAP_SHARED, mlocked when allowed), so a co-located server can map the very buffers
// (Triton's system shared memory); unlinked when the region is released.
// Otherwise, allocation order, first that works: cudaHostAlloc(portable|mapped) when built with
// INFERGATE_WITH_CUDA and a device exists at run time; mmap(MAP_HUGETLB) when the system has
// huge pages reserved; mmap + mlock; plain mmap (pageable; a warning is logged, e.g. when
// RLIMIT_MEMLOCK is too small). The log says which one a region got.
// Threading: PinnedRegion is a move-only value; SlabPool is safe from any thread (a mutex,
// taken once per batch, never per packet).

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace infergate::backends {

enum class PinnedKind : uint8_t { kCudaHost, kHugePages, kMlocked, kPageable, kShared };
// "cuda_host", "huge_pages", "mlock", "pageable", "shm"
std::string_view pinnedKindName(PinnedKind k);

// What allocation adds to PinnedOptions::shared_key: "." and 16 hex digits.
inline constexpr size_t kShmSuffixBytes = 17;

struct PinnedOptions {
  bool try_cuda = true;
  bool try_huge_pages = true;
  bool try_mlock = true;
  std::string label;  // for the log line, e.g. "model 'identity' input 'INPUT0'"
  // Non-empty: allocate a POSIX shared memory object named after this prefix ("/name"): the
  // name is "<prefix>.<16 random hex digits>" (kShmSuffixBytes more; PinnedRegion::key() says
  // which), created exclusively, mode 0600, so nobody can take it first. try_mlock applies, the
  // others do not. Batcher: one object per input ("<key>.in<i>.<random>").
  std::string shared_key;
};

class PinnedRegion {
 public:
  PinnedRegion() = default;
  PinnedRegion(PinnedRegion&& o) noexcept;
  PinnedRegion& operator=(PinnedRegion&& o) noexcept;
  PinnedRegion(const PinnedRegion&) = delete;
  PinnedRegion& operator=(const PinnedRegion&) = delete;
  ~PinnedRegion();

  // At least `bytes` bytes (rounded up to the page or huge page size), zero-filled.
  // RESOURCE_EXHAUSTED when even plain mmap fails.
  static absl::StatusOr<PinnedRegion> allocate(size_t bytes, const PinnedOptions& options = {});

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  PinnedKind kind() const { return kind_; }
  bool locked() const { return locked_; }
  // The shared memory object's actual name (kind kShared: the prefix and its random suffix),
  // else empty.
  const std::string& key() const { return key_; }

 private:
  static absl::StatusOr<PinnedRegion> allocateShared(size_t bytes, const PinnedOptions& options,
                                                     const std::string& label);
  void release();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  PinnedKind kind_ = PinnedKind::kPageable;
  bool locked_ = false;
  std::string key_;
};

// `slabs` slabs of `slab_bytes` (rounded up to 64) carved from one PinnedRegion.
// acquire() returns nullptr when all are taken: the caller treats that as back-pressure.
class SlabPool {
 public:
  static absl::StatusOr<std::unique_ptr<SlabPool>> create(size_t slab_bytes, size_t slabs,
                                                          const PinnedOptions& options = {});
  uint8_t* acquire();
  // `slab` must come from acquire() of this pool (release assert).
  void release(uint8_t* slab);

  size_t slabBytes() const { return slab_bytes_; }
  size_t slabCount() const { return slabs_; }
  size_t available() const;
  PinnedKind kind() const { return region_.kind(); }
  size_t regionBytes() const { return region_.size(); }
  const uint8_t* regionData() const { return region_.data(); }
  const std::string& regionKey() const { return region_.key(); }

 private:
  SlabPool(PinnedRegion region, size_t slab_bytes, size_t slabs);
  PinnedRegion region_;
  size_t slab_bytes_;
  size_t slabs_;
  mutable std::mutex mu_;
  std::vector<uint8_t*> free_;
};

}  // namespace infergate::backends
