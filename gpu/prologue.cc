#include "gpu/prologue.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "gpu/elf_symbols.h"
#include "gpu/gpu_shared.h"
#include "gpu/gpu_source.h"

namespace infergate::gpu {

Prologue classifyPrologue(const uint8_t* c, size_t n) {
  Prologue p;
  for (size_t i = 0; i < n && i < 8; ++i) p.bytes += fmt::format("{}{:02x}", i ? " " : "", c[i]);
  auto set = [&](const char* insn, bool emulated) {
    p.insn = insn;
    p.emulated = emulated;
    return p;
  };
  if (n == 0) return set("none", false);
  if (c[0] >= 0x50 && c[0] <= 0x57) return set(c[0] == 0x55 ? "push %rbp" : "push reg", true);
  if (n >= 2 && c[0] == 0x41 && c[1] >= 0x50 && c[1] <= 0x57) return set("push %r8-15", true);
  if (c[0] == 0x90) return set("nop", true);
  if (n >= 2 && c[0] == 0x0f && c[1] == 0x1f) return set("nop (long)", true);
  if (n >= 2 && c[0] == 0x66 && c[1] == 0x90) return set("nop (66)", true);
  if (c[0] == 0xe8) return set("call", true);
  if (c[0] == 0xe9 || c[0] == 0xeb) return set("jmp", true);
  if (n >= 4 && c[0] == 0xf3 && c[1] == 0x0f && c[2] == 0x1e && c[3] == 0xfa)
    return set("endbr64", false);
  return set("other (single-stepped)", false);
}

absl::StatusOr<std::vector<Prologue>> probedPrologues(const std::string& library) {
  absl::StatusOr<std::vector<ElfFunction>> fns = elfDynamicFunctionOffsets(library);
  if (!fns.ok()) return fns.status();
  std::vector<std::string> wanted;
  for (int fn = 0; fn < IG_GPU_FN_MAX; ++fn) {
    wanted.emplace_back(fnName(fn));
    wanted.push_back(std::string(fnName(fn)) + "_ptsz");
  }
  int fd = open(library.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(fmt::format("{}: cannot be opened", library));
  std::vector<Prologue> out;
  for (const std::string& w : wanted) {
    for (const ElfFunction& f : *fns) {
      if (f.name != w || f.offset == 0) continue;
      uint8_t code[16] = {};
      ssize_t got = pread(fd, code, sizeof code, static_cast<off_t>(f.offset));
      if (got <= 0) continue;
      Prologue p = classifyPrologue(code, static_cast<size_t>(got));
      p.function = f.name;
      out.push_back(std::move(p));
    }
  }
  close(fd);
  return out;
}

}  // namespace infergate::gpu
