// The CUDA driver probes (gpu/gpu_probes.bpf.c, GpuProbes) on the stub libcuda.so.1
// (tests/gpu/stub_cuda.c), driven by ig-cuda-driver (tests/gpu/cuda_driver.c) in lock step: a
// known pattern of allocations, frees, launches and syncs, and the exact figures it must leave
// in the maps. Needs root (BPF + uprobes); skips with a message otherwise. Probes attach to
// every process mapping the stub (a child in another cgroup must be seen too), so figures are
// read for the driver's own tgids only; only the test's private cgroup is read per cgroup.

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>

#include "gpu/gpu_probes.h"
#include "ig_gpu_probes.skel.h"

#ifndef IG_STUB_CUDA_LIB
#error "IG_STUB_CUDA_LIB is defined by tests/gpu (ig_gpu_stub_paths)"
#endif

namespace infergate::gpu {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

uint64_t nowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

std::vector<std::string> split(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

// ig-cuda-driver as a child process with its stdin/stdout on pipes: one command, one reply.
class Driver {
 public:
  explicit Driver(const std::string& lib) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      execl(IG_CUDA_DRIVER, IG_CUDA_DRIVER, "--lib", lib.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = out[0];
    ready_ = readLine();
  }
  ~Driver() {
    if (to_ >= 0) close(to_);  // end of input: the driver quits, its children see EOF
    if (from_ >= 0) close(from_);
    if (pid_ > 0) {
      for (int i = 0; i < 200; ++i) {  // 2 s, then kill
        if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
        usleep(10'000);
      }
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  const std::string& ready() const { return ready_; }
  pid_t pid() const { return pid_; }

  // Sends a command line, returns its reply line ("" on timeout or EOF).
  std::string cmd(const std::string& line) {
    std::string l = line + "\n";
    if (write(to_, l.data(), l.size()) != static_cast<ssize_t>(l.size())) return "";
    return readLine();
  }
  // A command that must answer "ok ..."; the reply's tokens after "ok".
  std::vector<std::string> ok(const std::string& line) {
    std::string r = cmd(line);
    EXPECT_EQ(r.rfind("ok", 0), 0u) << line << " -> " << r;
    std::vector<std::string> t = split(r);
    if (!t.empty()) t.erase(t.begin());
    return t;
  }

 private:
  std::string readLine() {
    std::string line;
    for (;;) {
      size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      pollfd p{from_, POLLIN, 0};
      if (poll(&p, 1, 20'000) <= 0) return "";
      char chunk[512];
      ssize_t n = read(from_, chunk, sizeof(chunk));
      if (n <= 0) return "";
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string buf_, ready_;
};

// An allocation the driver made: its id (for `free`) and its pointer.
struct Alloc {
  std::string id;
  uint64_t ptr = 0;
};

Alloc alloc(Driver& d, const std::string& kind, uint64_t bytes, const char* ptsz = "") {
  std::vector<std::string> t = d.ok("alloc " + kind + " " + std::to_string(bytes) + " " + ptsz);
  Alloc a;
  if (t.size() == 2) {
    a.id = t[0];
    a.ptr = std::stoull(t[1], nullptr, 16);
  }
  return a;
}

std::optional<ProcStats> procOf(const GpuSnapshot& s, uint32_t tgid) {
  for (const ProcStats& p : s.procs)
    if (p.tgid == tgid) return p;
  return std::nullopt;
}

std::optional<CgroupStats> cgroupOf(const GpuSnapshot& s, uint64_t id) {
  for (const CgroupStats& c : s.cgroups)
    if (c.cgroup_id == id) return c;
  return std::nullopt;
}

// The mount point of the cgroup v2 hierarchy ("" when none): /sys/fs/cgroup on a unified
// system, /sys/fs/cgroup/unified on a hybrid one.
std::string cgroup2Mount() {
  std::ifstream in("/proc/self/mounts");
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f = split(line);
    if (f.size() >= 3 && f[2] == "cgroup2") return f[1];
  }
  return "";
}

// The cgroup id (inode of its cgroupfs directory) a process is in, 0 when unknown.
uint64_t cgroupIdOfPid(pid_t pid) {
  const std::string mount = cgroup2Mount();
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("0::", 0) != 0) continue;
    struct stat st {};
    if (!mount.empty() && stat((mount + line.substr(3)).c_str(), &st) == 0) return st.st_ino;
  }
  return 0;
}

class GpuProbesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (BPF programs and uprobes)";
  }
  static absl::StatusOr<std::unique_ptr<GpuProbes>> attachTo(const std::string& lib,
                                                             uint64_t large = kGiB) {
    GpuProbeOptions o;
    o.library = lib;
    o.large_alloc_bytes = large;
    o.multi_link = multi_link_;
    return GpuProbes::attach(o);
  }
  void exactFiguresOfAKnownPattern();
  // false: one link per probe, what a kernel without uprobe_multi (before 6.6) gets.
  static inline bool multi_link_ = true;
};

// The fallback: the same figures through a link per probe.
class GpuProbesPerProbeLinks : public GpuProbesTest {
 protected:
  void SetUp() override {
    GpuProbesTest::SetUp();
    multi_link_ = false;
  }
  void TearDown() override { multi_link_ = true; }
};

TEST_F(GpuProbesTest, ExactFiguresOfAKnownPattern) { exactFiguresOfAKnownPattern(); }
TEST_F(GpuProbesPerProbeLinks, ExactFiguresOfAKnownPattern) { exactFiguresOfAKnownPattern(); }

TEST(GpuProbesElf, DynamicFunctionsOfTheStubs) {
  auto full = elfDynamicFunctions(IG_STUB_CUDA_LIB);
  ASSERT_TRUE(full.ok()) << full.status();
  auto has = [](const std::vector<std::string>& v, const char* n) {
    return std::find(v.begin(), v.end(), n) != v.end();
  };
  for (int fn = 0; fn < IG_GPU_FN_MAX; ++fn) EXPECT_TRUE(has(*full, fnName(fn))) << fnName(fn);
  EXPECT_TRUE(has(*full, "cuLaunchKernel_ptsz"));
  EXPECT_TRUE(has(*full, "cuMemFreeAsync_ptsz"));
  EXPECT_TRUE(has(*full, "igStubCalls"));
  EXPECT_FALSE(has(*full, "nanosleep"));  // imported (undefined), not a function of the stub
  EXPECT_TRUE(std::is_sorted(full->begin(), full->end()));

  auto minimal = elfDynamicFunctions(IG_STUB_CUDA_MINIMAL_LIB);
  ASSERT_TRUE(minimal.ok()) << minimal.status();
  EXPECT_FALSE(has(*minimal, "cuLaunchKernelEx"));
  EXPECT_FALSE(has(*minimal, "cuLaunchKernelEx_ptsz"));
  EXPECT_FALSE(has(*minimal, "cuMemCreate"));
  EXPECT_FALSE(has(*minimal, "cuMemRelease"));
  EXPECT_TRUE(has(*minimal, "cuLaunchKernel"));
  EXPECT_EQ(full->size() - minimal->size(), 4u);
}

// The file offsets uprobe_multi attaches to: the frame-pointer stub's functions start with
// `push %rbp` (0x55) at exactly the offset read from .dynsym and its section.
TEST(GpuProbesElf, FunctionOffsetsPointAtTheFirstInstruction) {
  std::string fp = IG_STUB_CUDA_LIB;
  fp.replace(fp.rfind("/stub/"), 6, "/stub-fp/");
  auto fns = elfDynamicFunctionOffsets(fp);
  ASSERT_TRUE(fns.ok()) << fns.status() << " (build ig_stub_cuda_fp)";
  std::ifstream in(fp, std::ios::binary);
  int checked = 0;
  for (const ElfFunction& f : *fns) {
    if (f.name.rfind("cu", 0) != 0) continue;
    ASSERT_NE(f.offset, 0u) << f.name;
    in.seekg(static_cast<std::streamoff>(f.offset));
    char first = 0;
    in.read(&first, 1);
    EXPECT_EQ(static_cast<unsigned char>(first), 0x55) << f.name << " at " << f.offset;
    ++checked;
  }
  EXPECT_GE(checked, 27);
}

TEST(GpuProbesElf, RefusesWhatIsNotAnElfSharedObject) {
  EXPECT_TRUE(absl::IsNotFound(elfDynamicFunctions("/nonexistent/libcuda.so.1").status()));
  EXPECT_TRUE(absl::IsNotFound(elfDynamicFunctions("/").status()));
  char path[] = "/tmp/ig-gpu-notelf-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const char junk[] =
      "\x7f"
      "ELF but not really, just text";
  ASSERT_EQ(write(fd, junk, sizeof(junk)), static_cast<ssize_t>(sizeof(junk)));
  close(fd);
  auto r = elfDynamicFunctions(path);
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  // The attach path says the same, naming the config key.
  GpuProbeOptions o;
  o.library = path;
  auto p = GpuProbes::attach(o);
  EXPECT_TRUE(absl::IsInvalidArgument(p.status())) << p.status();
  EXPECT_NE(p.status().message().find("gpu.library"), std::string::npos) << p.status();
  unlink(path);
}

// Hostile input: every truncation and a few thousand corrupted copies of the stub are either
// read or refused with InvalidArgument; nothing is read out of bounds (ASan builds check that).
TEST(GpuProbesElf, TruncatedAndCorruptedFilesAreRefusedCleanly) {
  std::ifstream in(IG_STUB_CUDA_LIB, std::ios::binary);
  std::string image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(image.size(), 4096u);
  char path[] = "/tmp/ig-gpu-elf-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  auto check = [&](const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    auto r = elfDynamicFunctions(path);
    EXPECT_TRUE(r.ok() || absl::IsInvalidArgument(r.status())) << r.status();
    return r.ok();
  };
  int read_ok = 0;
  for (size_t len = 0; len < image.size(); len += 61) read_ok += check(image.substr(0, len));
  EXPECT_EQ(read_ok, 0);  // the section headers are at the end: every truncation loses them
  std::mt19937 rng(17);
  for (int i = 0; i < 3000; ++i) {
    std::string bad = image;
    for (int k = 0; k < 4; ++k) bad[rng() % bad.size()] = static_cast<char>(rng());
    check(bad);
  }
  // Headers that point far outside the file.
  std::string bad = image;
  Elf64_Ehdr eh;
  std::memcpy(&eh, bad.data(), sizeof(eh));
  eh.e_shoff = ~0ull - 8;
  std::memcpy(bad.data(), &eh, sizeof(eh));
  EXPECT_FALSE(check(bad));
  unlink(path);
}

// No root needed: the library is checked before anything is loaded.
TEST(GpuProbesAttach, AbsentLibraryIsNotFoundAndNamesTheFix) {
  GpuProbeOptions o;
  o.library = "/nonexistent/ig-gpu-test/libcuda.so.1";
  auto p = GpuProbes::attach(o);
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(absl::IsNotFound(p.status())) << p.status();
  EXPECT_NE(p.status().message().find("/nonexistent/ig-gpu-test/libcuda.so.1"), std::string::npos);
  EXPECT_NE(p.status().message().find("gpu.library"), std::string::npos);
  o.library = "";
  EXPECT_TRUE(absl::IsInvalidArgument(GpuProbes::attach(o).status()));
}

// Without privileges the load is refused with the capabilities to grant (checked in a child
// that gives up root).
TEST_F(GpuProbesTest, UnprivilegedLoadIsPermissionDeniedAndNamesTheCapabilities) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) _exit(10);
    GpuProbeOptions o;
    o.library = IG_STUB_CUDA_LIB;
    auto p = GpuProbes::attach(o);
    if (p.ok()) _exit(11);
    if (!absl::IsPermissionDenied(p.status())) _exit(12);
    if (p.status().message().find("CAP_BPF") == std::string::npos) _exit(13);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: could not drop root, 11: attached, 12: other error, "
                                       "13: no capability named";
}

TEST_F(GpuProbesTest, MinimalStubReportsMissingSymbolsAndStillCounts) {
  auto probes = attachTo(IG_STUB_CUDA_MINIMAL_LIB);
  ASSERT_TRUE(probes.ok()) << probes.status();
  const AttachReport& r = (*probes)->report();
  EXPECT_TRUE(r.active);
  EXPECT_EQ(r.library, IG_STUB_CUDA_MINIMAL_LIB);
  EXPECT_EQ(r.reason, "");
  EXPECT_EQ(r.missing,
            (std::vector<std::string>{"cuMemCreate", "cuMemRelease", "cuLaunchKernelEx"}));
  // 12 base functions + 5 _ptsz variants (not cuLaunchKernelEx_ptsz)
  EXPECT_EQ(r.attached.size(), 17u);
  auto attached = [&](const char* n) {
    return std::find(r.attached.begin(), r.attached.end(), n) != r.attached.end();
  };
  EXPECT_TRUE(attached("cuLaunchKernel_ptsz"));
  EXPECT_TRUE(attached("cuStreamSynchronize_ptsz"));
  EXPECT_FALSE(attached("cuLaunchKernelEx_ptsz"));

  Driver d(IG_STUB_CUDA_MINIMAL_LIB);
  ASSERT_EQ(d.ready().rfind("ready", 0), 0u) << d.ready();
  const uint32_t tgid = static_cast<uint32_t>(std::stoul(d.ok("pid").at(0)));
  d.ok("launch 3");
  d.ok("launch 2 ptsz");
  Alloc a = alloc(d, "device", 4096);
  d.ok("sync ctx");
  EXPECT_EQ(d.cmd("alloc vmm 4096"), "err missing cuMemCreate");
  auto p = procOf((*probes)->snapshot(), tgid);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->launches, 5u);
  EXPECT_EQ(p->alloc_count[IG_GPU_MEM_DEVICE], 1u);
  EXPECT_EQ(p->live_bytes[IG_GPU_MEM_DEVICE], 4096);
  EXPECT_EQ(p->syncs, 1u);
  EXPECT_EQ(p->timed_syncs, 1u);
  EXPECT_EQ(p->alloc_count[IG_GPU_MEM_VMM], 0u);
}

