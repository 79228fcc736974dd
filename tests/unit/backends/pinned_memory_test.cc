#include "backends/pinned_memory.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <string>

namespace infergate::backends {
namespace {

TEST(PinnedRegionTest, AllocatesZeroedWritableMemoryOfSomeKind) {
  absl::StatusOr<PinnedRegion> r = PinnedRegion::allocate(100000, {});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_NE(r->data(), nullptr);
  EXPECT_GE(r->size(), 100000u);
  for (size_t i = 0; i < r->size(); i += 4096) EXPECT_EQ(r->data()[i], 0);
  std::memset(r->data(), 0xab, r->size());
  EXPECT_EQ(r->data()[r->size() - 1], 0xab);
  // Without CUDA in this build the kind is one of the mmap ones.
  const std::set<std::string_view> kinds = {"cuda_host", "huge_pages", "mlock", "pageable"};
  EXPECT_TRUE(kinds.count(pinnedKindName(r->kind())));
}

TEST(PinnedRegionTest, FallsBackToPageableWhenPinningIsNotAllowed) {
  PinnedOptions o;
  o.try_cuda = o.try_huge_pages = o.try_mlock = false;
  absl::StatusOr<PinnedRegion> r = PinnedRegion::allocate(5000, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind(), PinnedKind::kPageable);
  EXPECT_EQ(r->size() % 4096, 0u);
}

TEST(PinnedRegionTest, MlockWhenHugePagesAreNotTried) {
  PinnedOptions o;
  o.try_cuda = o.try_huge_pages = false;
  absl::StatusOr<PinnedRegion> r = PinnedRegion::allocate(64 * 1024, o);
  ASSERT_TRUE(r.ok());
  // mlock of 64 KiB fits the default RLIMIT_MEMLOCK (or the process has CAP_IPC_LOCK); where it
  // does not, the region is pageable and a warning was logged.
  EXPECT_TRUE(r->kind() == PinnedKind::kMlocked || r->kind() == PinnedKind::kPageable);
}

TEST(PinnedRegionTest, MoveTransfersOwnership) {
  absl::StatusOr<PinnedRegion> r = PinnedRegion::allocate(4096, {});
  ASSERT_TRUE(r.ok());
  uint8_t* p = r->data();
  PinnedRegion moved = std::move(*r);
  EXPECT_EQ(moved.data(), p);
  EXPECT_EQ(r->data(), nullptr);
}

TEST(PinnedRegionTest, SharedKeyMakesAPosixSharedMemoryObjectAPeerCanMap) {
  PinnedOptions o;
  o.shared_key = "/igtest.pinned." + std::to_string(::getpid());
  std::string key;
  {
    auto r = PinnedRegion::allocate(10000, o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->kind(), PinnedKind::kShared);
    EXPECT_EQ(pinnedKindName(r->kind()), "shm");
    // The name is the prefix and a random suffix.
    key = r->key();
    EXPECT_EQ(key.substr(0, o.shared_key.size() + 1), o.shared_key + ".");
    EXPECT_EQ(key.size(), o.shared_key.size() + kShmSuffixBytes);
    EXPECT_GE(r->size(), 10000u);
    std::memcpy(r->data() + 5000, "infergate", 9);
    // Another mapping of the key (what Triton does after SystemSharedMemoryRegister) sees it.
    int fd = ::shm_open(key.c_str(), O_RDONLY, 0);
    ASSERT_GE(fd, 0);
    void* p = ::mmap(nullptr, r->size(), PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    ASSERT_NE(p, MAP_FAILED);
    EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(p) + 5000, "infergate", 9), 0);
    ::munmap(p, r->size());
    // A second region of the same prefix gets a name of its own.
    auto second = PinnedRegion::allocate(100, o);
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_NE(second->key(), key);
    PinnedRegion moved = std::move(*r);
    EXPECT_EQ(moved.key(), key);
  }
  // Released: unlinked.
  EXPECT_LT(::shm_open(key.c_str(), O_RDONLY, 0), 0);
}

// A local user who creates the name infergate used to pick ("/infergate.<pid>.<model>.<n>",
// predictable) before it starts cannot make start-up fail.
TEST(PinnedRegionTest, AnObjectPreCreatedUnderThePrefixDoesNotBlockAllocation) {
  PinnedOptions o;
  o.try_mlock = false;
  o.shared_key = "/igtest.squat." + std::to_string(::getpid());
  const int squat = ::shm_open(o.shared_key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0644);
  ASSERT_GE(squat, 0) << std::strerror(errno);
  ::close(squat);
  auto r = PinnedRegion::allocate(4096, o);
  ::shm_unlink(o.shared_key.c_str());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->key(), o.shared_key);
}

