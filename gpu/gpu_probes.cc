#include "gpu/gpu_probes.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <mutex>
#include <tuple>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ig_gpu_probes.skel.h"

namespace infergate::gpu {
namespace {

int libbpfPrint(enum libbpf_print_level level, const char* fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  int n = vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string line(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) vsnprintf(line.data(), line.size() + 1, fmt, args);
  while (!line.empty() && line.back() == '\n') line.pop_back();
  if (level == LIBBPF_WARN) {
    spdlog::warn("libbpf: {}", line);
  } else {
    spdlog::debug("libbpf: {}", line);
  }
  return 0;
}

void setupLibbpf() {
  static std::once_flag once;
  std::call_once(once, [] { libbpf_set_print(libbpfPrint); });
}

// BPF_TRACE_UPROBE_MULTI (enum bpf_attach_type, Linux 6.6): not in Debian 12's uapi headers.
constexpr auto kUprobeMultiAttach = static_cast<enum bpf_attach_type>(48);

std::string errnoText(int err) {
  if (err < 0) err = -err;
  return fmt::format("{} ({})", std::strerror(err), err);
}

uint64_t monotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

// What is probed in each driver function: the base symbol (fnName), whether its result is
// needed (a return probe), and its per-thread-default-stream variant, if it has one.
struct ProbedFunction {
  int fn;
  bool returns;
  const char* ptsz;
};
constexpr ProbedFunction kProbed[] = {
    {IG_GPU_FN_MEM_ALLOC, true, nullptr},
    {IG_GPU_FN_MEM_FREE, true, nullptr},
    {IG_GPU_FN_MEM_ALLOC_ASYNC, true, "cuMemAllocAsync_ptsz"},
    {IG_GPU_FN_MEM_FREE_ASYNC, true, "cuMemFreeAsync_ptsz"},
    {IG_GPU_FN_MEM_ALLOC_MANAGED, true, nullptr},
    {IG_GPU_FN_MEM_CREATE, true, nullptr},
    {IG_GPU_FN_MEM_RELEASE, true, nullptr},
    {IG_GPU_FN_MEM_HOST_ALLOC, true, nullptr},
    {IG_GPU_FN_MEM_FREE_HOST, true, nullptr},
    {IG_GPU_FN_LAUNCH_KERNEL, false, "cuLaunchKernel_ptsz"},
    {IG_GPU_FN_LAUNCH_KERNEL_EX, false, "cuLaunchKernelEx_ptsz"},
    {IG_GPU_FN_GRAPH_LAUNCH, false, "cuGraphLaunch_ptsz"},
    {IG_GPU_FN_STREAM_SYNC, true, "cuStreamSynchronize_ptsz"},
    {IG_GPU_FN_CTX_SYNC, true, nullptr},
    {IG_GPU_FN_EVENT_SYNC, true, nullptr},
};
static_assert(sizeof(kProbed) / sizeof(kProbed[0]) == IG_GPU_FN_MAX, "kProbed out of date");

// Every key of a hash map (get_next_key walk), at most `bound` of them. A walk that races with
// deletions may restart from the beginning; `bound` keeps it finite.
template <typename Key>
std::vector<Key> mapKeys(int fd, size_t bound) {
  std::vector<Key> keys;
  Key key{}, next{};
  const Key* prev = nullptr;
  while (keys.size() < bound && bpf_map_get_next_key(fd, prev, &next) == 0) {
    keys.push_back(next);
    key = next;
    prev = &key;
  }
  return keys;
}

std::string commOf(const char* comm) { return std::string(comm, strnlen(comm, IG_GPU_COMM_LEN)); }

ProcStats procFrom(uint32_t tgid, const ig_gpu_proc& v) {
  ProcStats p;
  p.tgid = tgid;
  p.cgroup_id = v.cgroup_id;
  p.comm = commOf(v.comm);
  p.first_ns = v.first_ns;
  p.last_ns = v.last_ns;
  for (int k = 0; k < kMemKinds; ++k) {
    p.live_bytes[k] = static_cast<int64_t>(v.live_bytes[k]);
    p.alloc_count[k] = v.alloc_count[k];
    p.alloc_bytes[k] = v.alloc_bytes[k];
    p.free_count[k] = v.free_count[k];
    p.free_bytes[k] = v.free_bytes[k];
  }
  p.alloc_failures = v.alloc_failures;
  p.untracked_allocs = v.untracked_allocs;
  p.unknown_frees = v.unknown_frees;
  p.launches = v.launches;
  p.graph_launches = v.graph_launches;
  p.syncs = v.syncs;
  p.timed_syncs = v.timed_syncs;
  p.sync_ns_sum = v.sync_ns_sum;
  for (int b = 0; b < kSyncBuckets; ++b) p.sync_hist[b] = v.sync_hist[b];
  return p;
}

CgroupStats cgroupFrom(uint64_t id, const ig_gpu_cgroup& v) {
  CgroupStats c;
  c.cgroup_id = id;
  for (int k = 0; k < kMemKinds; ++k) c.live_bytes[k] = static_cast<int64_t>(v.live_bytes[k]);
  c.alloc_count = v.alloc_count;
  c.free_count = v.free_count;
  c.alloc_failures = v.alloc_failures;
  c.launches = v.launches;
  c.graph_launches = v.graph_launches;
  c.timed_syncs = v.timed_syncs;
  c.sync_ns_sum = v.sync_ns_sum;
  return c;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuProbes>> GpuProbes::attach(const GpuProbeOptions& options) {
  if (options.library.empty())
    return absl::InvalidArgumentError(
        "no CUDA driver library to probe: set gpu.library to the path of libcuda.so.1");
  // The library first: a node without the driver is told so, whatever our privileges.
  absl::StatusOr<std::vector<std::string>> functions = elfDynamicFunctions(options.library);
  if (!functions.ok()) {
    if (absl::IsNotFound(functions.status()))
      return absl::NotFoundError(fmt::format(
          "the CUDA driver library cannot be read ({}): install the NVIDIA driver or set "
          "gpu.library to the path of libcuda.so.1",
          std::string(functions.status().message())));
    return absl::InvalidArgumentError(
        fmt::format("{}: set gpu.library to the path of the CUDA driver library, libcuda.so.1",
                    std::string(functions.status().message())));
  }
  absl::StatusOr<std::vector<ElfFunction>> offsets = elfDynamicFunctionOffsets(options.library);
  // One uprobe_multi link for the entry probes and one for the return probes (Linux 6.6+):
  // detaching releases every probe of a link after one grace period, where a link per probe
  // waits one each (~0.1 s: seconds at stop). Older kernels refuse the program's attach type,
  // and then each probe gets a link of its own.
  if (offsets.ok() && options.multi_link) {
    std::unique_ptr<GpuProbes> multi(new GpuProbes(options));
    multi->report_.library = options.library;
    absl::Status s = multi->load(/*multi=*/true);
    if (s.ok()) s = multi->attachMulti(*offsets);
    if (s.ok() || absl::IsPermissionDenied(s) || absl::IsFailedPrecondition(s)) {
      if (!s.ok()) return s;
      return multi;
    }
    spdlog::debug("gpu: uprobe_multi links unavailable ({}): one link per probe",
                  std::string(s.message()));
  }
  std::unique_ptr<GpuProbes> probes(new GpuProbes(options));
  probes->report_.library = options.library;
  if (auto s = probes->load(/*multi=*/false); !s.ok()) return s;
  if (auto s = probes->attachAll(*functions); !s.ok()) return s;
  return probes;
}

absl::Status GpuProbes::load(bool multi) {
  setupLibbpf();
  skel_ = ig_gpu_probes__open();
  if (!skel_)
    return absl::InternalError(fmt::format("opening the GPU probe skeleton: {}", errnoText(errno)));
  skel_->rodata->large_alloc_bytes = options_.large_alloc_bytes;
  if (multi) {
    bpf_program__set_expected_attach_type(skel_->progs.ig_gpu_enter, kUprobeMultiAttach);
    bpf_program__set_expected_attach_type(skel_->progs.ig_gpu_exit, kUprobeMultiAttach);
    // The first try: an old kernel's refusal is expected, not worth a warning.
    libbpf_set_print(nullptr);
  }
  int err = ig_gpu_probes__load(skel_);
  if (multi) libbpf_set_print(libbpfPrint);
  if (err && multi && err != -EPERM) {
    return absl::UnimplementedError(fmt::format("loading for uprobe_multi: {}", errnoText(err)));
  }
  if (err) {
    if (err == -EPERM || err == -EACCES || errno == EPERM)
      return absl::PermissionDeniedError(
          "loading the GPU probes was refused (EPERM): run as root or grant CAP_BPF and "
          "CAP_PERFMON, and check kernel.unprivileged_bpf_disabled");
    return absl::InternalError(fmt::format(
        "loading the GPU probes failed: {} (run with log level debug for the verifier log)",
        errnoText(err)));
  }
  ring_ =
      ring_buffer__new(bpf_map__fd(skel_->maps.ig_gpu_events), &GpuProbes::onEvent, this, nullptr);
  if (!ring_)
    return absl::InternalError(
        fmt::format("opening the GPU probes' ring buffer: {}", errnoText(errno)));
  return absl::OkStatus();
}

absl::Status GpuProbes::attachAll(const std::vector<std::string>& functions) {
  auto present = [&](const std::string& name) {
    return std::binary_search(functions.begin(), functions.end(), name);
  };

  // Return probes first: an entry kept for a return probe that is not there yet would wait
  // in ig_gpu_calls for nothing.
  std::string last_error;
  auto attachOne = [&](const std::string& symbol, int fn, bool retprobe) -> absl::Status {
    LIBBPF_OPTS(bpf_uprobe_opts, uo, .bpf_cookie = static_cast<__u64>(fn), .retprobe = retprobe,
                .func_name = symbol.c_str());
    bpf_program* prog = retprobe ? skel_->progs.ig_gpu_exit : skel_->progs.ig_gpu_enter;
    bpf_link* link =
        bpf_program__attach_uprobe_opts(prog, options_.pid, options_.library.c_str(), 0, &uo);
    if (!link) {
      const int e = errno;
      if (e == EPERM || e == EACCES)
        return absl::PermissionDeniedError(fmt::format(
            "attaching a uprobe to {} in {} was refused ({}): run as root or grant CAP_BPF and "
            "CAP_PERFMON",
            symbol, options_.library, errnoText(e)));
      last_error = fmt::format("{}: {}", symbol, errnoText(e));
      spdlog::warn("gpu: cannot attach the {} probe to {} in {}: {}", retprobe ? "return" : "entry",
                   symbol, options_.library, errnoText(e));
      return absl::UnknownError(last_error);
    }
    links_.push_back(link);
    return absl::OkStatus();
  };

  struct Target {
    std::string symbol;
    int fn;
    bool returns;
  };
  std::vector<Target> targets;
  for (const ProbedFunction& p : kProbed) {
    const std::string base = fnName(p.fn);
    if (present(base)) {
      targets.push_back({base, p.fn, p.returns});
    } else {
      report_.missing.push_back(base);
    }
    if (p.ptsz && present(p.ptsz)) targets.push_back({p.ptsz, p.fn, p.returns});
  }
  std::vector<bool> ok(targets.size(), true);
  for (size_t i = 0; i < targets.size(); ++i) {
    if (!targets[i].returns) continue;
    absl::Status s = attachOne(targets[i].symbol, targets[i].fn, true);
    if (absl::IsPermissionDenied(s)) return s;
    ok[i] = s.ok();
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    if (!ok[i]) continue;  // without its return probe the entry would count nothing
    absl::Status s = attachOne(targets[i].symbol, targets[i].fn, false);
    if (absl::IsPermissionDenied(s)) return s;
    if (s.ok()) report_.attached.push_back(targets[i].symbol);
  }
  if (report_.attached.empty()) {
    report_.reason = last_error.empty()
                         ? "none of the probed CUDA driver functions is in the library"
                         : "no probe could be attached (" + last_error + ")";
    return absl::FailedPreconditionError(fmt::format(
        "no GPU probe could be attached to {}: {}; set gpu.library to the CUDA driver library, "
        "libcuda.so.1",
        options_.library, report_.reason));
  }
  if (!report_.missing.empty())
    spdlog::info("gpu: {} lacks {} (not probed)", options_.library,
                 fmt::join(report_.missing, ", "));
  report_.active = true;
  return absl::OkStatus();
}

absl::Status GpuProbes::attachMulti(const std::vector<ElfFunction>& functions) {
  auto find = [&](const std::string& name) -> const ElfFunction* {
    auto it = std::lower_bound(functions.begin(), functions.end(), name,
                               [](const ElfFunction& f, const std::string& n) { return f.name < n; });
    return it != functions.end() && it->name == name ? &*it : nullptr;
  };
  struct Target {
    std::string symbol;
    uint64_t offset;
    int fn;
    bool returns;
  };
  std::vector<Target> targets;
  std::vector<std::string> missing;
  for (const ProbedFunction& p : kProbed) {
    const std::string base = fnName(p.fn);
    const ElfFunction* f = find(base);
    if (f == nullptr) {
      missing.push_back(base);
    } else if (f->offset == 0) {
      return absl::UnimplementedError(fmt::format("{}: no file offset", base));
    } else {
      targets.push_back({base, f->offset, p.fn, p.returns});
    }
    if (p.ptsz) {
      const ElfFunction* v = find(p.ptsz);
      if (v != nullptr && v->offset != 0) targets.push_back({p.ptsz, v->offset, p.fn, p.returns});
    }
  }
  if (targets.empty()) {
    report_.missing = missing;
    report_.reason = "none of the probed CUDA driver functions is in the library";
    return absl::FailedPreconditionError(fmt::format(
        "no GPU probe could be attached to {}: {}; set gpu.library to the CUDA driver library, "
        "libcuda.so.1",
        options_.library, report_.reason));
  }
  // Return probes first (an entry kept for a return probe not there yet would wait in
  // ig_gpu_calls for nothing).
  for (bool returns : {true, false}) {
    std::vector<uint64_t> offs, cookies;
    for (const Target& t : targets) {
      if (returns && !t.returns) continue;
      offs.push_back(t.offset);
      cookies.push_back(static_cast<uint64_t>(t.fn));
    }
    if (offs.empty()) continue;
    bpf_program* prog = returns ? skel_->progs.ig_gpu_exit : skel_->progs.ig_gpu_enter;
    // union bpf_attr's link_create for uprobe_multi (Linux 6.6 uapi; Debian 12's headers
    // predate it): the fields up to `pid`, the rest zero.
    struct {
      uint32_t prog_fd, target_fd, attach_type, flags;
      uint64_t path, offsets, ref_ctr_offsets, cookies;
      uint32_t cnt, multi_flags, pid, pad;
    } attr{};
    static_assert(sizeof(attr) == 64, "link_create uprobe_multi layout");
    attr.prog_fd = static_cast<uint32_t>(bpf_program__fd(prog));
    attr.attach_type = kUprobeMultiAttach;
    attr.path = reinterpret_cast<uint64_t>(options_.library.c_str());
    attr.offsets = reinterpret_cast<uint64_t>(offs.data());
    attr.cookies = reinterpret_cast<uint64_t>(cookies.data());
    attr.cnt = static_cast<uint32_t>(offs.size());
    attr.multi_flags = returns ? 1u /* BPF_F_UPROBE_MULTI_RETURN */ : 0u;
    attr.pid = options_.pid > 0 ? static_cast<uint32_t>(options_.pid) : 0;
    const int fd = static_cast<int>(syscall(__NR_bpf, BPF_LINK_CREATE, &attr, sizeof(attr)));
    if (fd < 0) {
      const int e = errno;
      for (int f : multi_links_) close(f);
      multi_links_.clear();
      if (e == EPERM || e == EACCES)
        return absl::PermissionDeniedError(fmt::format(
            "attaching the uprobes to {} was refused ({}): run as root or grant CAP_BPF and "
            "CAP_PERFMON",
            options_.library, errnoText(e)));
      return absl::UnimplementedError(fmt::format("uprobe_multi link: {}", errnoText(e)));
    }
    multi_links_.push_back(fd);
  }
  report_.missing = missing;
  for (const Target& t : targets) report_.attached.push_back(t.symbol);
  if (!report_.missing.empty())
    spdlog::info("gpu: {} lacks {} (not probed)", options_.library,
                 fmt::join(report_.missing, ", "));
  report_.active = true;
  return absl::OkStatus();
}

GpuProbes::~GpuProbes() {
  for (int fd : multi_links_) close(fd);
  multi_links_.clear();
  // Each uprobe's release waits for RCU grace periods in the kernel (~0.1 s each, serialised
  // there: releasing from several threads does not help), so detaching takes a few seconds.
  for (bpf_link* l : links_) bpf_link__destroy(l);
  links_.clear();
  if (ring_) ring_buffer__free(ring_);
  if (skel_) ig_gpu_probes__destroy(skel_);
}

int GpuProbes::onEvent(void* ctx, void* data, size_t size) {
  auto* self = static_cast<GpuProbes*>(ctx);
  if (size < sizeof(ig_gpu_event)) return 0;
  ig_gpu_event e;
  std::memcpy(&e, data, sizeof(e));
  GpuEvent out;
  out.type = static_cast<int>(e.type);
  out.fn = static_cast<int>(e.fn);
  out.tgid = e.tgid;
  out.tid = e.tid;
  out.cgroup_id = e.cgroup_id;
  out.bytes = e.bytes;
  out.ptr = e.ptr;
  out.ts_ns = e.ts_ns;
  out.result = e.result;
  try {
    out.comm = commOf(e.comm);
    if (self->events_.size() >= kEventQueue) {
      self->events_.pop_front();
      ++self->events_dropped_;
    }
    self->events_.push_back(std::move(out));
  } catch (...) {  // nothing throws across the C callback
    ++self->events_dropped_;
  }
  return 0;
}

GpuSnapshot GpuProbes::snapshot() {
  GpuSnapshot snap;
  snap.taken_ns = monotonicNs();
  const int procs_fd = bpf_map__fd(skel_->maps.ig_gpu_procs);
  for (uint32_t tgid : mapKeys<uint32_t>(procs_fd, 2 * IG_GPU_MAX_PROCS)) {
    ig_gpu_proc v{};
    if (bpf_map_lookup_elem(procs_fd, &tgid, &v) == 0) snap.procs.push_back(procFrom(tgid, v));
  }
  std::sort(snap.procs.begin(), snap.procs.end(),
            [](const ProcStats& a, const ProcStats& b) { return a.tgid < b.tgid; });
  snap.procs.erase(
      std::unique(snap.procs.begin(), snap.procs.end(),
                  [](const ProcStats& a, const ProcStats& b) { return a.tgid == b.tgid; }),
      snap.procs.end());

  const int cg_fd = bpf_map__fd(skel_->maps.ig_gpu_cgroups);
  for (uint64_t id : mapKeys<uint64_t>(cg_fd, 2 * IG_GPU_MAX_CGROUPS)) {
    ig_gpu_cgroup v{};
    if (bpf_map_lookup_elem(cg_fd, &id, &v) == 0) snap.cgroups.push_back(cgroupFrom(id, v));
  }
  std::sort(snap.cgroups.begin(), snap.cgroups.end(),
            [](const CgroupStats& a, const CgroupStats& b) { return a.cgroup_id < b.cgroup_id; });
  snap.cgroups.erase(std::unique(snap.cgroups.begin(), snap.cgroups.end(),
                                 [](const CgroupStats& a, const CgroupStats& b) {
                                   return a.cgroup_id == b.cgroup_id;
                                 }),
                     snap.cgroups.end());

  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu > 0) {
    constexpr size_t kStride = (sizeof(ig_gpu_stats) + 7) / 8 * 8;
    std::vector<uint8_t> buf(kStride * static_cast<size_t>(ncpu));
    uint32_t zero = 0;
    if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.ig_gpu_stats), &zero, buf.data()) == 0) {
      for (int c = 0; c < ncpu; ++c) {
        ig_gpu_stats s;
        std::memcpy(&s, buf.data() + kStride * static_cast<size_t>(c), sizeof(s));
        for (int f = 0; f < IG_GPU_FN_MAX; ++f) snap.stats.calls[f] += s.calls[f];
        snap.stats.proc_map_full += s.proc_map_full;
        snap.stats.cgroup_map_full += s.cgroup_map_full;
        snap.stats.alloc_map_full += s.alloc_map_full;
        snap.stats.call_map_full += s.call_map_full;
        snap.stats.pending_map_full += s.pending_map_full;
        snap.stats.ringbuf_full += s.ringbuf_full;
        snap.stats.returns_unmatched += s.returns_unmatched;
      }
    }
  }
  return snap;
}

