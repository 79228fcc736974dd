#include "tools/impair/impairer.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <net/if.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "ig_impair.skel.h"

namespace infergate::impair {
namespace {

// Pin file names inside an attachment's directory; the only place they are spelled.
constexpr const char* kPinConfig = "config";
constexpr const char* kPinSeq = "seq";
constexpr const char* kPinHeld = "held";
constexpr const char* kPinCounters = "counters";
constexpr const char* kAllPins[] = {kPinConfig, kPinSeq, kPinHeld, kPinCounters};

absl::Status errnoStatus(int err, const std::string& what) {
  err = err < 0 ? -err : err;
  std::string msg = fmt::format("{}: {}", what, std::strerror(err));
  if (err == EPERM || err == EACCES) return absl::PermissionDeniedError(msg + " (needs root or CAP_BPF+CAP_NET_ADMIN)");
  if (err == ENOENT || err == ENODEV) return absl::NotFoundError(msg);
  return absl::InternalError(msg);
}

absl::StatusOr<int> ifindexOf(const std::string& ifname) {
  unsigned idx = if_nametoindex(ifname.c_str());
  if (idx == 0) return absl::NotFoundError(fmt::format("no interface named '{}' in this network namespace", ifname));
  return static_cast<int>(idx);
}

bpf_tc_attach_point attachPoint(Hook hook) { return hook == Hook::kIngress ? BPF_TC_INGRESS : BPF_TC_EGRESS; }

// An fd of a pinned map of an attachment, closed on scope exit.
class PinnedMap {
 public:
  static absl::StatusOr<PinnedMap> open(const std::string& dir, const char* name) {
    std::string path = dir + "/" + name;
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0) {
      int err = errno;
      if (err == ENOENT)
        return absl::NotFoundError(fmt::format("{} not found: nothing attached there (run `infergate-impair attach`)", path));
      return errnoStatus(err, "opening " + path);
    }
    return PinnedMap(fd);
  }
  PinnedMap(PinnedMap&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  PinnedMap(const PinnedMap&) = delete;
  ~PinnedMap() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }

 private:
  explicit PinnedMap(int fd) : fd_(fd) {}
  int fd_;
};

void unpinAll(const std::string& dir) {
  for (const char* name : kAllPins) unlink((dir + "/" + name).c_str());
}

}  // namespace

const char* counterName(int counter) {
  static constexpr const char* kNames[IG_IMP_NUM_COUNTERS] = {
      "packets", "matched", "dropped", "duplicated", "held", "released",
      "hold_busy", "hold_skipped", "reinjected", "errors"};
  return counter >= 0 && counter < IG_IMP_NUM_COUNTERS ? kNames[counter] : "?";
}

const char* hookName(Hook hook) { return hook == Hook::kIngress ? "ingress" : "egress"; }

absl::StatusOr<uint32_t> probabilityToThreshold(double p) {
  if (!(p >= 0.0 && p <= 1.0))
    return absl::InvalidArgumentError(fmt::format("probability {} is not in [0, 1]", p));
  if (p >= 1.0) return IG_IMPAIR_ALWAYS;
  double t = std::round(p * 4294967296.0);
  return t >= 4294967295.0 ? IG_IMPAIR_ALWAYS - 1 : static_cast<uint32_t>(t);
}

ig_impair_config toShared(const ImpairConfig& cfg) {
  ig_impair_config c{};
  c.seed = cfg.seed;
  c.drop = probabilityToThreshold(cfg.drop).value_or(0);
  c.dup = probabilityToThreshold(cfg.duplicate).value_or(0);
  c.reorder = probabilityToThreshold(cfg.reorder).value_or(0);
  c.l4_proto = cfg.l4_proto;
  c.enabled = cfg.enabled ? 1 : 0;
  return c;
}

std::string attachmentDir(const std::string& pin_dir, const std::string& ifname, Hook hook) {
  return fmt::format("{}/{}-{}", pin_dir, ifname, hookName(hook));
}

