#pragma once
// Least privilege for `infergate run` (docs/OPERATIONS.md "Privileges"). Server::start calls
// dropPrivileges() once start-up work is done (listeners bound, the XDP program attached and
// its maps open, AF_XDP sockets bound, memory locked, shared memory created) and before any
// reactor serves. What it does, in order:
//   1. in every thread: no_new_privs; every capability outside `keep` leaves the bounding
//      set; the ambient set is cleared (and keep-caps is set when a user switch follows);
//   2. with `user`/`group`: supplementary groups, gid, uid (glibc applies them to every
//      thread);
//   3. in every thread: securebits locked (noroot, no setuid fixup, no ambient raise, keep-caps
//      off); permitted = `keep`, effective = inheritable = none;
//   4. with `seccomp`: the system-call allowlist, installed on every thread at once (TSYNC).
// Capabilities, the bounding set, securebits and no_new_privs belong to a thread in Linux, not
// to the process: the calling thread does its own and every other thread is made to do the
// same from a signal handler (kBroadcastSignal), the way glibc broadcasts setuid. Threads
// started later inherit the result.
//
// Threading: dropPrivileges() and installSeccompFilter() from one thread, once (start-up);
// ScopedCapability from any thread, on that thread only.

#include <cstddef>
#include <cstdint>
#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace infergate::app {

constexpr uint64_t capBit(int cap) { return uint64_t{1} << cap; }

// What a system call outside the allowlist gets.
//   kErrno: fails with EPERM; the first refusal of each call is written to stderr and every
//           refusal is counted (seccompDenials(), infergate_seccomp_denied_total);
//   kKill:  the process is killed (SIGSYS, core dump);
//   kLog:   allowed, and the kernel's audit log records it (to find a missing call).
enum class SeccompAction { kErrno, kKill, kLog };

struct SeccompOptions {
  SeccompAction action = SeccompAction::kErrno;
  bool bpf_maps = false;    // bpf(2) map commands on open fds (xdp-filter, afxdp modes)
  bool raise_caps = false;  // capset(2), for ScopedCapability at shutdown (xdp modes)
  // CUDA builds: the driver talks to /dev/nvidia* with ioctl(2) in the steady state (copies,
  // stream and event calls) and may open device files: ioctl, openat for writing and a few
  // calls the driver makes (kCudaSyscalls). Not measured on a GPU yet (docs/OPERATIONS.md).
  bool cuda = false;
  // gpu.enabled (app/gpu_watch.h): the monitor lists /proc and reads /proc/PID/fd links to
  // map a backend's port to its process (getdents64, readlink, readlinkat).
  bool gpu_watch = false;
  // dpdk mode: what EAL does when a reactor thread registers (sched_getaffinity, access).
  bool dpdk = false;
  bool all_threads = true;  // every thread of the process (TSYNC); false: the caller's only
};

// The system calls the filter allows (names), some of them only with the arguments noted in
// privileges.cc (clone: threads only; socket: AF_INET, AF_INET6, AF_UNIX, AF_NETLINK; bpf: map
// commands; prctl: thread names). clone3 fails with ENOSYS so glibc falls back to clone.
std::vector<std::string> seccompAllowlist(const SeccompOptions& options);

// Sets no_new_privs on the calling thread and installs the filter. Returns the number of
// system calls allowed. Refuses (FAILED_PRECONDITION) in a build without libseccomp.
absl::StatusOr<size_t> installSeccompFilter(const SeccompOptions& options);

// Refusals counted under SeccompAction::kErrno, in total and for one system call number.
uint64_t seccompDenials();
uint64_t seccompDenials(int syscall_nr);
// Prometheus text: infergate_seccomp_denied_total{syscall="..."} (nothing before a refusal).
void renderSeccompMetrics(std::string& out);

bool haveSeccompSupport();

struct PrivilegeOptions {
  uint64_t keep = 0;  // capBit() mask left in the permitted set (never effective)
  std::string user;   // name or numeric uid; empty: no switch
  std::string group;  // name or numeric gid; empty with `user`: the user's primary group
  bool seccomp = true;
  SeccompOptions seccomp_options;
};

struct DropReport {
  int threads = 0;         // threads that dropped (the caller included)
  size_t syscalls = 0;     // allowed by the filter; 0 without one
  uint64_t kept = 0;       // capabilities left in the permitted set
  bool bounding_dropped = false;  // false when the process had no CAP_SETPCAP to do it
  std::string identity;    // "uid 0 gid 0" or the user switched to
};

// The uid and gid security.user / security.group name (a name or a number; the user's primary
// group when `group` is empty). NOT_FOUND names the missing user or group.
absl::StatusOr<std::pair<uid_t, gid_t>> resolveUser(const std::string& user,
                                                   const std::string& group);

// The drop. On failure the status names the cause and the fix (a thread that would not answer,
// a user that does not exist, no CAP_SETUID for a switch); the process must not serve then.
absl::StatusOr<DropReport> dropPrivileges(const PrivilegeOptions& options);

// Raises `cap` into the calling thread's effective set while in scope, when the permitted set
// still has it (e.g. CAP_NET_ADMIN to detach the XDP program at shutdown); otherwise does
// nothing (ok() says which).
class ScopedCapability {
 public:
  explicit ScopedCapability(int cap);
  ~ScopedCapability();
  ScopedCapability(const ScopedCapability&) = delete;
  ScopedCapability& operator=(const ScopedCapability&) = delete;
  bool ok() const { return raised_; }

 private:
  int cap_;
  bool raised_ = false;
};

// The calling thread's capability sets, as /proc/<pid>/status prints them (for logs and tests).
struct ThreadCaps {
  uint64_t effective = 0, permitted = 0, inheritable = 0;
};
ThreadCaps currentCaps();

}  // namespace infergate::app