// The whole pattern in one process, figure by figure.
void GpuProbesTest::exactFiguresOfAKnownPattern() {
  Driver d(IG_STUB_CUDA_LIB);
  ASSERT_EQ(d.ready().rfind("ready", 0), 0u) << d.ready();
  const uint32_t tgid = static_cast<uint32_t>(std::stoul(d.ok("pid").at(0)));
  // Before the probes: an allocation they never see (its free is an unknown free).
  Alloc before = alloc(d, "device", 100);

  auto probes = attachTo(IG_STUB_CUDA_LIB, kGiB);
  ASSERT_TRUE(probes.ok()) << probes.status();
  GpuProbes& g = **probes;
  EXPECT_TRUE(g.report().missing.empty());
  EXPECT_EQ(g.report().attached.size(), 21u);  // 15 + 6 _ptsz
  g.drainEvents(1000);                         // whatever other processes did before

  EXPECT_FALSE(procOf(g.snapshot(), tgid).has_value());
  // A sync with nothing pending: counted, not timed.
  d.ok("sync ctx");

  Alloc dev1 = alloc(d, "device", 1000);
  Alloc dev2 = alloc(d, "device", 3000);
  Alloc big = alloc(d, "device", 2 * kGiB);  // a large allocation: ring event
  Alloc as1 = alloc(d, "async", 4096);
  Alloc as2 = alloc(d, "async", 100, "ptsz");
  Alloc man1 = alloc(d, "managed", 5000);
  Alloc man2 = alloc(d, "managed", 6000);
  Alloc vmm = alloc(d, "vmm", 2u << 20);
  Alloc host = alloc(d, "host", 8192);
  ASSERT_NE(big.ptr, 0u);
  d.ok("fail-next");
  EXPECT_EQ(d.cmd("alloc device 777"), "fail 2");

  d.ok("free " + dev1.id);    // cuMemFree_v2 of device memory
  d.ok("free " + man2.id);    // cuMemFree_v2 of managed memory
  d.ok("free " + as1.id);     // cuMemFreeAsync
  d.ok("free " + vmm.id);     // cuMemRelease
  d.ok("free " + host.id);    // cuMemFreeHost
  d.ok("free " + before.id);  // not tracked: unknown

  d.ok("launch 5");
  d.ok("sync stream");  // timed (1)
  d.ok("launch 2 ptsz");
  d.ok("launchex 3");
  d.ok("launchex 1 ptsz");
  d.ok("sync stream ptsz");  // timed (2)
  d.ok("graph 4");
  d.ok("graph 1 ptsz");
  d.ok("sync event");  // timed (3)
  d.ok("sync event");  // nothing pending

  GpuSnapshot s1 = g.snapshot();
  auto p1 = procOf(s1, tgid);
  ASSERT_TRUE(p1.has_value());

  // The delayed sync: the stub sleeps 2 ms in it; launch -> sync time is at least that and at
  // most what this side measured around the two commands.
  d.ok("delay 2000000");
  const uint64_t t0 = nowNs();
  d.ok("launch 1");
  d.ok("sync ctx");  // timed (4)
  const uint64_t outer = nowNs() - t0;
  d.ok("delay 0");

  GpuSnapshot s = g.snapshot();
  auto p = procOf(s, tgid);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->comm, "ig-cuda-driver");
  if (!cgroup2Mount().empty()) {  // (without a v2 mount there is no path to compare with)
    EXPECT_EQ(p->cgroup_id, cgroupIdOfPid(static_cast<pid_t>(tgid)));
  }
  EXPECT_GT(p->first_ns, 0u);
  EXPECT_GE(p->last_ns, p->first_ns);

  // Allocations, per kind.
  EXPECT_EQ(p->alloc_count[IG_GPU_MEM_DEVICE], 3u);
  EXPECT_EQ(p->alloc_bytes[IG_GPU_MEM_DEVICE], 1000u + 3000u + 2 * kGiB);
  EXPECT_EQ(p->free_count[IG_GPU_MEM_DEVICE], 1u);
  EXPECT_EQ(p->free_bytes[IG_GPU_MEM_DEVICE], 1000u);
  EXPECT_EQ(p->live_bytes[IG_GPU_MEM_DEVICE], static_cast<int64_t>(3000 + 2 * kGiB));
  EXPECT_EQ(p->alloc_count[IG_GPU_MEM_ASYNC], 2u);
  EXPECT_EQ(p->alloc_bytes[IG_GPU_MEM_ASYNC], 4196u);
  EXPECT_EQ(p->free_count[IG_GPU_MEM_ASYNC], 1u);
  EXPECT_EQ(p->free_bytes[IG_GPU_MEM_ASYNC], 4096u);
  EXPECT_EQ(p->live_bytes[IG_GPU_MEM_ASYNC], 100);
  EXPECT_EQ(p->alloc_count[IG_GPU_MEM_MANAGED], 2u);
  EXPECT_EQ(p->alloc_bytes[IG_GPU_MEM_MANAGED], 11000u);
  EXPECT_EQ(p->free_count[IG_GPU_MEM_MANAGED], 1u);
  EXPECT_EQ(p->free_bytes[IG_GPU_MEM_MANAGED], 6000u);
  EXPECT_EQ(p->live_bytes[IG_GPU_MEM_MANAGED], 5000);
  EXPECT_EQ(p->alloc_count[IG_GPU_MEM_VMM], 1u);
  EXPECT_EQ(p->alloc_bytes[IG_GPU_MEM_VMM], 2u << 20);
  EXPECT_EQ(p->free_count[IG_GPU_MEM_VMM], 1u);
  EXPECT_EQ(p->live_bytes[IG_GPU_MEM_VMM], 0);
  EXPECT_EQ(p->alloc_count[IG_GPU_MEM_HOST], 1u);
  EXPECT_EQ(p->free_bytes[IG_GPU_MEM_HOST], 8192u);
  EXPECT_EQ(p->live_bytes[IG_GPU_MEM_HOST], 0);
  EXPECT_EQ(p->deviceBytes(), static_cast<int64_t>(3000 + 2 * kGiB + 100 + 5000));
  EXPECT_EQ(p->alloc_failures, 1u);
  EXPECT_EQ(p->unknown_frees, 1u);
  EXPECT_EQ(p->untracked_allocs, 0u);

  // Launches and syncs.
  EXPECT_EQ(p->launches, 5u + 2 + 3 + 1 + 1);
  EXPECT_EQ(p->graph_launches, 5u);
  EXPECT_EQ(p->syncs, 6u);
  EXPECT_EQ(p->timed_syncs, 4u);
  uint64_t hist_total = 0;
  for (uint64_t c : p->sync_hist) hist_total += c;
  EXPECT_EQ(hist_total, 4u);
  // The delayed one, alone: one more count, in the bucket of a time in [2 ms, outer].
  EXPECT_EQ(p->timed_syncs - p1->timed_syncs, 1u);
  const uint64_t delayed = p->sync_ns_sum - p1->sync_ns_sum;
  EXPECT_GE(delayed, 2'000'000u);
  EXPECT_LE(delayed, outer);
  int bucket = -1;
  for (int b = 0; b < kSyncBuckets; ++b) {
    if (p->sync_hist[b] != p1->sync_hist[b]) {
      EXPECT_EQ(bucket, -1) << "more than one bucket changed";
      EXPECT_EQ(p->sync_hist[b] - p1->sync_hist[b], 1u);
      bucket = b;
    }
  }
  EXPECT_EQ(bucket, syncBucketOf(delayed));  // the program's bucket rule = the host's
  EXPECT_TRUE(bucket == 20 || bucket == 21) << "bucket " << bucket << ", " << delayed << " ns";
  EXPECT_LE(bucket, syncBucketOf(outer));

  // The program's own counters (every process counts in them: lower bounds).
  EXPECT_GE(s.stats.calls[IG_GPU_FN_MEM_ALLOC], 4u);
  EXPECT_GE(s.stats.calls[IG_GPU_FN_LAUNCH_KERNEL], 5u + 2 + 1);
  EXPECT_GE(s.stats.calls[IG_GPU_FN_GRAPH_LAUNCH], 5u);

  // Live allocations, oldest first, pointers as the driver saw them.
  std::vector<LiveAlloc> live = g.liveAllocs(tgid, 100);
  ASSERT_EQ(live.size(), 4u);
  EXPECT_EQ(live[0].ptr, dev2.ptr);
  EXPECT_EQ(live[0].kind, IG_GPU_MEM_DEVICE);
  EXPECT_EQ(live[0].bytes, 3000u);
  EXPECT_EQ(live[1].ptr, big.ptr);
  EXPECT_EQ(live[1].bytes, 2 * kGiB);
  EXPECT_EQ(live[2].ptr, as2.ptr);
  EXPECT_EQ(live[2].kind, IG_GPU_MEM_ASYNC);
  EXPECT_EQ(live[3].ptr, man1.ptr);
  EXPECT_EQ(live[3].kind, IG_GPU_MEM_MANAGED);
  for (const LiveAlloc& a : live) {
    EXPECT_EQ(a.tgid, tgid);
    EXPECT_EQ(a.cgroup_id, p->cgroup_id);
    EXPECT_GE(a.ts_ns, p->first_ns);
  }
  EXPECT_EQ(g.liveAllocs(tgid, 2).size(), 2u);
  EXPECT_EQ(g.liveAllocs(tgid, 2)[1].ptr, big.ptr);

  // Rare events: the large allocation and the failure, nothing else from this process.
  std::vector<GpuEvent> mine;
  for (GpuEvent& e : g.drainEvents(1000))
    if (e.tgid == tgid) mine.push_back(e);
  ASSERT_EQ(mine.size(), 2u);
  EXPECT_EQ(mine[0].type, IG_GPU_EV_LARGE_ALLOC);
  EXPECT_EQ(mine[0].fn, IG_GPU_FN_MEM_ALLOC);
  EXPECT_EQ(mine[0].bytes, 2 * kGiB);
  EXPECT_EQ(mine[0].ptr, big.ptr);
  EXPECT_EQ(mine[0].result, 0);
  EXPECT_EQ(mine[0].comm, "ig-cuda-driver");
  EXPECT_EQ(mine[0].tid, tgid);  // single-threaded
  EXPECT_EQ(mine[1].type, IG_GPU_EV_ALLOC_FAILED);
  EXPECT_EQ(mine[1].fn, IG_GPU_FN_MEM_ALLOC);
  EXPECT_EQ(mine[1].result, 2);  // CUDA_ERROR_OUT_OF_MEMORY
  EXPECT_EQ(mine[1].bytes, 777u);
  EXPECT_EQ(mine[1].ptr, 0u);
  EXPECT_EQ(mine[1].cgroup_id, p->cgroup_id);
  EXPECT_LT(mine[0].ts_ns, mine[1].ts_ns);

  // forget(): the process, its allocations and its pending launch go; it starts afresh.
  d.ok("launch 1");  // pending again
  g.forget(tgid);
  EXPECT_FALSE(procOf(g.snapshot(), tgid).has_value());
  EXPECT_TRUE(g.liveAllocs(tgid, 100).empty());
  d.ok("sync ctx");         // nothing pending any more: not timed
  d.ok("free " + dev2.id);  // forgotten: unknown
  p = procOf(g.snapshot(), tgid);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->syncs, 1u);
  EXPECT_EQ(p->timed_syncs, 0u);
  EXPECT_EQ(p->unknown_frees, 1u);
  EXPECT_EQ(p->launches, 0u);
  EXPECT_EQ(p->live_bytes[IG_GPU_MEM_DEVICE], 0);
}