absl::Status attach(const std::string& ifname, Hook hook, const ImpairConfig& cfg,
                    const std::string& pin_dir) {
  for (double p : {cfg.drop, cfg.duplicate, cfg.reorder}) {
    auto t = probabilityToThreshold(p);
    if (!t.ok()) return t.status();
  }
  auto ifindex = ifindexOf(ifname);
  if (!ifindex.ok()) return ifindex.status();
  std::string dir = attachmentDir(pin_dir, ifname, hook);
  mkdir(pin_dir.c_str(), 0700);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return errnoStatus(errno, fmt::format("creating {} (is {} on a bpffs?)", dir, pin_dir));
  unpinAll(dir);  // a fresh attachment never reuses an earlier one's state

  ig_impair* skel = ig_impair__open();
  if (!skel) return errnoStatus(errno, "opening the impair BPF object");
  struct SkelGuard {
    ig_impair* s;
    ~SkelGuard() { ig_impair__destroy(s); }
  } guard{skel};
  skel->rodata->ig_imp_ingress = hook == Hook::kIngress ? 1 : 0;
  std::pair<bpf_map*, const char*> pins[] = {{skel->maps.ig_imp_config, kPinConfig},
                                             {skel->maps.ig_imp_seq, kPinSeq},
                                             {skel->maps.ig_imp_held, kPinHeld},
                                             {skel->maps.ig_imp_counters, kPinCounters}};
  for (auto& [map, name] : pins) {
    int err = bpf_map__set_pin_path(map, (dir + "/" + name).c_str());
    if (err) return errnoStatus(err, "setting a pin path");
  }
  if (int err = ig_impair__load(skel); err) return errnoStatus(err, "loading the impair BPF program");
  uint32_t zero = 0;
  ig_impair_config shared = toShared(cfg);
  if (bpf_map_update_elem(bpf_map__fd(skel->maps.ig_imp_config), &zero, &shared, BPF_ANY) != 0) {
    unpinAll(dir);
    return errnoStatus(errno, "writing the configuration");
  }

  LIBBPF_OPTS(bpf_tc_hook, tc_hook, .ifindex = *ifindex, .attach_point = attachPoint(hook));
  int err = bpf_tc_hook_create(&tc_hook);
  if (err && err != -EEXIST) {
    unpinAll(dir);
    return errnoStatus(err, fmt::format("creating the clsact qdisc on {}", ifname));
  }
  LIBBPF_OPTS(bpf_tc_opts, opts, .prog_fd = bpf_program__fd(skel->progs.ig_impair),
              .flags = BPF_TC_F_REPLACE, .handle = IG_IMPAIR_TC_HANDLE, .priority = IG_IMPAIR_TC_PRIO);
  err = bpf_tc_attach(&tc_hook, &opts);
  if (err) {
    unpinAll(dir);
    return errnoStatus(err, fmt::format("attaching to {} {}", ifname, hookName(hook)));
  }
  return absl::OkStatus();  // the filter holds the program, the pins hold the maps
}

absl::Status detach(const std::string& ifname, Hook hook, const std::string& pin_dir) {
  std::string dir = attachmentDir(pin_dir, ifname, hook);
  bool had_pins = access((dir + "/" + kPinConfig).c_str(), F_OK) == 0;
  unpinAll(dir);
  rmdir(dir.c_str());
  auto ifindex = ifindexOf(ifname);
  if (!ifindex.ok()) return had_pins ? absl::OkStatus() : ifindex.status();
  LIBBPF_OPTS(bpf_tc_hook, tc_hook, .ifindex = *ifindex, .attach_point = attachPoint(hook));
  LIBBPF_OPTS(bpf_tc_opts, opts, .handle = IG_IMPAIR_TC_HANDLE, .priority = IG_IMPAIR_TC_PRIO);
  int err = bpf_tc_detach(&tc_hook, &opts);
  if (err == -ENOENT || err == -EINVAL) {
    if (had_pins) return absl::OkStatus();
    return absl::NotFoundError(fmt::format("no infergate-impair filter on {} {}", ifname, hookName(hook)));
  }
  if (err) return errnoStatus(err, fmt::format("detaching from {} {}", ifname, hookName(hook)));
  return absl::OkStatus();
}

