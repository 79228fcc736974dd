// The seccomp filter and the capability drop of `infergate run` (app/privileges.h), each in a
// forked child so the test process itself keeps its privileges: what the filter refuses
// (execve, ptrace, mount, fork, socket(AF_PACKET), a file opened for writing) fails with EPERM
// (or kills the child, with action kill), and what the gateway uses still works.
#include "app/privileges.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/ioctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

namespace infergate::app {
namespace {

// Runs `body` in a forked child; returns its wait status. `body` returns the exit code.
int inChild(const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

// Runs `body` in a forked child; passes when the child exits with 0 (every check held).
::testing::AssertionResult passesInChild(const std::function<int()>& body) {
  const int status = inChild(body);
  if (!WIFEXITED(status)) return ::testing::AssertionFailure() << "child status " << status;
  if (WEXITSTATUS(status) != 0) {
    return ::testing::AssertionFailure() << "child check " << WEXITSTATUS(status) << " failed";
  }
  return ::testing::AssertionSuccess();
}

#define SKIP_WITHOUT_SECCOMP() \
  if (!haveSeccompSupport()) GTEST_SKIP() << "this build has no libseccomp (libseccomp-dev)"

// The child's exit codes: 0 all as expected, otherwise the number of the failed check.
#define CHECK_OR_EXIT(cond, code)                                                    \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "check %d failed: %s (errno %s)\n", code, #cond,          \
                   std::strerror(errno));                                            \
      return code;                                                                   \
    }                                                                                \
  } while (0)

// In a forked child: installs the seccomp filter `o` (check 1), then runs `body` under it.
::testing::AssertionResult passesUnderFilter(const SeccompOptions& o,
                                             const std::function<int()>& body) {
  return passesInChild([&] {
    CHECK_OR_EXIT(installSeccompFilter(o).ok(), 1);
    return body();
  });
}

std::string statusField(const char* name) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(std::string(name) + ":", 0) == 0) {
      std::string v = line.substr(std::strlen(name) + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  }
  return "";
}

TEST(SeccompFilter, RefusesWhatTheGatewayNeverCallsWithEperm) {
  SKIP_WITHOUT_SECCOMP();
  EXPECT_TRUE(passesInChild([] {
    SeccompOptions o;  // socket mode: errno action, no bpf, no capset
    absl::StatusOr<size_t> n = installSeccompFilter(o);
    CHECK_OR_EXIT(n.ok(), 1);
    CHECK_OR_EXIT(*n > 30 && *n < 100, 2);
    CHECK_OR_EXIT(statusField("Seccomp") == "2", 3);
    CHECK_OR_EXIT(statusField("NoNewPrivs") == "1", 4);
    // Refused.
    // /bin/false: should the exec go through, the child exits 1 and the test fails.
    char* const argv[] = {const_cast<char*>("/bin/false"), nullptr};
    errno = 0;
    CHECK_OR_EXIT(execve("/bin/false", argv, environ) == -1 && errno == EPERM, 10);
    errno = 0;
    CHECK_OR_EXIT(ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) == -1 && errno == EPERM, 11);
    errno = 0;
    CHECK_OR_EXIT(mount("none", "/tmp", "tmpfs", 0, nullptr) == -1 && errno == EPERM, 12);
    errno = 0;
    CHECK_OR_EXIT(socket(AF_PACKET, SOCK_RAW, 0) == -1 && errno == EPERM, 13);
    errno = 0;
    CHECK_OR_EXIT(fork() == -1 && errno == EPERM, 14);  // clone without CLONE_THREAD
    errno = 0;
    CHECK_OR_EXIT(open("/tmp/ig-seccomp-test", O_WRONLY | O_CREAT, 0600) == -1 && errno == EPERM,
                  15);
    errno = 0;
    CHECK_OR_EXIT(syscall(SYS_bpf, 0, nullptr, 0) == -1 && errno == EPERM, 16);  // socket mode
    errno = 0;
    CHECK_OR_EXIT(unshare(CLONE_NEWNET) == -1 && errno == EPERM, 17);
    int avail = 0;
    errno = 0;
    CHECK_OR_EXIT(ioctl(STDERR_FILENO, FIONREAD, &avail) == -1 && errno == EPERM, 21);
    CHECK_OR_EXIT(seccompDenials() == 9, 18);
    CHECK_OR_EXIT(seccompDenials(SYS_execve) == 1, 19);
    std::string metrics;
    renderSeccompMetrics(metrics);
    CHECK_OR_EXIT(metrics.find("infergate_seccomp_denied_total{syscall=\"ptrace\"} 1") !=
                      std::string::npos,
                  20);
    // Allowed: threads, sockets of the gateway's families, reading files, pipes' I/O.
    int ran = 0;
    std::thread t([&] { ran = 1; });
    t.join();
    CHECK_OR_EXIT(ran == 1, 30);
    const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK_OR_EXIT(s >= 0, 31);
    close(s);
    const int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    CHECK_OR_EXIT(fd >= 0, 32);
    char buf[64];
    CHECK_OR_EXIT(read(fd, buf, sizeof buf) > 0, 33);
    close(fd);
    return 0;
  }));
}

