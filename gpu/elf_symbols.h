#pragma once
// The functions an ELF64 shared object defines, read from its .dynsym with bounds checks on
// every offset (no libelf): what the GPU probes check and attach to in the CUDA driver library.
// The file may come from a container's root (/proc/PID/root/...): untrusted input, fuzzed
// (tests/fuzz/gpu_fuzz.cc). Threading: pure functions of the file.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace infergate::gpu {

// The names of the defined functions (STT_FUNC / STT_GNU_IFUNC, global or weak, not undefined)
// in an ELF64 shared object's .dynsym, sorted, each once. Reads the file with
// bounds checks on every offset (no libelf). NotFound when the file cannot be read,
// InvalidArgument when it is not a well-formed little-endian ELF64 object with a .dynsym.
absl::StatusOr<std::vector<std::string>> elfDynamicFunctions(const std::string& path);

// The same functions with the file offset of each one's first byte (what a uprobe attaches
// to; 0 when its section does not say), sorted by name, one per name.
struct ElfFunction {
  std::string name;
  uint64_t offset = 0;
};
absl::StatusOr<std::vector<ElfFunction>> elfDynamicFunctionOffsets(const std::string& path);

}  // namespace infergate::gpu
