#include "gpu/elf_symbols.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <tuple>

#include <fmt/format.h>

#include "common/unique_fd.h"

namespace infergate::gpu {
namespace {

std::string errnoText(int err) {
  if (err < 0) err = -err;
  return fmt::format("{} ({})", std::strerror(err), err);
}

using Fd = common::UniqueFd;

bool readAt(int fd, uint64_t off, size_t len, void* out) {
  auto* p = static_cast<uint8_t*>(out);
  while (len > 0) {
    ssize_t n = pread(fd, p, len, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    off += static_cast<uint64_t>(n);
    len -= static_cast<size_t>(n);
  }
  return true;
}

// The most of .dynsym / .dynstr we read (a real libcuda's are well under 1 MiB).
constexpr uint64_t kMaxDynBytes = 64ull << 20;

}  // namespace

absl::StatusOr<std::vector<ElfFunction>> elfDynamicFunctionOffsets(const std::string& path) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return absl::NotFoundError(fmt::format("{}: {}", path, errnoText(errno)));
  struct stat st {};
  if (fstat(fd.get(), &st) != 0)
    return absl::NotFoundError(fmt::format("{}: {}", path, errnoText(errno)));
  if (!S_ISREG(st.st_mode)) return absl::NotFoundError(fmt::format("{}: not a regular file", path));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  auto bad = [&](const char* why) {
    return absl::InvalidArgumentError(
        fmt::format("{}: not an ELF64 shared object ({})", path, why));
  };
  Elf64_Ehdr eh{};
  if (size < sizeof(eh) || !readAt(fd.get(), 0, sizeof(eh), &eh)) return bad("too short");
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return bad("no ELF magic");
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) return bad("not 64-bit");
  if (eh.e_ident[EI_DATA] != ELFDATA2LSB) return bad("not little-endian");
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0) return bad("no section headers");
  const uint64_t sh_bytes = uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr);
  if (eh.e_shoff > size || sh_bytes > size - eh.e_shoff)
    return bad("section headers out of the file");
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  if (!readAt(fd.get(), eh.e_shoff, sh_bytes, sh.data())) return bad("section headers unreadable");

  const Elf64_Shdr* dynsym = nullptr;
  for (const Elf64_Shdr& s : sh) {
    if (s.sh_type == SHT_DYNSYM) {
      dynsym = &s;
      break;
    }
  }
  if (!dynsym) return bad("no .dynsym");
  if (dynsym->sh_link >= sh.size()) return bad(".dynsym links no string table");
  const Elf64_Shdr& strtab = sh[dynsym->sh_link];
  if (strtab.sh_type != SHT_STRTAB) return bad(".dynsym links no string table");
  auto inFile = [&](const Elf64_Shdr& s) {
    return s.sh_offset <= size && s.sh_size <= size - s.sh_offset && s.sh_size <= kMaxDynBytes;
  };
  if (!inFile(*dynsym) || !inFile(strtab)) return bad(".dynsym or .dynstr out of the file");
  if (dynsym->sh_entsize != sizeof(Elf64_Sym)) return bad(".dynsym entry size");

  std::vector<Elf64_Sym> syms(dynsym->sh_size / sizeof(Elf64_Sym));
  std::string strs(strtab.sh_size, '\0');
  if (!readAt(fd.get(), dynsym->sh_offset, syms.size() * sizeof(Elf64_Sym), syms.data()) ||
      !readAt(fd.get(), strtab.sh_offset, strs.size(), strs.data()))
    return bad(".dynsym unreadable");

  std::vector<ElfFunction> out;
  for (const Elf64_Sym& s : syms) {
    const int type = ELF64_ST_TYPE(s.st_info);
    const int bind = ELF64_ST_BIND(s.st_info);
    if (type != STT_FUNC && type != STT_GNU_IFUNC) continue;
    if (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE) continue;
    if (s.st_shndx == SHN_UNDEF || s.st_name == 0 || s.st_name >= strs.size()) continue;
    const char* name = strs.data() + s.st_name;
    ElfFunction f;
    f.name.assign(name, strnlen(name, strs.size() - s.st_name));
    if (f.name.empty()) continue;  // st_name at a NUL byte (found by fuzz_gpu)
    // The file offset of the function's first byte, through its section (what a uprobe
    // takes); 0 when the section does not say (an IFUNC's value is its resolver: not used).
    if (type == STT_FUNC && s.st_shndx < sh.size()) {
      const Elf64_Shdr& sec = sh[s.st_shndx];
      if (sec.sh_type == SHT_PROGBITS && s.st_value >= sec.sh_addr &&
          s.st_value - sec.sh_addr < sec.sh_size && sec.sh_offset <= size &&
          s.st_value - sec.sh_addr < size - sec.sh_offset) {
        f.offset = s.st_value - sec.sh_addr + sec.sh_offset;
      }
    }
    out.push_back(std::move(f));
  }
  std::sort(out.begin(), out.end(), [](const ElfFunction& a, const ElfFunction& b) {
    return std::tie(a.name, a.offset) < std::tie(b.name, b.offset);
  });
  out.erase(std::unique(out.begin(), out.end(),
                        [](const ElfFunction& a, const ElfFunction& b) { return a.name == b.name; }),
            out.end());
  return out;
}

absl::StatusOr<std::vector<std::string>> elfDynamicFunctions(const std::string& path) {
  absl::StatusOr<std::vector<ElfFunction>> fns = elfDynamicFunctionOffsets(path);
  if (!fns.ok()) return fns.status();
  std::vector<std::string> names;
  names.reserve(fns->size());
  for (ElfFunction& f : *fns) names.push_back(std::move(f.name));
  return names;
}

}  // namespace infergate::gpu
