// The first-instruction classifier behind `infergate doctor`'s cuda_prologues: the instructions
// x86-64 uprobes emulate (one trap) against those they single-step (two traps).
#include "gpu/prologue.h"

#include <gtest/gtest.h>

#include <vector>

namespace infergate::gpu {
namespace {

Prologue of(std::vector<uint8_t> b) { return classifyPrologue(b.data(), b.size()); }

TEST(Prologue, EmulatedInstructions) {
  EXPECT_TRUE(of({0x55, 0x48, 0x89, 0xe5}).emulated);  // push %rbp; mov %rsp,%rbp
  EXPECT_EQ(of({0x55, 0x48, 0x89, 0xe5}).insn, "push %rbp");
  EXPECT_EQ(of({0x55, 0x48, 0x89, 0xe5}).bytes, "55 48 89 e5");
  EXPECT_TRUE(of({0x41, 0x57}).emulated);                    // push %r15
  EXPECT_TRUE(of({0x53}).emulated);                          // push %rbx
  EXPECT_TRUE(of({0x90}).emulated);                          // nop
  EXPECT_TRUE(of({0x0f, 0x1f, 0x44, 0x00, 0x00}).emulated);  // nopl 0x0(%rax,%rax,1)
  EXPECT_TRUE(of({0xe8, 0, 0, 0, 0}).emulated);              // call
  EXPECT_TRUE(of({0xe9, 0, 0, 0, 0}).emulated);              // jmp
  EXPECT_TRUE(of({0xeb, 0x10}).emulated);                    // jmp short
}

TEST(Prologue, SingleSteppedInstructions) {
  EXPECT_FALSE(of({0xbf, 0x11, 0, 0, 0}).emulated);     // mov $0x11,%edi (the stub's)
  EXPECT_FALSE(of({0x48, 0x83, 0xec, 0x08}).emulated);  // sub $8,%rsp
  EXPECT_FALSE(of({0xf3, 0x0f, 0x1e, 0xfa}).emulated);  // endbr64
  EXPECT_EQ(of({0xf3, 0x0f, 0x1e, 0xfa}).insn, "endbr64");
  EXPECT_FALSE(of({0x41}).emulated);  // a REX prefix alone
  EXPECT_FALSE(of({}).emulated);
}

TEST(Prologue, MissingLibraryIsNotFound) {
  auto r = probedPrologues("/nonexistent/libcuda.so.1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace infergate::gpu
