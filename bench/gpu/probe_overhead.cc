// What the GPU probes (gpu/gpu_probes.bpf.c) add to a CUDA driver call: the stub libcuda.so.1
// (tests/gpu) is dlopen()ed, cuLaunchKernel is called N times and a cuMemAlloc_v2/cuMemFree_v2
// pair M times, without probes and then with GpuProbes attached, in alternating rounds. Time is
// this thread's CPU time (user + system: a uprobe's cost is spent in the kernel on the calling
// thread), so other load on the machine does not count. Prints figures only:
//   ns per call (median of the rounds), ns added per call, and the CPU share of one core the
//   probes cost at 10,000 launches/s (= added ns x 10,000 / 1e9).
//
//   gpu_probe_overhead [--lib PATH] [--launches N] [--pairs M] [--rounds R]
// Needs root (BPF, uprobes). The stub is copied to a private file first, so probes other
// processes attach to the shared stub do not touch the baseline.
//
// Most of the added time is the uprobe mechanics, not the BPF programs (a last round with the
// kernel's bpf_stats on says how much is the programs'), and it depends on the probed
// function's first instruction: one the kernel emulates (push, nop, call, jmp: one trap) costs
// far less than one it must single-step out of line (e.g. `mov $imm,%edi`: two traps). Check
// with `objdump -d LIB | grep -A2 '<cuLaunchKernel>:'`.

#include <dlfcn.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "gpu/gpu_probes.h"
#include "ig_gpu_probes.skel.h"

namespace {

using CUresult = int;
using LaunchFn = CUresult (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, void*, void**, void**);
using AllocFn = CUresult (*)(unsigned long long*, size_t);
using FreeFn = CUresult (*)(unsigned long long);

uint64_t threadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
}

struct Api {
  LaunchFn launch = nullptr;
  AllocFn alloc = nullptr;
  FreeFn free = nullptr;
};

// ns of CPU per cuLaunchKernel call.
double launchRound(const Api& api, uint64_t n) {
  int dummy = 0;
  const uint64_t t0 = threadCpuNs();
  for (uint64_t i = 0; i < n; ++i)
    api.launch(&dummy, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr);
  return static_cast<double>(threadCpuNs() - t0) / static_cast<double>(n);
}

// ns of CPU per cuMemAlloc_v2 + cuMemFree_v2 pair.
double pairRound(const Api& api, uint64_t n) {
  const uint64_t t0 = threadCpuNs();
  for (uint64_t i = 0; i < n; ++i) {
    unsigned long long p = 0;
    if (api.alloc(&p, 4096) == 0) api.free(p);
  }
  return static_cast<double>(threadCpuNs() - t0) / static_cast<double>(n);
}