TEST(SlabPoolTest, SharedPoolExposesItsRegion) {
  PinnedOptions o;
  o.try_mlock = false;
  o.shared_key = "/igtest.slab." + std::to_string(::getpid());
  auto pool = SlabPool::create(256, 4, o);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ((*pool)->regionKey().substr(0, o.shared_key.size() + 1), o.shared_key + ".");
  uint8_t* s = (*pool)->acquire();
  EXPECT_GE(s, (*pool)->regionData());
  EXPECT_LT(s, (*pool)->regionData() + (*pool)->regionBytes());
  (*pool)->release(s);
}

TEST(SlabPoolTest, AcquireUntilExhaustedThenReuse) {
  absl::StatusOr<std::unique_ptr<SlabPool>> pool = SlabPool::create(100, 3, {});
  ASSERT_TRUE(pool.ok());
  SlabPool& p = **pool;
  EXPECT_EQ(p.slabBytes(), 128u);  // rounded up to 64
  EXPECT_EQ(p.slabCount(), 3u);
  std::set<uint8_t*> got;
  for (int i = 0; i < 3; ++i) {
    uint8_t* s = p.acquire();
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s) % 64, 0u);
    std::memset(s, i, p.slabBytes());  // slabs do not overlap (checked below)
    got.insert(s);
  }
  EXPECT_EQ(got.size(), 3u);
  EXPECT_EQ(p.acquire(), nullptr);  // exhausted: back-pressure, not a crash
  EXPECT_EQ(p.available(), 0u);
  int i = 0;
  for (uint8_t* s : got) EXPECT_EQ(s[p.slabBytes() - 1], s[0]) << i++;
  uint8_t* first = *got.begin();
  p.release(first);
  EXPECT_EQ(p.available(), 1u);
  EXPECT_EQ(p.acquire(), first);
}

TEST(SlabPoolTest, ZeroSlabsIsAnError) {
  EXPECT_FALSE(SlabPool::create(64, 0, {}).ok());
}

TEST(SlabPoolDeathTest, ReleasingAForeignPointerAborts) {
  absl::StatusOr<std::unique_ptr<SlabPool>> pool = SlabPool::create(64, 2, {});
  ASSERT_TRUE(pool.ok());
  uint8_t x = 0;
  EXPECT_DEATH((*pool)->release(&x), "not from this pool");
}

}  // namespace
}  // namespace infergate::backends

#ifdef INFERGATE_WITH_CUDA
#include <cuda_runtime_api.h>

namespace infergate::backends {
namespace {

// With a GPU, batch buffers are cudaHostAlloc'ed (portable, mapped): the device can DMA from
// them and a kernel can address them through their device pointer.
TEST(PinnedRegionCudaTest, UsesCudaHostAllocWhenADeviceExists) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    GTEST_SKIP() << "needs a CUDA device (none visible to this process)";
  }
  absl::StatusOr<PinnedRegion> r = PinnedRegion::allocate(1 << 20);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->kind(), PinnedKind::kCudaHost);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, r->data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  void* dev = nullptr;
  EXPECT_EQ(cudaHostGetDevicePointer(&dev, r->data(), 0), cudaSuccess);
  EXPECT_NE(dev, nullptr);
  // A host -> device -> host round trip through the pinned buffer is byte-exact.
  std::memset(r->data(), 0x5a, 4096);
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 4096), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, r->data(), 4096, cudaMemcpyHostToDevice), cudaSuccess);
  std::memset(r->data(), 0, 4096);
  ASSERT_EQ(cudaMemcpy(r->data(), d, 4096, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(r->data()[0], 0x5a);
  EXPECT_EQ(r->data()[4095], 0x5a);
  cudaFree(d);
}

}  // namespace
}  // namespace infergate::backends
#endif