// options.pid: only that process's calls count (perf's per-task uprobe events: the thread
// itself, which for the single-threaded driver is the process).
TEST_F(GpuProbesTest, PidOptionCountsThatProcessOnly) {
  Driver a(IG_STUB_CUDA_LIB), b(IG_STUB_CUDA_LIB);
  ASSERT_EQ(a.ready().rfind("ready", 0), 0u) << a.ready();
  ASSERT_EQ(b.ready().rfind("ready", 0), 0u) << b.ready();
  const uint32_t ta = static_cast<uint32_t>(std::stoul(a.ok("pid").at(0)));
  const uint32_t tb = static_cast<uint32_t>(std::stoul(b.ok("pid").at(0)));
  GpuProbeOptions o;
  o.library = IG_STUB_CUDA_LIB;
  o.pid = static_cast<int>(ta);
  auto probes = GpuProbes::attach(o);
  ASSERT_TRUE(probes.ok()) << probes.status();
  a.ok("launch 3");
  b.ok("launch 4");
  alloc(a, "device", 512);
  alloc(b, "device", 512);
  GpuSnapshot s = (*probes)->snapshot();
  auto pa = procOf(s, ta);
  ASSERT_TRUE(pa.has_value());
  EXPECT_EQ(pa->launches, 3u);
  EXPECT_EQ(pa->live_bytes[IG_GPU_MEM_DEVICE], 512);
  EXPECT_FALSE(procOf(s, tb).has_value());
  EXPECT_EQ(s.stats.calls[IG_GPU_FN_LAUNCH_KERNEL], 3u);  // nobody else's either
}

