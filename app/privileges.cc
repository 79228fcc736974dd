#include "app/privileges.h"

#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <linux/perf_event.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <thread>

#include "fmt/format.h"

#ifdef INFERGATE_HAVE_SECCOMP
#include <linux/bpf.h>
#include <seccomp.h>
#endif

namespace infergate::app {

namespace {

// ---- capabilities, per thread, with raw system calls (async-signal-safe) ----

struct CapSets {
  uint64_t eff = 0, prm = 0, inh = 0;
};

int capGet(CapSets& out) {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) != 0) return errno;
  out.eff = data[0].effective | (uint64_t{data[1].effective} << 32);
  out.prm = data[0].permitted | (uint64_t{data[1].permitted} << 32);
  out.inh = data[0].inheritable | (uint64_t{data[1].inheritable} << 32);
  return 0;
}

int capSet(const CapSets& s) {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  data[0].effective = static_cast<uint32_t>(s.eff);
  data[1].effective = static_cast<uint32_t>(s.eff >> 32);
  data[0].permitted = static_cast<uint32_t>(s.prm);
  data[1].permitted = static_cast<uint32_t>(s.prm >> 32);
  data[0].inheritable = static_cast<uint32_t>(s.inh);
  data[1].inheritable = static_cast<uint32_t>(s.inh >> 32);
  if (syscall(SYS_capset, &hdr, data) != 0) return errno;
  return 0;
}

// "Pure capability" mode (capabilities(7)): uid 0 means nothing to the kernel any more, a uid
// change never touches the sets, ambient capabilities cannot come back; all locked.
constexpr unsigned long kSecureBits =
    SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED |
    SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;

enum class Phase { kBound, kFinal };

struct ThreadOp {
  Phase phase = Phase::kBound;
  uint64_t keep = 0;
  int last_cap = 40;
  bool setpcap = false;   // the process may change its bounding set and securebits
  bool keepcaps = false;  // a uid switch follows
};

// One thread's share of the drop; returns 0 or an errno. Called on the thread itself, possibly
// from the broadcast signal handler: raw system calls only.
int runOp(const ThreadOp& op) {
  if (op.phase == Phase::kBound) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
    if (op.setpcap) {
      for (int cap = 0; cap <= op.last_cap; ++cap) {
        if (op.keep & capBit(cap)) continue;
        if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) != 1) continue;
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) return errno;
      }
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
      return errno;
    if (op.keepcaps && prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0) return errno;
    return 0;
  }
  CapSets cur;
  if (int e = capGet(cur)) return e;
  if (op.setpcap) {
    const int bits = prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
    if (bits < 0) return errno;
    if (static_cast<unsigned long>(bits) != kSecureBits) {
      // Setting securebits needs CAP_SETPCAP effective (a uid switch cleared the effective set).
      CapSets raise = cur;
      raise.eff = cur.prm & capBit(CAP_SETPCAP);
      raise.inh = 0;
      if (int e = capSet(raise)) return e;
      if (prctl(PR_SET_SECUREBITS, kSecureBits, 0, 0, 0) != 0) return errno;
    }
  }
  CapSets final_sets;
  final_sets.prm = cur.prm & op.keep;
  return capSet(final_sets);
}

// ---- running an op on every thread ----

const int kBroadcastSignal = SIGRTMAX - 3;

std::atomic<const ThreadOp*> g_op{nullptr};
std::atomic<int> g_result{0};
std::atomic<bool> g_ran{false};

void onBroadcast(int) {
  const int saved = errno;
  const ThreadOp* op = g_op.load(std::memory_order_acquire);  // pairs with the store in runEverywhere
  const int e = op != nullptr ? runOp(*op) : EINVAL;
  g_result.store(e, std::memory_order_relaxed);
  g_ran.store(true, std::memory_order_release);  // pairs with the acquire in runEverywhere
  errno = saved;
}

std::vector<pid_t> threadIds() {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    out.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
  }
  closedir(d);
  return out;
}