absl::StatusOr<ig_impair_config> readConfig(const std::string& ifname, Hook hook,
                                            const std::string& pin_dir) {
  auto m = PinnedMap::open(attachmentDir(pin_dir, ifname, hook), kPinConfig);
  if (!m.ok()) return m.status();
  uint32_t zero = 0;
  ig_impair_config c{};
  if (bpf_map_lookup_elem(m->fd(), &zero, &c) != 0) return errnoStatus(errno, "reading the configuration");
  return c;
}

absl::Status configure(const std::string& ifname, Hook hook, const ImpairUpdate& u,
                       const std::string& pin_dir) {
  std::string dir = attachmentDir(pin_dir, ifname, hook);
  auto cur = readConfig(ifname, hook, pin_dir);
  if (!cur.ok()) return cur.status();
  ig_impair_config c = *cur;
  auto set = [](const std::optional<double>& p, uint32_t* out) -> absl::Status {
    if (!p) return absl::OkStatus();
    auto t = probabilityToThreshold(*p);
    if (!t.ok()) return t.status();
    *out = *t;
    return absl::OkStatus();
  };
  if (auto s = set(u.drop, &c.drop); !s.ok()) return s;
  if (auto s = set(u.duplicate, &c.dup); !s.ok()) return s;
  if (auto s = set(u.reorder, &c.reorder); !s.ok()) return s;
  if (u.seed) c.seed = *u.seed;
  if (u.l4_proto) c.l4_proto = *u.l4_proto;
  if (u.enabled) c.enabled = *u.enabled ? 1 : 0;
  uint32_t zero = 0;
  if (u.reset) {
    auto seq = PinnedMap::open(dir, kPinSeq);
    auto counters = PinnedMap::open(dir, kPinCounters);
    if (!seq.ok()) return seq.status();
    if (!counters.ok()) return counters.status();
    ig_impair_seq s{};
    if (bpf_map_update_elem(seq->fd(), &zero, &s, BPF_ANY) != 0) return errnoStatus(errno, "resetting the sequence");
    std::vector<uint64_t> zeros(static_cast<size_t>(libbpf_num_possible_cpus()), 0);
    for (uint32_t i = 0; i < IG_IMP_NUM_COUNTERS; ++i)
      if (bpf_map_update_elem(counters->fd(), &i, zeros.data(), BPF_ANY) != 0)
        return errnoStatus(errno, "resetting the counters");
  }
  auto m = PinnedMap::open(dir, kPinConfig);
  if (!m.ok()) return m.status();
  if (bpf_map_update_elem(m->fd(), &zero, &c, BPF_ANY) != 0) return errnoStatus(errno, "writing the configuration");
  return absl::OkStatus();
}

absl::StatusOr<ImpairCounters> readCounters(const std::string& ifname, Hook hook,
                                            const std::string& pin_dir) {
  auto m = PinnedMap::open(attachmentDir(pin_dir, ifname, hook), kPinCounters);
  if (!m.ok()) return m.status();
  int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return errnoStatus(ncpu, "counting CPUs");
  std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpu));
  ImpairCounters out;
  for (uint32_t i = 0; i < IG_IMP_NUM_COUNTERS; ++i) {
    if (bpf_map_lookup_elem(m->fd(), &i, per_cpu.data()) != 0) return errnoStatus(errno, "reading the counters");
    for (uint64_t v : per_cpu) out.values[i] += v;
  }
  return out;
}

}  // namespace infergate::impair