// Several threads of one process at once, the stub called in this process: the atomic adds and
// the per-thread entry->return state keep every figure exact.
TEST_F(GpuProbesTest, ThreadsOfOneProcessCountExactly) {
  void* h = dlopen(IG_STUB_CUDA_LIB, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  using LaunchFn = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, void*, void**, void**);
  using AllocFn = int (*)(unsigned long long*, size_t);
  using FreeFn = int (*)(unsigned long long);
  using SyncFn = int (*)(void*);
  auto launch = reinterpret_cast<LaunchFn>(dlsym(h, "cuLaunchKernel"));
  auto memAlloc = reinterpret_cast<AllocFn>(dlsym(h, "cuMemAlloc_v2"));
  auto memFree = reinterpret_cast<FreeFn>(dlsym(h, "cuMemFree_v2"));
  auto sync = reinterpret_cast<SyncFn>(dlsym(h, "cuStreamSynchronize"));
  ASSERT_TRUE(launch && memAlloc && memFree && sync);

  auto probes = attachTo(IG_STUB_CUDA_LIB);
  ASSERT_TRUE(probes.ok()) << probes.status();
  constexpr int kThreads = 4, kRounds = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      int dummy = 0;
      for (int i = 0; i < kRounds; ++i) {
        unsigned long long p = 0;
        if (memAlloc(&p, 1000 + t) != 0) continue;
        launch(&dummy, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr);
        launch(&dummy, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr);
        sync(nullptr);
        if (i % 2 == 0) memFree(p);  // half stay live
      }
    });
  }
  for (std::thread& th : threads) th.join();
  auto p = procOf((*probes)->snapshot(), static_cast<uint32_t>(getpid()));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->launches, 2u * kThreads * kRounds);
  EXPECT_EQ(p->syncs, 1u * kThreads * kRounds);
  EXPECT_GE(p->timed_syncs, 1u);
  EXPECT_LE(p->timed_syncs, p->syncs);
  uint64_t hist = 0;
  for (uint64_t c : p->sync_hist) hist += c;
  EXPECT_EQ(hist, p->timed_syncs);
  EXPECT_EQ(p->alloc_count[IG_GPU_MEM_DEVICE], 1u * kThreads * kRounds);
  EXPECT_EQ(p->free_count[IG_GPU_MEM_DEVICE], 1u * kThreads * kRounds / 2);
  uint64_t bytes = 0;
  for (int t = 0; t < kThreads; ++t) bytes += uint64_t{1000u + t} * kRounds;
  EXPECT_EQ(p->alloc_bytes[IG_GPU_MEM_DEVICE], bytes);
  EXPECT_EQ(p->live_bytes[IG_GPU_MEM_DEVICE], static_cast<int64_t>(bytes / 2));
  EXPECT_EQ(p->unknown_frees, 0u);
  EXPECT_EQ(p->untracked_allocs, 0u);
  EXPECT_EQ((*probes)->liveAllocs(static_cast<uint32_t>(getpid()), 100000).size(),
            1u * kThreads * kRounds / 2);
  (*probes)->forget(static_cast<uint32_t>(getpid()));
  EXPECT_TRUE((*probes)->liveAllocs(static_cast<uint32_t>(getpid()), 100000).empty());
}