std::string threadName(pid_t tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/comm", tid);
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return "?";
  char buf[32] = {};
  if (std::fgets(buf, sizeof buf, f) == nullptr) buf[0] = '\0';
  std::fclose(f);
  std::string s(buf);
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

bool threadAlive(pid_t tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d", tid);
  return access(path, F_OK) == 0;
}

// Runs `op` on the calling thread, then on every other thread of the process (one at a time,
// through kBroadcastSignal), until a pass over /proc/self/task finds no thread it has not done.
// Returns how many threads ran it.
absl::StatusOr<int> runEverywhere(const ThreadOp& op) {
  if (int e = runOp(op)) {
    return absl::PermissionDeniedError(
        fmt::format("dropping privileges in the main thread: {}", std::strerror(e)));
  }
  struct sigaction sa {}, old {};
  sa.sa_handler = onBroadcast;
  sa.sa_flags = SA_RESTART;
  sigfillset(&sa.sa_mask);
  if (sigaction(kBroadcastSignal, &sa, &old) != 0)
    return absl::InternalError(fmt::format("sigaction: {}", std::strerror(errno)));
  g_op.store(&op, std::memory_order_release);
  const pid_t pid = getpid();
  std::set<pid_t> done = {static_cast<pid_t>(syscall(SYS_gettid))};
  absl::Status status;
  for (bool fresh = true; fresh && status.ok();) {
    fresh = false;
    for (pid_t tid : threadIds()) {
      if (done.count(tid) != 0) continue;
      fresh = true;
      g_ran.store(false, std::memory_order_relaxed);
      if (syscall(SYS_tgkill, pid, tid, kBroadcastSignal) != 0) {
        if (errno == ESRCH) {  // gone meanwhile
          done.insert(tid);
          continue;
        }
        status = absl::InternalError(fmt::format("tgkill: {}", std::strerror(errno)));
        break;
      }
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!g_ran.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (!g_ran.load(std::memory_order_acquire)) {
        if (!threadAlive(tid)) {
          done.insert(tid);
          continue;
        }
        status = absl::DeadlineExceededError(fmt::format(
            "thread {} ('{}') did not drop its privileges within 5 s (does it block signal {}?); "
            "set security.drop_privileges: false to run without the drop",
            tid, threadName(tid), kBroadcastSignal));
        break;
      }
      if (int e = g_result.load(std::memory_order_relaxed)) {
        status = absl::PermissionDeniedError(fmt::format(
            "dropping privileges in thread {} ('{}'): {}", tid, threadName(tid), std::strerror(e)));
        break;
      }
      done.insert(tid);
    }
  }
  sigaction(kBroadcastSignal, &old, nullptr);
  if (!status.ok()) return status;
  return static_cast<int>(done.size());
}

int lastCap() {
  int last = CAP_LAST_CAP;
  if (std::FILE* f = std::fopen("/proc/sys/kernel/cap_last_cap", "r")) {
    if (std::fscanf(f, "%d", &last) != 1) last = CAP_LAST_CAP;
    std::fclose(f);
  }
  return std::min(last, 63);
}

bool allDigits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

struct Identity {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string user;
  std::string group;
};

absl::StatusOr<Identity> resolveIdentity(const std::string& user, const std::string& group) {
  Identity id;
  std::vector<char> buf(16384);
  if (allDigits(user)) {
    id.uid = static_cast<uid_t>(std::strtoul(user.c_str(), nullptr, 10));
    passwd pw{}, *res = nullptr;
    if (getpwuid_r(id.uid, &pw, buf.data(), buf.size(), &res) == 0 && res != nullptr) {
      id.gid = pw.pw_gid;
      id.user = pw.pw_name;
    } else if (group.empty()) {
      return absl::InvalidArgumentError(fmt::format(
          "security.user: uid {} has no passwd entry; give security.group as well", user));
    } else {
      id.user = user;
    }
  } else {
    passwd pw{}, *res = nullptr;
    if (getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &res) != 0 || res == nullptr) {
      return absl::NotFoundError(fmt::format(
          "security.user: no user named '{}' (create it, e.g. useradd --system --no-create-home "
          "{}, or give a numeric uid)",
          user, user));
    }
    id.uid = pw.pw_uid;
    id.gid = pw.pw_gid;
    id.user = pw.pw_name;
  }
  if (!group.empty()) {
    if (allDigits(group)) {
      id.gid = static_cast<gid_t>(std::strtoul(group.c_str(), nullptr, 10));
    } else {
      struct group gr {}, *res = nullptr;
      if (getgrnam_r(group.c_str(), &gr, buf.data(), buf.size(), &res) != 0 || res == nullptr) {
        return absl::NotFoundError(
            fmt::format("security.group: no group named '{}' (or give a numeric gid)", group));
      }
      id.gid = gr.gr_gid;
    }
  }
  id.group = group.empty() ? std::to_string(id.gid) : group;
  return id;
}

// ---- seccomp ----

