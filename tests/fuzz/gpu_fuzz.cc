// libFuzzer target: what the GPU watch reads from other processes and from files it does not
// control (docs/GPU.md): cgroup paths (parseCgroupPath: a container runtime, or anyone who can
// make a cgroup, names them) and the ELF reader that checks and locates the driver's symbols
// (elfDynamicFunctionOffsets: the library may come from a container's root filesystem).
// Nothing may crash, read out of bounds or loop; a container id, when found, is 64 lower-case
// hex digits; a function offset is inside the file.
//
// Input: first byte even -> the rest is a cgroup path; odd -> the rest is the file's bytes
// (written to a memfd, read through /proc/self/fd/N).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "gpu/elf_symbols.h"
#include "gpu/process_info.h"

#define FUZZ_CHECK(cond)                                                                      \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "fuzz: invariant failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

namespace {

bool lowerHex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

void cgroupPath(std::string_view path) {
  const infergate::gpu::ContainerInfo c = infergate::gpu::parseCgroupPath(path);
  FUZZ_CHECK(c.container_id.empty() || lowerHex64(c.container_id));
  FUZZ_CHECK(c.container_id.empty() == c.runtime.empty());
  FUZZ_CHECK(!c.label().empty());
  // Deterministic: the same path gives the same answer.
  const infergate::gpu::ContainerInfo again = infergate::gpu::parseCgroupPath(path);
  FUZZ_CHECK(again.container_id == c.container_id && again.pod_uid == c.pod_uid &&
             again.runtime == c.runtime && again.qos == c.qos);
}

void elfFile(const uint8_t* data, size_t size) {
  static int fd = memfd_create("ig-fuzz-elf", 0);
  FUZZ_CHECK(fd >= 0);
  FUZZ_CHECK(ftruncate(fd, 0) == 0);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    FUZZ_CHECK(n > 0);
    done += static_cast<size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto fns = infergate::gpu::elfDynamicFunctionOffsets(path);
  if (!fns.ok()) {
    FUZZ_CHECK(fns.status().code() == absl::StatusCode::kInvalidArgument ||
               fns.status().code() == absl::StatusCode::kNotFound);
    return;
  }
  for (const auto& f : *fns) {
    FUZZ_CHECK(!f.name.empty());
    FUZZ_CHECK(f.offset < size);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if ((data[0] & 1) == 0) {
    cgroupPath(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  } else {
    elfFile(data + 1, size - 1);
  }
  return 0;
}