std::vector<LiveAlloc> GpuProbes::liveAllocs(uint32_t tgid, size_t limit) {
  std::vector<LiveAlloc> out;
  if (limit == 0) return out;
  const int fd = bpf_map__fd(skel_->maps.ig_gpu_allocs);
  std::vector<ig_gpu_alloc_key> keys = mapKeys<ig_gpu_alloc_key>(fd, 2 * IG_GPU_MAX_ALLOCS);
  auto keyTie = [](const ig_gpu_alloc_key& k) { return std::tie(k.tgid, k.kind, k.ptr); };
  std::sort(
      keys.begin(), keys.end(),  // a walk restarted by deletions repeats keys
      [&](const ig_gpu_alloc_key& a, const ig_gpu_alloc_key& b) { return keyTie(a) < keyTie(b); });
  keys.erase(std::unique(keys.begin(), keys.end(),
                         [&](const ig_gpu_alloc_key& a, const ig_gpu_alloc_key& b) {
                           return keyTie(a) == keyTie(b);
                         }),
             keys.end());
  for (const ig_gpu_alloc_key& k : keys) {
    if (tgid != 0 && k.tgid != tgid) continue;
    ig_gpu_alloc v{};
    if (bpf_map_lookup_elem(fd, &k, &v) != 0) continue;
    LiveAlloc a;
    a.tgid = k.tgid;
    a.kind = static_cast<int>(k.kind);
    a.ptr = k.ptr;
    a.bytes = v.bytes;
    a.ts_ns = v.ts_ns;
    a.cgroup_id = v.cgroup_id;
    out.push_back(a);
  }
  auto older = [](const LiveAlloc& a, const LiveAlloc& b) {
    if (a.ts_ns != b.ts_ns) return a.ts_ns < b.ts_ns;
    if (a.tgid != b.tgid) return a.tgid < b.tgid;
    return a.ptr < b.ptr;
  };
  if (out.size() > limit) {
    std::partial_sort(out.begin(), out.begin() + static_cast<ptrdiff_t>(limit), out.end(), older);
    out.resize(limit);
  } else {
    std::sort(out.begin(), out.end(), older);
  }
  return out;
}

