#pragma once
// What a uprobe on each probed CUDA driver function will cost, from the function's first
// instruction (x86-64): the kernel emulates push, nop, call and jmp in the breakpoint trap (one
// trap); any other instruction is single-stepped out of line (a second trap: on our VM about
// 5.5 us a launch against 0.6 us, docs/BENCHMARKS.md "GPU probe costs"). Read from the library
// file (gpu/elf_symbols.h for the offsets, bounds-checked); `infergate doctor` prints it.
// Threading: pure functions of the file.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace infergate::gpu {

struct Prologue {
  std::string function;   // "cuLaunchKernel", ...
  std::string bytes;      // the first bytes, hex ("55 48 89 e5")
  std::string insn;       // what they start with: "push %rbp", "endbr64", "other", ...
  bool emulated = false;  // one trap (true) or single-stepped (false)
};

// The kind of the instruction at `code` (at most `n` bytes), and whether x86-64 uprobes emulate it.
Prologue classifyPrologue(const uint8_t* code, size_t n);

// Each function the GPU probes attach to (gpu/gpu_probes.cc's list, the base symbols and their
// _ptsz variants) that `library` defines, with its prologue. NotFound / InvalidArgument as
// elfDynamicFunctionOffsets.
absl::StatusOr<std::vector<Prologue>> probedPrologues(const std::string& library);

}  // namespace infergate::gpu