// A full ring buffer, a full allocation map and a full call map: each is counted, and the
// figures stay consistent (an allocation that cannot be tracked stays out of live_bytes). On a
// private copy of the stub, so the program's global counters see this process alone.
TEST_F(GpuProbesTest, FullMapsAndRingAreCounted) {
  char dir[] = "/tmp/ig-gpu-full-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string lib = std::string(dir) + "/libcuda.so.1";
  {
    std::ifstream in(IG_STUB_CUDA_LIB, std::ios::binary);
    std::ofstream out(lib, std::ios::binary);
    out << in.rdbuf();
  }
  struct Cleanup {
    std::string lib, dir;
    ~Cleanup() {
      unlink(lib.c_str());
      rmdir(dir.c_str());
    }
  } cleanup{lib, dir};
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto memAlloc = reinterpret_cast<int (*)(unsigned long long*, size_t)>(dlsym(h, "cuMemAlloc_v2"));
  auto memFree = reinterpret_cast<int (*)(unsigned long long)>(dlsym(h, "cuMemFree_v2"));
  ASSERT_TRUE(memAlloc && memFree);
  const uint32_t me = static_cast<uint32_t>(getpid());

  auto probes = attachTo(lib, /*large=*/1);  // every allocation is a ring event
  ASSERT_TRUE(probes.ok()) << probes.status();
  GpuProbes& g = **probes;

  // The ring: a record is an 8-byte header + the 72-byte event = 80 bytes.
  constexpr uint64_t kRingRecords = IG_GPU_RINGBUF_BYTES / (8 + sizeof(ig_gpu_event));
  constexpr uint64_t kAllocs = kRingRecords + 500;
  for (uint64_t i = 0; i < kAllocs; ++i) {
    unsigned long long p = 0;
    ASSERT_EQ(memAlloc(&p, 8), 0);
    ASSERT_EQ(memFree(p), 0);
  }
  GpuSnapshot s = g.snapshot();
  EXPECT_EQ(s.stats.ringbuf_full, 500u);
  std::vector<GpuEvent> events = g.drainEvents(1'000'000);
  EXPECT_EQ(events.size(), std::min<uint64_t>(kRingRecords, GpuProbes::kEventQueue));
  EXPECT_EQ(g.eventsDropped(),
            kRingRecords - std::min<uint64_t>(kRingRecords, GpuProbes::kEventQueue));
  for (const GpuEvent& e : events) EXPECT_EQ(e.type, IG_GPU_EV_LARGE_ALLOC);

  // ig_gpu_allocs full (filled from here with keys of no process).
  const int allocs_fd = bpf_map__fd(g.skeleton()->maps.ig_gpu_allocs);
  ig_gpu_alloc_key k{};
  ig_gpu_alloc v{};
  uint64_t filled = 0;
  for (k.ptr = 1; bpf_map_update_elem(allocs_fd, &k, &v, BPF_NOEXIST) == 0; ++k.ptr) ++filled;
  EXPECT_EQ(errno, E2BIG);
  EXPECT_EQ(filled, IG_GPU_MAX_ALLOCS);
  auto before = procOf(g.snapshot(), me);
  ASSERT_TRUE(before.has_value());
  unsigned long long ptrs[3];
  for (unsigned long long& p : ptrs) ASSERT_EQ(memAlloc(&p, 4096), 0);
  for (unsigned long long p : ptrs) ASSERT_EQ(memFree(p), 0);
  s = g.snapshot();
  auto after = procOf(s, me);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->alloc_count[IG_GPU_MEM_DEVICE] - before->alloc_count[IG_GPU_MEM_DEVICE], 3u);
  EXPECT_EQ(after->untracked_allocs - before->untracked_allocs, 3u);
  EXPECT_EQ(s.stats.alloc_map_full, 3u);
  EXPECT_EQ(after->live_bytes[IG_GPU_MEM_DEVICE], before->live_bytes[IG_GPU_MEM_DEVICE]);
  EXPECT_EQ(after->unknown_frees - before->unknown_frees, 3u);

  // ig_gpu_calls full: the entry cannot be kept, so the call is not counted at its return.
  const int calls_fd = bpf_map__fd(g.skeleton()->maps.ig_gpu_calls);
  ig_gpu_call c{};
  for (uint64_t key = 1; bpf_map_update_elem(calls_fd, &key, &c, BPF_NOEXIST) == 0; ++key) {
  }
  unsigned long long p = 0;
  ASSERT_EQ(memAlloc(&p, 4096), 0);
  s = g.snapshot();
  auto last = procOf(s, me);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(s.stats.call_map_full, 1u);
  EXPECT_EQ(s.stats.returns_unmatched, 1u);
  EXPECT_EQ(last->alloc_count[IG_GPU_MEM_DEVICE], after->alloc_count[IG_GPU_MEM_DEVICE]);
  EXPECT_EQ(s.stats.calls[IG_GPU_FN_MEM_ALLOC], kAllocs + 3 + 1);
  EXPECT_EQ(s.stats.proc_map_full, 0u);

  // ig_gpu_procs full: the process's events are dropped (counted); its cgroup still counts.
  auto launch =
      reinterpret_cast<int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, void*, void**, void**)>(dlsym(h, "cuLaunchKernel"));
  ASSERT_NE(launch, nullptr);
  g.forget(me);
  const int procs_fd = bpf_map__fd(g.skeleton()->maps.ig_gpu_procs);
  static const ig_gpu_proc zero{};
  for (uint32_t t = 0x7f000000; bpf_map_update_elem(procs_fd, &t, &zero, BPF_NOEXIST) == 0; ++t) {
  }
  const uint64_t my_cgroup = cgroupIdOfPid(getpid());
  auto cg_before = cgroupOf(g.snapshot(), my_cgroup);
  int dummy = 0;
  ASSERT_EQ(launch(&dummy, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr), 0);
  s = g.snapshot();
  EXPECT_EQ(s.stats.proc_map_full, 1u);
  EXPECT_FALSE(procOf(s, me).has_value());
  EXPECT_EQ(s.procs.size(), static_cast<size_t>(IG_GPU_MAX_PROCS));
  if (my_cgroup != 0) {  // a cgroup v2 mount to find our cgroup id by
    auto cg_after = cgroupOf(s, my_cgroup);
    ASSERT_TRUE(cg_after.has_value());
    EXPECT_EQ(cg_after->launches - (cg_before ? cg_before->launches : 0), 1u);
  }
  dlclose(h);
}

