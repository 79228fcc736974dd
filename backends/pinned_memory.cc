#include "backends/pinned_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "common/check.h"
#include "common/secret.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

#ifdef INFERGATE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace infergate::backends {
namespace {

constexpr size_t kHugePage = 2u << 20;

size_t roundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

}  // namespace

std::string_view pinnedKindName(PinnedKind k) {
  switch (k) {
    case PinnedKind::kCudaHost: return "cuda_host";
    case PinnedKind::kHugePages: return "huge_pages";
    case PinnedKind::kMlocked: return "mlock";
    case PinnedKind::kPageable: return "pageable";
    case PinnedKind::kShared: return "shm";
  }
  return "unknown";
}

PinnedRegion::PinnedRegion(PinnedRegion&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      kind_(o.kind_),
      locked_(o.locked_),
      key_(std::move(o.key_)) {}

PinnedRegion& PinnedRegion::operator=(PinnedRegion&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    kind_ = o.kind_;
    locked_ = o.locked_;
    key_ = std::move(o.key_);
  }
  return *this;
}

PinnedRegion::~PinnedRegion() { release(); }

void PinnedRegion::release() {
  if (data_ == nullptr) return;
#ifdef INFERGATE_WITH_CUDA
  if (kind_ == PinnedKind::kCudaHost) {
    cudaFreeHost(data_);
    data_ = nullptr;
    return;
  }
#endif
  if (kind_ == PinnedKind::kMlocked || locked_) munlock(data_, size_);
  munmap(data_, size_);
  if (kind_ == PinnedKind::kShared) shm_unlink(key_.c_str());
  data_ = nullptr;
  size_ = 0;
  key_.clear();
}

absl::StatusOr<PinnedRegion> PinnedRegion::allocateShared(size_t bytes,
                                                          const PinnedOptions& options,
                                                          const std::string& label) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t size = roundUp(bytes, page);
  // The object's name is the caller's prefix and kShmSuffixDigits random hex digits: a local
  // user who can predict the prefix (pid, model name) still cannot block start-up by creating
  // the name first. EEXIST (someone else's object, or a collision) draws a new suffix.
  std::string key;
  int fd = -1;
  for (int attempt = 0; attempt < 16; ++attempt) {
    uint64_t r = 0;
    common::randomBytes(&r, sizeof r);
    key = fmt::format("{}.{:016x}", options.shared_key, r);
    fd = shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0 || errno != EEXIST) break;
  }
  if (fd < 0) {
    return absl::FailedPreconditionError(fmt::format(
        "shared memory for {}: cannot create POSIX shared memory '{}': {} (is /dev/shm mounted "
        "and writable?)",
        label, key, std::strerror(errno)));
  }
  // posix_fallocate, not just ftruncate: tmpfs pages are reserved now (ENOSPC when /dev/shm is
  // too small) instead of a SIGBUS at the first touch of a page that does not fit.
  const int fe = ftruncate(fd, static_cast<off_t>(size)) != 0
                     ? errno
                     : posix_fallocate(fd, 0, static_cast<off_t>(size));
  if (fe != 0) {
    close(fd);
    shm_unlink(key.c_str());
    return absl::ResourceExhaustedError(fmt::format(
        "shared memory for {}: cannot size '{}' to {} bytes: {} (is /dev/shm large enough? "
        "Docker's default is 64 MiB: --shm-size)",
        label, key, size, std::strerror(fe)));
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int e = errno;
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(key.c_str());
    return absl::ResourceExhaustedError(fmt::format("shared memory for {}: cannot map '{}': {}",
                                                    label, key, std::strerror(e)));
  }
  PinnedRegion r;
  r.data_ = static_cast<uint8_t*>(p);
  r.size_ = size;
  r.kind_ = PinnedKind::kShared;
  r.key_ = key;
  r.locked_ = options.try_mlock && mlock(p, size) == 0;
  spdlog::info("pinned memory for {}: {} bytes of POSIX shared memory {} ({})", label, size, key,
               r.locked_ ? "mlocked" : "not locked");
  return r;
}