std::atomic<uint64_t> g_denied_total{0};
constexpr int kMaxSyscallNr = 512;
std::array<std::atomic<uint64_t>, kMaxSyscallNr> g_denied{};
std::array<std::atomic<bool>, kMaxSyscallNr> g_denied_logged{};
std::array<std::array<char, 32>, kMaxSyscallNr> g_names{};  // filled before the filter loads

#if defined(INFERGATE_HAVE_SECCOMP) && (defined(__x86_64__) || defined(__aarch64__))
#define IG_SECCOMP_TRAP 1
// SIGSYS from a SECCOMP_RET_TRAP: the refused call returns -EPERM to its caller; the first
// refusal of each call is written to stderr (write(2) only: this is a signal handler).
void onSigsys(int, siginfo_t* si, void* ucv) {
  const int saved = errno;
  auto* uc = static_cast<ucontext_t*>(ucv);
#if defined(__x86_64__)
  uc->uc_mcontext.gregs[REG_RAX] = -EPERM;
#else
  uc->uc_mcontext.regs[0] = static_cast<uint64_t>(-EPERM);
#endif
  const int nr = si->si_syscall;
  g_denied_total.fetch_add(1, std::memory_order_relaxed);
  if (nr >= 0 && nr < kMaxSyscallNr) {
    g_denied[nr].fetch_add(1, std::memory_order_relaxed);
    if (!g_denied_logged[nr].exchange(true, std::memory_order_relaxed)) {
      char msg[200];
      const char* name = g_names[nr][0] != '\0' ? g_names[nr].data() : "?";
      // snprintf is not on the async-signal-safe list; build the line by hand.
      size_t n = 0;
      auto put = [&](const char* s) {
        while (*s && n + 1 < sizeof msg) msg[n++] = *s++;
      };
      char num[12];
      int v = nr, k = 0;
      char rev[12];
      do {
        rev[k++] = static_cast<char>('0' + v % 10);
        v /= 10;
      } while (v > 0 && k < 11);
      for (int i = 0; i < k; ++i) num[i] = rev[k - 1 - i];
      num[k] = '\0';
      put("infergate: seccomp refused system call ");
      put(name);
      put(" (");
      put(num);
      put(") with EPERM; counted in infergate_seccomp_denied_total (docs/OPERATIONS.md)\n");
      ssize_t w = write(STDERR_FILENO, msg, n);
      (void)w;
    }
  }
  errno = saved;
}
#endif

// Everything the steady state calls, as strace -f saw it through the integration tests of
// every mode (reactors: epoll, accept, read/write, timers; batchers and identity workers:
// futexes, sleeps; the gRPC client threads to Triton / TF Serving: sockets, poll, name
// files; logging; the admin listener; shutdown: joins, munmap, munlock, shm_unlink, unpinning
// maps), and the few a rarer path needs (marked). docs/OPERATIONS.md "System calls" says how
// to collect the list again.
constexpr const char* kBaseSyscalls[] = {
    // memory
    "brk", "mmap", "munmap", "mprotect", "madvise", "munlock",
    "mremap",  // rarer: realloc of a large block
    // threads, synchronisation, signals, time
    "futex", "set_robust_list", "rseq", "sched_yield", "sched_getparam", "sched_getscheduler",
    "sched_setaffinity", "exit", "exit_group", "gettid", "rt_sigprocmask", "rt_sigreturn",
    "rt_sigtimedwait", "clock_nanosleep",
    "nanosleep", "clock_gettime", "gettimeofday", "clock_getres",  // rarer: vDSO fallbacks
    "restart_syscall",                                               // rarer: the kernel's
    "getpid", "tgkill", "rt_sigaction",  // rarer: abort() on a release assert
    "getrandom",                         // rarer: seeds (abseil, gRPC)
    // files and descriptors (openat: read-only, below)
    "read", "write", "close", "fcntl", "lseek", "newfstatat", "fstat", "statfs", "unlink",
    // event loops
    "epoll_ctl", "epoll_wait", "epoll_pwait", "poll", "ppoll",
    "epoll_create1", "eventfd2", "pipe2",  // rarer: gRPC pollers and wakeup fds made lazily
    // sockets (socket(2) itself below, by family)
    "connect", "accept4", "bind", "getsockname", "getpeername", "getsockopt", "setsockopt",
    "sendto", "recvfrom", "sendmsg", "recvmsg", "shutdown",
    // capget: ScopedCapability looks before it raises
    "capget",
};