TEST(SeccompFilter, XdpModesMayUseBpfMapCommandsAndCapsetButNotLoadPrograms) {
  SKIP_WITHOUT_SECCOMP();
  EXPECT_TRUE(passesUnderFilter({.bpf_maps = true, .raise_caps = true}, [] {
    // A map lookup on a bad fd reaches the kernel (EBADF), a program load is refused.
    union {
      char raw[128];
    } attr{};
    errno = 0;
    CHECK_OR_EXIT(syscall(SYS_bpf, 1 /*BPF_MAP_LOOKUP_ELEM*/, &attr, 32) == -1 && errno != EPERM,
                  2);
    errno = 0;
    CHECK_OR_EXIT(syscall(SYS_bpf, 5 /*BPF_PROG_LOAD*/, &attr, 64) == -1 && errno == EPERM, 3);
    errno = 0;
    CHECK_OR_EXIT(syscall(SYS_bpf, 0 /*BPF_MAP_CREATE*/, &attr, 64) == -1 && errno == EPERM, 4);
    return 0;
  }));
}

TEST(SeccompFilter, CudaBuildsMayUseIoctlAndOpenForWriting) {
  SKIP_WITHOUT_SECCOMP();
  EXPECT_TRUE(passesUnderFilter({.cuda = true}, [] {
    int fds[2];
    CHECK_OR_EXIT(pipe2(fds, O_CLOEXEC) == 0, 2);
    int avail = -1;
    CHECK_OR_EXIT(ioctl(fds[0], FIONREAD, &avail) == 0 && avail == 0, 3);
    const int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    CHECK_OR_EXIT(fd >= 0, 4);
    close(fd);
    errno = 0;
    CHECK_OR_EXIT(ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) == -1 && errno == EPERM, 5);
    return 0;
  }));
}

TEST(SeccompFilter, KillActionKillsTheProcess) {
  SKIP_WITHOUT_SECCOMP();
  const int status = inChild([] {
    SeccompOptions o;
    o.action = SeccompAction::kKill;
    if (!installSeccompFilter(o).ok()) return 1;
    syscall(SYS_ptrace, PTRACE_TRACEME, 0, nullptr, nullptr);
    return 2;  // not reached
  });
  ASSERT_TRUE(WIFSIGNALED(status)) << "child status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGSYS);
}

TEST(DropPrivileges, EveryThreadEndsWithNothingButWhatIsKept) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (capabilities to drop)";
  EXPECT_TRUE(passesInChild([] {
    // A thread that exists before the drop must drop too (it runs the broadcast handler).
    std::atomic<bool> stop{false};
    std::string worker_caps;
    std::thread worker([&] {
      while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const ThreadCaps c = currentCaps();
      worker_caps = std::to_string(c.effective) + "/" + std::to_string(c.permitted);
    });
    PrivilegeOptions o;
    o.keep = capBit(CAP_NET_ADMIN);
    o.seccomp_options.raise_caps = true;
    absl::StatusOr<DropReport> r = dropPrivileges(o);
    CHECK_OR_EXIT(r.ok(), 1);
    CHECK_OR_EXIT(r->threads == 2, 2);
    CHECK_OR_EXIT(r->kept == capBit(CAP_NET_ADMIN), 3);
    stop = true;
    worker.join();
    CHECK_OR_EXIT(worker_caps == "0/" + std::to_string(capBit(CAP_NET_ADMIN)), 4);
    CHECK_OR_EXIT(statusField("CapEff") == "0000000000000000", 5);
    CHECK_OR_EXIT(statusField("CapPrm") == "0000000000001000", 6);
    CHECK_OR_EXIT(statusField("CapBnd") == "0000000000001000", 7);
    CHECK_OR_EXIT(statusField("CapAmb") == "0000000000000000", 8);
    CHECK_OR_EXIT(statusField("NoNewPrivs") == "1", 9);
    CHECK_OR_EXIT(statusField("Seccomp") == "2", 10);
    {
      ScopedCapability raised(CAP_NET_ADMIN);  // what shutdown does to detach XDP
      CHECK_OR_EXIT(raised.ok(), 11);
      CHECK_OR_EXIT(statusField("CapEff") == "0000000000001000", 12);
    }
    CHECK_OR_EXIT(statusField("CapEff") == "0000000000000000", 13);
    return 0;
  }));
}

TEST(DropPrivileges, UnknownUserIsAStartUpErrorNamingTheFix) {
  absl::StatusOr<std::pair<uid_t, gid_t>> r = resolveUser("no-such-user-ig", "");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("useradd"), std::string::npos) << r.status();
  absl::StatusOr<std::pair<uid_t, gid_t>> n = resolveUser("65534", "65534");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->first, 65534u);
}

}  // namespace
}  // namespace infergate::app