absl::StatusOr<PinnedRegion> PinnedRegion::allocate(size_t bytes, const PinnedOptions& options) {
  if (bytes == 0) bytes = 1;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const std::string label = options.label.empty() ? std::string("buffer") : options.label;
  if (!options.shared_key.empty()) return allocateShared(bytes, options, label);
  PinnedRegion r;
#ifdef INFERGATE_WITH_CUDA
  if (options.try_cuda) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) {
      void* p = nullptr;
      const size_t size = roundUp(bytes, page);
      if (cudaHostAlloc(&p, size, cudaHostAllocPortable | cudaHostAllocMapped) == cudaSuccess) {
        std::memset(p, 0, size);
        r.data_ = static_cast<uint8_t*>(p);
        r.size_ = size;
        r.kind_ = PinnedKind::kCudaHost;
        spdlog::info("pinned memory for {}: {} bytes via cudaHostAlloc", label, size);
        return r;
      }
      spdlog::warn("pinned memory for {}: cudaHostAlloc of {} bytes failed; trying mmap", label,
                   size);
    }
  }
#endif
  if (options.try_huge_pages) {
    const size_t size = roundUp(bytes, kHugePage);
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
    if (p != MAP_FAILED) {
      r.data_ = static_cast<uint8_t*>(p);
      r.size_ = size;
      r.kind_ = PinnedKind::kHugePages;
      spdlog::info("pinned memory for {}: {} bytes in 2 MiB huge pages", label, size);
      return r;
    }
  }
  const size_t size = roundUp(bytes, page);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        fmt::format("pinned memory for {}: mmap of {} bytes failed: {}", label, size,
                    std::strerror(errno)));
  }
  r.data_ = static_cast<uint8_t*>(p);
  r.size_ = size;
  if (options.try_mlock && mlock(p, size) == 0) {
    r.kind_ = PinnedKind::kMlocked;
    spdlog::info("pinned memory for {}: {} bytes via mmap + mlock", label, size);
    return r;
  }
  const int e = errno;
  r.kind_ = PinnedKind::kPageable;
  // Touch every page so the first batch does not fault them in.
  for (size_t off = 0; off < size; off += page) r.data_[off] = 0;
  if (options.try_mlock) {
    spdlog::warn("pinned memory for {}: mlock of {} bytes refused ({}); using pageable memory "
                 "(raise RLIMIT_MEMLOCK, e.g. `ulimit -l unlimited`, or grant CAP_IPC_LOCK)",
                 label, size, std::strerror(e));
  } else {
    spdlog::info("pinned memory for {}: {} bytes of pageable memory", label, size);
  }
  return r;
}

SlabPool::SlabPool(PinnedRegion region, size_t slab_bytes, size_t slabs)
    : region_(std::move(region)), slab_bytes_(slab_bytes), slabs_(slabs) {
  free_.reserve(slabs);
  for (size_t i = slabs; i-- > 0;) free_.push_back(region_.data() + i * slab_bytes);
}

absl::StatusOr<std::unique_ptr<SlabPool>> SlabPool::create(size_t slab_bytes, size_t slabs,
                                                           const PinnedOptions& options) {
  if (slabs == 0) return absl::InvalidArgumentError("slab pool needs at least one slab");
  slab_bytes = roundUp(slab_bytes == 0 ? 1 : slab_bytes, 64);
  absl::StatusOr<PinnedRegion> r = PinnedRegion::allocate(slab_bytes * slabs, options);
  if (!r.ok()) return r.status();
  return std::unique_ptr<SlabPool>(new SlabPool(std::move(*r), slab_bytes, slabs));
}

uint8_t* SlabPool::acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.empty()) return nullptr;
  uint8_t* s = free_.back();
  free_.pop_back();
  return s;
}

void SlabPool::release(uint8_t* slab) {
  const uint8_t* base = region_.data();
  IG_CHECK(slab >= base && slab < base + slab_bytes_ * slabs_ &&
               static_cast<size_t>(slab - base) % slab_bytes_ == 0,
           "SlabPool::release: pointer not from this pool");
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(slab);
}

size_t SlabPool::available() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_.size();
}

}  // namespace infergate::backends