// CUDA builds only (SeccompOptions::cuda): the driver's steady state, from its documented use
// of ioctl on /dev/nvidia* and /proc, /sys reads; unmeasured without a GPU.
// dpdk mode (SeccompOptions::dpdk): rte_thread_register() when a reactor first touches its
// queue reads its CPU affinity and checks which CPUs exist (access() on /sys paths).
constexpr const char* kDpdkSyscalls[] = {"sched_getaffinity", "access"};

// gpu.enabled (SeccompOptions::gpu_watch): /proc listings and fd links (ProcessInfo).
constexpr const char* kGpuWatchSyscalls[] = {"getdents64", "readlink", "readlinkat"};

constexpr const char* kCudaSyscalls[] = {"ioctl",     "getdents64",
                                         "readlink",  "readlinkat",        "mlock",
                                         "uname",     "sysinfo",           "getrusage"};

#ifdef INFERGATE_HAVE_SECCOMP
// One argument comparison (the SCMP_A* macros leave datum_b to the compiler's warnings).
scmp_arg_cmp argCmp(unsigned arg, scmp_compare op, scmp_datum_t a, scmp_datum_t b = 0) {
  return scmp_arg_cmp{arg, op, a, b};
}
constexpr int kSocketFamilies[] = {AF_INET, AF_INET6, AF_UNIX, AF_NETLINK};
constexpr int kBpfMapCommands[] = {BPF_MAP_LOOKUP_ELEM,   BPF_MAP_UPDATE_ELEM,
                                   BPF_MAP_DELETE_ELEM,   BPF_MAP_GET_NEXT_KEY,
                                   BPF_MAP_LOOKUP_BATCH,  BPF_OBJ_GET_INFO_BY_FD,
                                   BPF_MAP_LOOKUP_AND_DELETE_ELEM};
constexpr int kPrctlOptions[] = {PR_SET_NAME, PR_GET_NAME};
#endif

}  // namespace

std::vector<std::string> seccompAllowlist(const SeccompOptions& options) {
  std::vector<std::string> out(std::begin(kBaseSyscalls), std::end(kBaseSyscalls));
  out.push_back("clone");   // threads only
  out.push_back("socket");  // AF_INET, AF_INET6, AF_UNIX, AF_NETLINK
  out.push_back("prctl");   // thread names
  out.push_back("openat");  // read-only
  if (options.bpf_maps) out.push_back("bpf");  // map commands only
  if (options.raise_caps) out.push_back("capset");
  if (options.cuda) out.insert(out.end(), std::begin(kCudaSyscalls), std::end(kCudaSyscalls));
  if (options.dpdk) {
    for (const char* name : kDpdkSyscalls) {
      if (std::find(out.begin(), out.end(), name) == out.end()) out.emplace_back(name);
    }
  }
  if (options.gpu_watch) {
    for (const char* name : kGpuWatchSyscalls) {
      if (std::find(out.begin(), out.end(), name) == out.end()) out.emplace_back(name);
    }
    if (std::find(out.begin(), out.end(), "ioctl") == out.end()) {
      out.emplace_back("ioctl");  // PERF_EVENT_IOC_DISABLE only
    }
  }
  return out;
}

bool haveSeccompSupport() {
#ifdef INFERGATE_HAVE_SECCOMP
  return true;
#else
  return false;
#endif
}

uint64_t seccompDenials() { return g_denied_total.load(std::memory_order_relaxed); }

uint64_t seccompDenials(int nr) {
  if (nr < 0 || nr >= kMaxSyscallNr) return 0;
  return g_denied[nr].load(std::memory_order_relaxed);
}

void renderSeccompMetrics(std::string& out) {
  bool header = false;
  for (int nr = 0; nr < kMaxSyscallNr; ++nr) {
    const uint64_t n = g_denied[nr].load(std::memory_order_relaxed);
    if (n == 0) continue;
    if (!header) {
      out += "# HELP infergate_seccomp_denied_total System calls refused by the seccomp filter\n";
      out += "# TYPE infergate_seccomp_denied_total counter\n";
      header = true;
    }
    const std::string name = g_names[nr][0] != '\0' ? g_names[nr].data() : std::to_string(nr);
    out += fmt::format("infergate_seccomp_denied_total{{syscall=\"{}\"}} {}\n", name, n);
  }
}