std::vector<GpuEvent> GpuProbes::drainEvents(size_t limit) {
  if (ring_) ring_buffer__consume(ring_);
  std::vector<GpuEvent> out;
  while (!events_.empty() && out.size() < limit) {
    out.push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return out;
}

void GpuProbes::forget(uint32_t tgid) {
  if (tgid == 0) return;
  bpf_map_delete_elem(bpf_map__fd(skel_->maps.ig_gpu_procs), &tgid);
  bpf_map_delete_elem(bpf_map__fd(skel_->maps.ig_gpu_pending), &tgid);
  const int allocs_fd = bpf_map__fd(skel_->maps.ig_gpu_allocs);
  for (const ig_gpu_alloc_key& k : mapKeys<ig_gpu_alloc_key>(allocs_fd, 2 * IG_GPU_MAX_ALLOCS))
    if (k.tgid == tgid) bpf_map_delete_elem(allocs_fd, &k);
  const int calls_fd = bpf_map__fd(skel_->maps.ig_gpu_calls);
  for (uint64_t k : mapKeys<uint64_t>(calls_fd, 2 * IG_GPU_MAX_CALLS))
    if (static_cast<uint32_t>(k >> 32) == tgid) bpf_map_delete_elem(calls_fd, &k);
}

}  // namespace infergate::gpu
