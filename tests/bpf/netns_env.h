#pragma once
// For the BPF tests that need links: moves the whole test process into a private network and
// mount namespace (so nothing reaches the host's interfaces or bpffs), mounts a bpffs there
// when asked, and runs `links` (an `ip` command line creating the veth pair). Returns "" or
// why the tests must skip (not root, no namespaces, no veth).

#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace infergate::testing {

inline std::string enterPrivateNetns(const std::string& needs_root, const char* links,
                                     bool mount_bpffs) {
  if (geteuid() != 0) return needs_root;
  if (unshare(CLONE_NEWNET | CLONE_NEWNS) != 0) {
    return std::string("unshare(CLONE_NEWNET) failed: ") + std::strerror(errno);
  }
  mount("", "/", nullptr, MS_REC | MS_PRIVATE, nullptr);
  if (mount_bpffs && mount("bpf", "/sys/fs/bpf", "bpf", 0, nullptr) != 0) {
    std::fprintf(stderr, "note: mounting bpffs failed: %s\n", std::strerror(errno));
  }
  if (std::system(links) != 0) return "cannot create a veth pair (ip link add ... type veth)";
  return "";
}

}  // namespace infergate::testing
