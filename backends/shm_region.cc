#include "backends/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace infergate::backends {

absl::StatusOr<std::unique_ptr<ShmRegion>> ShmRegion::create(std::string key, size_t bytes) {
  if (bytes == 0) bytes = 64;
  int fd = ::shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(fmt::format(
        "cannot create POSIX shared memory '{}': {} (is /dev/shm mounted and writable?)", key,
        std::strerror(errno)));
  }
  // Reserve the tmpfs pages now (ENOSPC when /dev/shm is too small), not a SIGBUS later.
  const int fe = ::ftruncate(fd, static_cast<off_t>(bytes)) != 0
                     ? errno
                     : ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (fe != 0) {
    ::close(fd);
    ::shm_unlink(key.c_str());
    return absl::ResourceExhaustedError(fmt::format(
        "cannot size shared memory '{}' to {} bytes: {} (is /dev/shm large enough? Docker's "
        "default is 64 MiB: --shm-size)",
        key, bytes, std::strerror(fe)));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    ::shm_unlink(key.c_str());
    return absl::ResourceExhaustedError(
        fmt::format("cannot map shared memory '{}': {}", key, std::strerror(e)));
  }
  return std::unique_ptr<ShmRegion>(new ShmRegion(std::move(key), static_cast<uint8_t*>(p), bytes));
}

ShmRegion::~ShmRegion() {
  ::munmap(data_, size_);
  ::shm_unlink(key_.c_str());
}

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