uint64_t parseCount(const char* s, const char* what) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (!*s || *end || v == 0) {
    std::fprintf(stderr, "gpu_probe_overhead: %s must be a positive integer, not '%s'\n", what, s);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef IG_STUB_CUDA_LIB
  std::string lib = IG_STUB_CUDA_LIB;
#else
  std::string lib;
#endif
  uint64_t launches = 2'000'000, pairs = 200'000, rounds = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--lib" && i + 1 < argc) {
      lib = argv[++i];
    } else if (a == "--launches" && i + 1 < argc) {
      launches = parseCount(argv[++i], "--launches");
    } else if (a == "--pairs" && i + 1 < argc) {
      pairs = parseCount(argv[++i], "--pairs");
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = parseCount(argv[++i], "--rounds");
    } else {
      std::fprintf(stderr,
                   "usage: %s [--lib PATH] [--launches N] [--pairs M] [--rounds R] (root)\n",
                   argv[0]);
      return 2;
    }
  }
  if (lib.empty()) {
    std::fprintf(stderr, "gpu_probe_overhead: no stub library: pass --lib PATH/libcuda.so.1\n");
    return 2;
  }
  if (geteuid() != 0) {
    std::fprintf(stderr, "gpu_probe_overhead: needs root (BPF programs and uprobes)\n");
    return 2;
  }
  // A private copy (its own inode): probes that other processes attach to the shared stub
  // (tests running next to this) must not slow the baseline.
  char dir[] = "/tmp/ig-gpu-bench-XXXXXX";
  if (!mkdtemp(dir)) {
    std::perror("gpu_probe_overhead: mkdtemp");
    return 1;
  }
  const std::string copy = std::string(dir) + "/libcuda.so.1";
  {
    std::ifstream in(lib, std::ios::binary);
    std::ofstream out(copy, std::ios::binary);
    out << in.rdbuf();
    if (!in || !out) {
      std::fprintf(stderr, "gpu_probe_overhead: cannot copy %s to %s\n", lib.c_str(), copy.c_str());
      return 1;
    }
  }
  lib = copy;
  struct Cleanup {
    std::string file, dir;
    ~Cleanup() {
      unlink(file.c_str());
      rmdir(dir.c_str());
    }
  } cleanup{copy, dir};
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    std::fprintf(stderr, "gpu_probe_overhead: dlopen %s: %s\n", lib.c_str(), dlerror());
    return 1;
  }
  Api api;
  api.launch = reinterpret_cast<LaunchFn>(dlsym(h, "cuLaunchKernel"));
  api.alloc = reinterpret_cast<AllocFn>(dlsym(h, "cuMemAlloc_v2"));
  api.free = reinterpret_cast<FreeFn>(dlsym(h, "cuMemFree_v2"));
  if (!api.launch || !api.alloc || !api.free) {
    std::fprintf(stderr,
                 "gpu_probe_overhead: %s lacks cuLaunchKernel, cuMemAlloc_v2 or cuMemFree_v2\n",
                 lib.c_str());
    return 1;
  }

  utsname u{};
  uname(&u);
  std::printf(
      "gpu_probe_overhead: %s, kernel %s, %lu launches and %lu alloc/free pairs per round, "
      "%lu rounds (thread CPU time)\n",
      lib.c_str(), u.release, static_cast<unsigned long>(launches),
      static_cast<unsigned long>(pairs), static_cast<unsigned long>(rounds));
  // Warm-up: page in the stub, settle the frequency.
  launchRound(api, launches / 10 + 1);
  pairRound(api, pairs / 10 + 1);

  std::vector<double> base_launch, probed_launch, base_pair, probed_pair;
  for (uint64_t r = 0; r < rounds; ++r) {
    base_launch.push_back(launchRound(api, launches));
    base_pair.push_back(pairRound(api, pairs));
    infergate::gpu::GpuProbeOptions o;
    o.library = lib;
    auto probes = infergate::gpu::GpuProbes::attach(o);
    if (!probes.ok()) {
      std::fprintf(stderr, "gpu_probe_overhead: %s\n", probes.status().ToString().c_str());
      return 1;  // the copy stays in /tmp only if the process dies; Cleanup runs here
    }
    probed_launch.push_back(launchRound(api, launches));
    probed_pair.push_back(pairRound(api, pairs));
    // the probes saw every call: the measurement is of the real path
    infergate::gpu::GpuSnapshot s = (*probes)->snapshot();
    const uint32_t me = static_cast<uint32_t>(getpid());
    for (const auto& p : s.procs) {
      if (p.tgid != me) continue;
      if (p.launches != launches || p.alloc_count[IG_GPU_MEM_DEVICE] != pairs ||
          p.free_count[IG_GPU_MEM_DEVICE] != pairs)
        std::fprintf(stderr,
                     "gpu_probe_overhead: round %lu: the probes counted %lu launches, %lu "
                     "allocs, %lu frees (expected %lu, %lu, %lu)\n",
                     static_cast<unsigned long>(r), static_cast<unsigned long>(p.launches),
                     static_cast<unsigned long>(p.alloc_count[IG_GPU_MEM_DEVICE]),
                     static_cast<unsigned long>(p.free_count[IG_GPU_MEM_DEVICE]),
                     static_cast<unsigned long>(launches), static_cast<unsigned long>(pairs),
                     static_cast<unsigned long>(pairs));
    }
    std::printf("round %lu: cuLaunchKernel %.1f -> %.1f ns, alloc+free pair %.1f -> %.1f ns\n",
                static_cast<unsigned long>(r), base_launch.back(), probed_launch.back(),
                base_pair.back(), probed_pair.back());
    std::fflush(stdout);
  }
  // One more round with the kernel's BPF run-time statistics on (they add two clock reads per
  // run, so not in the rounds above): how much of the added time is the programs themselves,
  // the rest being the uprobe mechanics (breakpoint trap, return trampoline).
  double prog_launch = -1, prog_pair = -1;
  {
    const int stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
    infergate::gpu::GpuProbeOptions o;
    o.library = lib;
    auto probes = infergate::gpu::GpuProbes::attach(o);
    if (stats_fd >= 0 && probes.ok()) {
      ig_gpu_probes* skel = (*probes)->skeleton();
      auto progNs = [&]() {
        uint64_t ns = 0;
        for (bpf_program* p : {skel->progs.ig_gpu_enter, skel->progs.ig_gpu_exit}) {
          bpf_prog_info info{};
          uint32_t len = sizeof(info);
          if (bpf_obj_get_info_by_fd(bpf_program__fd(p), &info, &len) == 0) ns += info.run_time_ns;
        }
        return ns;
      };
      uint64_t before = progNs();
      launchRound(api, launches);
      prog_launch = static_cast<double>(progNs() - before) / static_cast<double>(launches);
      before = progNs();
      pairRound(api, pairs);
      prog_pair = static_cast<double>(progNs() - before) / static_cast<double>(pairs);
    }
    if (stats_fd >= 0) close(stats_fd);
  }

  const double bl = median(base_launch), pl = median(probed_launch);
  const double bp = median(base_pair), pp = median(probed_pair);
  std::printf("cuLaunchKernel: %.1f ns/call without probes, %.1f ns/call with, %.1f ns added\n", bl,
              pl, pl - bl);
  std::printf(
      "cuMemAlloc_v2+cuMemFree_v2: %.1f ns/pair without probes, %.1f ns/pair with, %.1f ns "
      "added\n",
      bp, pp, pp - bp);
  std::printf("CPU at 10,000 launches/s: %.3f%% of one core\n", (pl - bl) * 10'000 / 1e9 * 100);
  if (prog_launch >= 0)
    std::printf(
        "of which the BPF programs' own run time (kernel bpf_stats): %.1f ns per launch, "
        "%.1f ns per alloc+free pair\n",
        prog_launch, prog_pair);
  return 0;
}
