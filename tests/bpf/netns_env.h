#pragma once
// For the BPF tests that need links: moves the whole test process into a private network and
// mount namespace (so nothing reaches the host's interfaces or bpffs), mounts a bpffs there
// when asked, and runs `links` (an `ip` command line creating the veth pair). Returns "" or
// why the tests must skip (not root, no namespaces, no veth).
//
// A test binary does it once, before any test, with its main() as
//   return infergate::testing::runInPrivateNetns(argc, argv, {needs_root, links, bpffs});
// and each test that needs the links starts with SKIP_WITHOUT_NETNS().

#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include <gtest/gtest.h>

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

// The veth pair igx0 <-> igx1 the XDP attach and AF_XDP tests run on.
inline constexpr char kIgxVethPair[] =
    "ip link add igx0 type veth peer name igx1 && ip link set igx0 up && ip link set igx1 up";

// What a test binary's namespace holds, as enterPrivateNetns takes it.
struct NetnsSpec {
  std::string needs_root;  // the skip message for a non-root run
  const char* links;       // the `ip` commands creating the links
  bool mount_bpffs;
};

// Why this binary's tests skip ("" when the namespace and its links are up).
inline std::string& netnsSkipReason() {
  static std::string reason;
  return reason;
}

class NetnsEnvironment : public ::testing::Environment {
 public:
  explicit NetnsEnvironment(NetnsSpec spec) : spec_(std::move(spec)) {}
  void SetUp() override {
    netnsSkipReason() = enterPrivateNetns(spec_.needs_root, spec_.links, spec_.mount_bpffs);
  }

 private:
  NetnsSpec spec_;
};

// main() of a test binary whose tests run inside the namespace.
inline int runInPrivateNetns(int argc, char** argv, NetnsSpec spec) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new NetnsEnvironment(std::move(spec)));
  return RUN_ALL_TESTS();
}

}  // namespace infergate::testing

#define SKIP_WITHOUT_NETNS()                                     \
  if (!::infergate::testing::netnsSkipReason().empty()) \
  GTEST_SKIP() << ::infergate::testing::netnsSkipReason()