// A free finds its allocation whichever call made it: cuMemFree_v2 of pool memory,
// cuMemFreeAsync of cuMemAlloc memory; freeing NULL counts nothing.
TEST_F(GpuProbesTest, FreesFindTheirAllocationAcrossKinds) {
  void* h = dlopen(IG_STUB_CUDA_LIB, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto memAlloc = reinterpret_cast<int (*)(unsigned long long*, size_t)>(dlsym(h, "cuMemAlloc_v2"));
  auto memFree = reinterpret_cast<int (*)(unsigned long long)>(dlsym(h, "cuMemFree_v2"));
  auto allocAsync =
      reinterpret_cast<int (*)(unsigned long long*, size_t, void*)>(dlsym(h, "cuMemAllocAsync"));
  auto freeAsync = reinterpret_cast<int (*)(unsigned long long, void*)>(dlsym(h, "cuMemFreeAsync"));
  ASSERT_TRUE(memAlloc && memFree && allocAsync && freeAsync);
  auto probes = attachTo(IG_STUB_CUDA_LIB);
  ASSERT_TRUE(probes.ok()) << probes.status();
  const uint32_t me = static_cast<uint32_t>(getpid());
  unsigned long long pool = 0, dev = 0;
  ASSERT_EQ(allocAsync(&pool, 300, nullptr), 0);
  ASSERT_EQ(memAlloc(&dev, 700), 0);
  ASSERT_EQ(memFree(pool), 0);
  ASSERT_EQ(freeAsync(dev, nullptr), 0);
  ASSERT_EQ(memFree(0), 0);
  auto p = procOf((*probes)->snapshot(), me);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->free_count[IG_GPU_MEM_ASYNC], 1u);
  EXPECT_EQ(p->free_bytes[IG_GPU_MEM_ASYNC], 300u);
  EXPECT_EQ(p->free_count[IG_GPU_MEM_DEVICE], 1u);
  EXPECT_EQ(p->free_bytes[IG_GPU_MEM_DEVICE], 700u);
  EXPECT_EQ(p->live_bytes[IG_GPU_MEM_ASYNC], 0);
  EXPECT_EQ(p->live_bytes[IG_GPU_MEM_DEVICE], 0);
  EXPECT_EQ(p->unknown_frees, 0u);
  dlclose(h);
}