absl::StatusOr<size_t> installSeccompFilter(const SeccompOptions& options) {
#ifndef INFERGATE_HAVE_SECCOMP
  (void)options;
  return absl::FailedPreconditionError(
      "security.seccomp: this build has no libseccomp (install libseccomp-dev, run "
      "scripts/install-deps.sh and rebuild) or set security.seccomp: false");
#else
  uint32_t def = SCMP_ACT_ERRNO(EPERM);
  switch (options.action) {
    case SeccompAction::kErrno:
#ifdef IG_SECCOMP_TRAP
      def = SCMP_ACT_TRAP;
#endif
      break;
    case SeccompAction::kKill:
      def = SCMP_ACT_KILL_PROCESS;
      break;
    case SeccompAction::kLog:
      def = SCMP_ACT_LOG;
      break;
  }
  for (int nr = 0; nr < kMaxSyscallNr; ++nr) {
    if (g_names[nr][0] != '\0') continue;
    if (char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr)) {
      std::snprintf(g_names[nr].data(), g_names[nr].size(), "%s", name);
      std::free(name);
    }
  }
#ifdef IG_SECCOMP_TRAP
  if (options.action == SeccompAction::kErrno) {
    struct sigaction sa {};
    sa.sa_sigaction = onSigsys;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSYS, &sa, nullptr) != 0)
      return absl::InternalError(fmt::format("sigaction(SIGSYS): {}", std::strerror(errno)));
  }
#endif
  scmp_filter_ctx ctx = seccomp_init(def);
  if (ctx == nullptr) return absl::InternalError("seccomp_init failed");
  struct Release {
    scmp_filter_ctx c;
    ~Release() { seccomp_release(c); }
  } release{ctx};
  auto fail = [](const char* what, int rc) {
    return absl::InternalError(fmt::format("seccomp: {}: {}", what, std::strerror(-rc)));
  };
  if (options.all_threads) {
    if (int rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1); rc != 0)
      return fail("thread synchronisation", rc);
  }
  size_t allowed = 0;
  for (const char* name : kBaseSyscalls) {
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR || nr < 0) continue;  // not on this architecture
    if (int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0); rc != 0) return fail(name, rc);
    ++allowed;
  }
  // Threads yes, processes no: clone must carry CLONE_THREAD. clone3 passes its flags in
  // memory the filter cannot read: ENOSYS makes glibc fall back to clone.
  if (int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
                                argCmp(0, SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD));
      rc != 0)
    return fail("clone", rc);
  ++allowed;
  if (int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0); rc != 0)
    return fail("clone3", rc);
  for (int family : kSocketFamilies) {
    if (int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
                                  argCmp(0, SCMP_CMP_EQ, static_cast<scmp_datum_t>(family)));
        rc != 0)
      return fail("socket", rc);
  }
  ++allowed;
  // Files are read (cpu lists, /etc/localtime), never created or written after start-up
  // (CUDA builds: the driver may open its device files read-write).
  if (int rc = options.cuda
                   ? seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(openat), 0)
                   : seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(openat), 1,
                                      argCmp(2, SCMP_CMP_MASKED_EQ, O_ACCMODE | O_CREAT | O_TRUNC,
                                             O_RDONLY));
      rc != 0)
    return fail("openat", rc);
  ++allowed;
  if (options.cuda) {
    for (const char* name : kCudaSyscalls) {
      const int nr = seccomp_syscall_resolve_name(name);
      if (nr == __NR_SCMP_ERROR || nr < 0) continue;
      if (int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0); rc != 0) return fail(name, rc);
      ++allowed;
    }
  }
  for (int option : kPrctlOptions) {
    if (int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(prctl), 1,
                                  argCmp(0, SCMP_CMP_EQ, static_cast<scmp_datum_t>(option)));
        rc != 0)
      return fail("prctl", rc);
  }
  ++allowed;
  if (options.bpf_maps) {
    for (int cmd : kBpfMapCommands) {
      if (int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(bpf), 1,
                                    argCmp(0, SCMP_CMP_EQ, static_cast<scmp_datum_t>(cmd)));
          rc != 0)
        return fail("bpf", rc);
    }
    ++allowed;
  }
  if (options.dpdk) {
    for (const char* name : kDpdkSyscalls) {
      const int nr = seccomp_syscall_resolve_name(name);
      if (nr == __NR_SCMP_ERROR || nr < 0) continue;
      if (int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0); rc != 0) return fail(name, rc);
      ++allowed;
    }
  }
  if (options.gpu_watch) {
    auto inCudaList = [&](const char* name) {
      return options.cuda && std::any_of(std::begin(kCudaSyscalls), std::end(kCudaSyscalls),
                                         [&](const char* c) { return std::strcmp(c, name) == 0; });
    };
    for (const char* name : kGpuWatchSyscalls) {
      if (inCudaList(name)) continue;  // allowed above already
      const int nr = seccomp_syscall_resolve_name(name);
      if (nr == __NR_SCMP_ERROR || nr < 0) continue;
      if (int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0); rc != 0) return fail(name, rc);
      ++allowed;
    }
    // libbpf disables a uprobe's perf event before closing it (the probes' detach at stop).
    if (!inCudaList("ioctl")) {
      if (int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
                                    argCmp(1, SCMP_CMP_EQ, PERF_EVENT_IOC_DISABLE));
          rc != 0)
        return fail("ioctl", rc);
      ++allowed;
    }
  }
  if (options.raise_caps) {
    if (int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(capset), 0); rc != 0)
      return fail("capset", rc);
    ++allowed;
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return absl::InternalError(fmt::format("no_new_privs: {}", std::strerror(errno)));
  if (int rc = seccomp_load(ctx); rc != 0) {
    return absl::PermissionDeniedError(fmt::format(
        "seccomp: loading the filter: {} (a kernel without CONFIG_SECCOMP_FILTER? set "
        "security.seccomp: false)",
        std::strerror(-rc)));
  }
  return allowed;