// Without a large-allocation threshold there is no large event; failures still are events.
TEST_F(GpuProbesTest, LargeAllocEventsAreOffAtZero) {
  auto probes = attachTo(IG_STUB_CUDA_LIB, 0);
  ASSERT_TRUE(probes.ok()) << probes.status();
  Driver d(IG_STUB_CUDA_LIB);
  ASSERT_EQ(d.ready().rfind("ready", 0), 0u) << d.ready();
  const uint32_t tgid = static_cast<uint32_t>(std::stoul(d.ok("pid").at(0)));
  alloc(d, "device", 4 * kGiB);
  d.ok("fail-next");
  EXPECT_EQ(d.cmd("alloc async 64"), "fail 2");
  std::vector<GpuEvent> mine;
  for (GpuEvent& e : (*probes)->drainEvents(1000))
    if (e.tgid == tgid) mine.push_back(e);
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0].type, IG_GPU_EV_ALLOC_FAILED);
  EXPECT_EQ(mine[0].fn, IG_GPU_FN_MEM_ALLOC_ASYNC);
  EXPECT_EQ(mine[0].bytes, 64u);
}

// A private cgroup v2 directory, removed on scope exit.
class TempCgroup {
 public:
  TempCgroup() {
    const std::string mount = cgroup2Mount();
    if (mount.empty()) return;
    std::random_device rd;
    path_ = mount + "/ig-gpu-probes-test-" + std::to_string(getpid()) + "-" + std::to_string(rd());
    if (mkdir(path_.c_str(), 0755) != 0) {
      error_ = path_ + ": " + std::strerror(errno);
      path_.clear();
      return;
    }
    struct stat st {};
    if (stat(path_.c_str(), &st) == 0) id_ = st.st_ino;
  }
  ~TempCgroup() {
    if (path_.empty()) return;
    for (int i = 0; i < 100 && rmdir(path_.c_str()) != 0 && errno == EBUSY; ++i) usleep(20'000);
  }
  const std::string& path() const { return path_; }
  const std::string& error() const { return error_; }
  uint64_t id() const { return id_; }

 private:
  std::string path_, error_;
  uint64_t id_ = 0;
};

TEST_F(GpuProbesTest, ChildInAnotherCgroupIsCountedThere) {
  TempCgroup cg;
  if (cg.path().empty())
    GTEST_SKIP() << "needs a writable cgroup v2 hierarchy"
                 << (cg.error().empty() ? "" : " (" + cg.error() + ")");
  auto probes = attachTo(IG_STUB_CUDA_LIB);
  ASSERT_TRUE(probes.ok()) << probes.status();
  GpuProbes& g = **probes;
  {
    Driver d(IG_STUB_CUDA_LIB);
    ASSERT_EQ(d.ready().rfind("ready", 0), 0u) << d.ready();
    const uint32_t parent = static_cast<uint32_t>(std::stoul(d.ok("pid").at(0)));
    std::vector<std::string> t = d.ok("child " + cg.path() + " 65536 7");
    ASSERT_EQ(t.size(), 1u);
    const uint32_t child = static_cast<uint32_t>(std::stoul(t[0]));
    ASSERT_NE(child, parent);

    GpuSnapshot s = g.snapshot();
    auto c = procOf(s, child);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->cgroup_id, cg.id());
    EXPECT_EQ(c->alloc_count[IG_GPU_MEM_DEVICE], 1u);
    EXPECT_EQ(c->live_bytes[IG_GPU_MEM_DEVICE], 65536);
    EXPECT_EQ(c->launches, 7u);
    EXPECT_EQ(c->syncs, 1u);
    EXPECT_EQ(c->timed_syncs, 1u);
    EXPECT_FALSE(procOf(s, parent).has_value());  // the parent did nothing probed
    auto cgs = cgroupOf(s, cg.id());
    ASSERT_TRUE(cgs.has_value());
    EXPECT_EQ(cgs->live_bytes[IG_GPU_MEM_DEVICE], 65536);
    EXPECT_EQ(cgs->alloc_count, 1u);
    EXPECT_EQ(cgs->free_count, 0u);
    EXPECT_EQ(cgs->launches, 7u);
    EXPECT_EQ(cgs->timed_syncs, 1u);
    EXPECT_EQ(cgs->sync_ns_sum, c->sync_ns_sum);
    EXPECT_EQ(cgs->deviceBytes(), 65536);

    d.ok("child-exit");  // the child frees and exits
    s = g.snapshot();
    cgs = cgroupOf(s, cg.id());
    ASSERT_TRUE(cgs.has_value());
    EXPECT_EQ(cgs->live_bytes[IG_GPU_MEM_DEVICE], 0);
    EXPECT_EQ(cgs->free_count, 1u);
    c = procOf(s, child);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->free_bytes[IG_GPU_MEM_DEVICE], 65536u);
    g.forget(child);
    s = g.snapshot();
    EXPECT_FALSE(procOf(s, child).has_value());
    EXPECT_TRUE(cgroupOf(s, cg.id()).has_value());  // the cgroup's figures stay
  }
}

}  // namespace
}  // namespace infergate::gpu