#endif
}

absl::StatusOr<std::pair<uid_t, gid_t>> resolveUser(const std::string& user,
                                                   const std::string& group) {
  absl::StatusOr<Identity> id = resolveIdentity(user, group);
  if (!id.ok()) return id.status();
  return std::make_pair(id->uid, id->gid);
}

absl::StatusOr<DropReport> dropPrivileges(const PrivilegeOptions& o) {
  DropReport report;
  CapSets cur;
  if (int e = capGet(cur)) return absl::InternalError(fmt::format("capget: {}", std::strerror(e)));
  std::optional<Identity> id;
  if (!o.user.empty() || !o.group.empty()) {
    if (o.user.empty())
      return absl::InvalidArgumentError("security.group needs security.user as well");
    absl::StatusOr<Identity> r = resolveIdentity(o.user, o.group);
    if (!r.ok()) return r.status();
    id = *r;
  }
  ThreadOp op;
  op.keep = o.keep & cur.prm;
  op.last_cap = lastCap();
  op.setpcap = (cur.eff & capBit(CAP_SETPCAP)) != 0;
  op.keepcaps = id.has_value();
  op.phase = Phase::kBound;
  absl::StatusOr<int> n = runEverywhere(op);
  if (!n.ok()) return n.status();
  if (id) {
    // glibc makes every thread of the process switch (its setxid broadcast).
    if (setgroups(1, &id->gid) != 0 || setresgid(id->gid, id->gid, id->gid) != 0 ||
        setresuid(id->uid, id->uid, id->uid) != 0) {
      return absl::PermissionDeniedError(fmt::format(
          "security.user: cannot switch to user {} group {}: {} (needs root or CAP_SETUID and "
          "CAP_SETGID at start)",
          id->user, id->group, std::strerror(errno)));
    }
  }
  op.phase = Phase::kFinal;
  n = runEverywhere(op);
  if (!n.ok()) return n.status();
  report.threads = *n;
  report.kept = op.keep;
  report.bounding_dropped = op.setpcap;
  report.identity = fmt::format("uid {} gid {}", getuid(), getgid());
  if (id) report.identity += fmt::format(" ({}:{})", id->user, id->group);
  if (o.seccomp) {
    absl::StatusOr<size_t> allowed = installSeccompFilter(o.seccomp_options);
    if (!allowed.ok()) return allowed.status();
    report.syscalls = *allowed;
  }
  return report;
}

ScopedCapability::ScopedCapability(int cap) : cap_(cap) {
  CapSets cur;
  if (capGet(cur) != 0 || (cur.prm & capBit(cap)) == 0) return;
  if ((cur.eff & capBit(cap)) != 0) return;  // already effective (nothing was dropped)
  CapSets raise = cur;
  raise.eff |= capBit(cap);
  raised_ = capSet(raise) == 0;
}

ScopedCapability::~ScopedCapability() {
  if (!raised_) return;
  CapSets cur;
  if (capGet(cur) != 0) return;
  cur.eff &= ~capBit(cap_);
  capSet(cur);
}

ThreadCaps currentCaps() {
  CapSets cur;
  ThreadCaps t;
  if (capGet(cur) == 0) {
    t.effective = cur.eff;
    t.permitted = cur.prm;
    t.inheritable = cur.inh;
  }
  return t;
}

}  // namespace infergate::app
