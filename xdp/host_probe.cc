#include "xdp/host_probe.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <link.h>
#include <linux/bpf.h>
#include <linux/ethtool.h>
#include <linux/if_link.h>
#include <linux/if_xdp.h>
#include <linux/perf_event.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include <fmt/format.h>

#ifndef XDP_USE_SG
#define XDP_USE_SG (1 << 4)  // multi-buffer AF_XDP (Linux 6.6), newer than Debian 12's uapi
#endif
#ifndef SO_PREFER_BUSY_POLL
#define SO_PREFER_BUSY_POLL 69
#endif
#ifndef SO_BUSY_POLL_BUDGET
#define SO_BUSY_POLL_BUDGET 70
#endif

// The uprobe target: a function of this binary the probe registers a uprobe on (never called
// while the probe holds it).
extern "C" __attribute__((noinline, used)) int ig_host_probe_uprobe_target(int x) {
  asm volatile("" ::: "memory");
  return x + 1;
}

namespace infergate::xdp {
namespace {

std::string errText(int err) {
  if (err < 0) err = -err;
  return fmt::format("{} ({})", std::strerror(err), err);
}

// Raw instructions (the kernel's encoding; libbpf exports no builder).
bpf_insn movImm(uint8_t dst, int32_t imm) { return {BPF_ALU64 | BPF_MOV | BPF_K, dst, 0, 0, imm}; }
bpf_insn movReg(uint8_t dst, uint8_t src) { return {BPF_ALU64 | BPF_MOV | BPF_X, dst, src, 0, 0}; }
bpf_insn addImm(uint8_t dst, int32_t imm) { return {BPF_ALU64 | BPF_ADD | BPF_K, dst, 0, 0, imm}; }
bpf_insn stDw(uint8_t dst, int16_t off, int32_t imm) {
  return {BPF_ST | BPF_MEM | BPF_DW, dst, 0, off, imm};
}
bpf_insn call(int32_t helper) { return {BPF_JMP | BPF_CALL, 0, 0, 0, helper}; }
bpf_insn jneImm(uint8_t dst, int32_t imm, int16_t off) {
  return {BPF_JMP | BPF_JNE | BPF_K, dst, 0, off, imm};
}
bpf_insn exitInsn() { return {BPF_JMP | BPF_EXIT, 0, 0, 0, 0}; }

struct Loaded {
  int fd = -1;
  int err = 0;
  std::string reason;  // the verifier's last line, or the errno text
  ~Loaded() {
    if (fd >= 0) close(fd);
  }
};

void loadProgram(Loaded& out, bpf_prog_type type, const std::vector<bpf_insn>& insns,
                 bpf_attach_type attach = static_cast<bpf_attach_type>(0), uint32_t btf_id = 0) {
  static thread_local std::vector<char> log(64 * 1024);
  log[0] = '\0';
  LIBBPF_OPTS(bpf_prog_load_opts, o);
  o.log_buf = log.data();
  o.log_size = static_cast<uint32_t>(log.size());
  o.log_level = 1;
  o.expected_attach_type = attach;
  o.attach_btf_id = btf_id;
  out.fd = bpf_prog_load(type, "ig_probe", "GPL", insns.data(), insns.size(), &o);
  if (out.fd >= 0) return;
  out.err = errno ? -errno : -EINVAL;
  out.reason = verifierReason(log.data());
  if (out.reason.empty()) out.reason = errText(out.err);
}

std::vector<bpf_insn> xdpPass() { return {movImm(0, XDP_PASS), exitInsn()}; }

HelperProbe runHelperProbe(int helper) {
  HelperProbe r;
  // r0 = helper(ctx, -16); return r0 == 0 ? XDP_PASS : XDP_DROP
  Loaded p;
  loadProgram(p, BPF_PROG_TYPE_XDP,
              {movImm(2, -16), call(helper), jneImm(0, 0, 2), movImm(0, XDP_PASS), exitInsn(),
               movImm(0, XDP_DROP), exitInsn()});
  if (p.fd < 0) {
    r.permission = p.err == -EPERM || p.err == -EACCES;
    r.detail = r.permission ? "not probed: " + errText(p.err) + " (needs CAP_BPF and CAP_NET_ADMIN)"
                            : "refused by the verifier: " + p.reason;
    return r;
  }
  r.loaded = true;
  std::vector<uint8_t> pkt(64, 0);
  pkt[12] = 0x08;  // an IPv4 ethertype; the bytes do not matter to these helpers
  std::vector<uint8_t> out(pkt.size() + 64);
  LIBBPF_OPTS(bpf_test_run_opts, t);
  t.data_in = pkt.data();
  t.data_size_in = static_cast<uint32_t>(pkt.size());
  t.data_out = out.data();
  t.data_size_out = static_cast<uint32_t>(out.size());
  t.repeat = 1;
  if (bpf_prog_test_run_opts(p.fd, &t) != 0) {
    r.detail = "accepted by the verifier; BPF_PROG_TEST_RUN failed: " + errText(errno);
    return r;
  }
  r.call_ok = t.retval == XDP_PASS;
  r.detail = r.call_ok ? "accepted by the verifier, and the call succeeds"
                       : "accepted by the verifier, but the call fails at run time";
  return r;
}

std::string readFirstLine(const char* path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

std::string lockdownMode() {
  // "none [integrity] confidentiality": the bracketed word
  std::string s = readFirstLine("/sys/kernel/security/lockdown");
  auto a = s.find('['), b = s.find(']');
  return a != std::string::npos && b != std::string::npos && b > a ? s.substr(a + 1, b - a - 1)
                                                                   : "";
}

HostFeature feature(std::string name, std::string without, std::string fix) {
  HostFeature f;
  f.name = std::move(name);
  f.without = std::move(without);
  f.fix = std::move(fix);
  return f;
}

// A BPF feature from a load: yes when loaded, unknown when refused for privilege, else no.
void fromLoad(HostFeature& f, const Loaded& p, const std::string& yes_detail) {
  if (p.fd >= 0) {
    f.support = Support::kYes;
    f.detail = yes_detail;
  } else if (p.err == -EPERM || p.err == -EACCES) {
    // Lockdown refuses some program types with EPERM even to root: that is a no.
    f.support = geteuid() == 0 ? Support::kNo : Support::kUnknown;
    f.detail = "refused: " + p.reason;
  } else {
    f.support = Support::kNo;
    f.detail = "refused: " + p.reason;
  }
}

HostFeature helperFeature(const char* name, int helper, std::string without, std::string fix) {
  HostFeature f = feature(name, std::move(without), std::move(fix));
  HelperProbe h = probeXdpHelper(helper);
  f.detail = h.detail;
  f.support = h.permission            ? Support::kUnknown
              : h.loaded && h.call_ok ? Support::kYes
                                      : Support::kNo;
  return f;
}

// The file offset of `addr` in the object that maps it, and that object's path.
bool fileOffsetOf(const void* addr, std::string* path, uint64_t* offset) {
  struct Ctx {
    uintptr_t addr;
    std::string path;
    uint64_t off = 0;
    bool found = false;
  } ctx{reinterpret_cast<uintptr_t>(addr)};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        auto* c = static_cast<Ctx*>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const auto& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          uintptr_t start = info->dlpi_addr + ph.p_vaddr;
          if (c->addr >= start && c->addr < start + ph.p_memsz) {
            c->path = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : "/proc/self/exe";
            c->off = c->addr - start + ph.p_offset;
            c->found = true;
            return 1;
          }
        }
        return 0;
      },
      &ctx);
  if (!ctx.found) return false;
  if (ctx.path == "/proc/self/exe") {
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return false;
    ctx.path.assign(buf, static_cast<size_t>(n));
  }
  *path = ctx.path;
  *offset = ctx.off;
  return true;
}

HostFeature probeUprobe() {
  HostFeature f = feature(
      "uprobe",
      "the GPU watch (gpu:) cannot attach to the CUDA driver: no per-process GPU figures, no "
      "GPU signal in admission",
      "CONFIG_UPROBE_EVENTS=y (kernel >= 4.17 for BPF on uprobe PMU events); CAP_PERFMON + "
      "CAP_BPF; kernel.perf_event_paranoid <= 2 for non-root");
  int type = std::atoi(readFirstLine("/sys/bus/event_source/devices/uprobe/type").c_str());
  if (type <= 0) {
    f.support = Support::kNo;
    f.detail = "no uprobe PMU (/sys/bus/event_source/devices/uprobe/type)";
    return f;
  }
  std::string path;
  uint64_t off = 0;
  if (!fileOffsetOf(reinterpret_cast<const void*>(&ig_host_probe_uprobe_target), &path, &off)) {
    f.detail = "no file offset for the probe target";
    return f;
  }
  perf_event_attr attr{};
  attr.size = sizeof(attr);
  attr.type = static_cast<uint32_t>(type);
  attr.config1 = reinterpret_cast<uint64_t>(path.c_str());
  attr.config2 = off;
  int pfd = static_cast<int>(syscall(__NR_perf_event_open, &attr, -1, 0, -1, PERF_FLAG_FD_CLOEXEC));
  if (pfd < 0) {
    int e = errno;
    f.support = e == EPERM || e == EACCES ? Support::kUnknown : Support::kNo;
    f.detail = "perf_event_open(uprobe): " + errText(e);
    return f;
  }
  Loaded p;
  loadProgram(p, BPF_PROG_TYPE_KPROBE, {movImm(0, 0), exitInsn()});
  if (p.fd < 0) {
    close(pfd);
    fromLoad(f, p, "");
    return f;
  }
  if (ioctl(pfd, PERF_EVENT_IOC_SET_BPF, p.fd) != 0) {
    f.support = Support::kNo;
    f.detail = "PERF_EVENT_IOC_SET_BPF: " + errText(errno);
  } else {
    f.support = Support::kYes;
    f.detail = "a BPF program attached to a uprobe on this binary";
  }
  close(pfd);
  return f;
}

// LSM and fentry: a program of the type, loaded against a kernel function's BTF and attached.
HostFeature probeTracing(btf* vmlinux, const char* name, bpf_prog_type type, bpf_attach_type attach,
                         const char* func, std::string without, std::string fix) {
  HostFeature f = feature(name, std::move(without), std::move(fix));
  if (!vmlinux) {
    f.support = Support::kNo;
    f.detail = "no kernel BTF (/sys/kernel/btf/vmlinux): CONFIG_DEBUG_INFO_BTF=y is needed";
    return f;
  }
  int id = btf__find_by_name_kind(vmlinux, func, BTF_KIND_FUNC);
  if (id <= 0) {
    f.support = Support::kNo;
    f.detail = fmt::format("the kernel's BTF has no {}", func);
    return f;
  }
  Loaded p;
  loadProgram(p, type, {movImm(0, 0), exitInsn()}, attach, static_cast<uint32_t>(id));
  if (p.fd < 0) {
    fromLoad(f, p, "");
    const std::string lock = lockdownMode();
    if ((p.err == -EPERM) && !lock.empty() && lock != "none")
      f.detail += fmt::format(" (kernel lockdown is '{}')", lock);
    return f;
  }
  int link = bpf_link_create(p.fd, 0, attach, nullptr);
  if (link < 0) {
    f.support = Support::kNo;
    f.detail = fmt::format("loaded, but attaching to {} failed: {}", func, errText(errno));
    return f;
  }
  close(link);
  f.support = Support::kYes;
  f.detail = fmt::format("loaded and attached to {}", func);
  return f;
}

// One AF_XDP bind with `flags` on (ifindex, queue): 0 or -errno.
int xskBind(int ifindex, uint32_t queue, uint16_t flags, bool busy_poll, std::string* busy_detail) {
  constexpr uint32_t kFrames = 16, kFrame = 4096;
  void* area =
      mmap(nullptr, kFrames * kFrame, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (area == MAP_FAILED) return -errno;
  int fd = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);
  int rc = 0;
  if (fd < 0) {
    rc = -errno;
  } else {
    xdp_umem_reg reg{};
    reg.addr = reinterpret_cast<uint64_t>(area);
    reg.len = kFrames * kFrame;
    reg.chunk_size = kFrame;
    int ring = kFrames;
    if (setsockopt(fd, SOL_XDP, XDP_UMEM_REG, &reg, sizeof reg) != 0 ||
        setsockopt(fd, SOL_XDP, XDP_UMEM_FILL_RING, &ring, sizeof ring) != 0 ||
        setsockopt(fd, SOL_XDP, XDP_UMEM_COMPLETION_RING, &ring, sizeof ring) != 0 ||
        setsockopt(fd, SOL_XDP, XDP_RX_RING, &ring, sizeof ring) != 0) {
      rc = -errno;
    } else {
      sockaddr_xdp sxdp{};
      sxdp.sxdp_family = AF_XDP;
      sxdp.sxdp_flags = flags;
      sxdp.sxdp_ifindex = static_cast<uint32_t>(ifindex);
      sxdp.sxdp_queue_id = queue;
      if (bind(fd, reinterpret_cast<sockaddr*>(&sxdp), sizeof sxdp) != 0) rc = -errno;
    }
    if (rc == 0 && busy_poll) {
      int one = 1, usecs = 20, budget = 64;
      if (setsockopt(fd, SOL_SOCKET, SO_PREFER_BUSY_POLL, &one, sizeof one) != 0)
        *busy_detail = "SO_PREFER_BUSY_POLL: " + errText(errno);
      else if (setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &usecs, sizeof usecs) != 0)
        *busy_detail = "SO_BUSY_POLL: " + errText(errno);
      else if (setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL_BUDGET, &budget, sizeof budget) != 0)
        *busy_detail = "SO_BUSY_POLL_BUDGET: " + errText(errno);
      else
        *busy_detail = "";
    }
    close(fd);
  }
  munmap(area, kFrames * kFrame);
  return rc;
}

// The kernel releases a closed socket's hold on its queue asynchronously (the buffer pool goes
// in a work item): a bind right after an earlier probe's close can see EBUSY for a while.
int xskBindAfterProbe(int ifindex, uint32_t queue, uint16_t flags, std::string* busy_detail) {
  int rc = 0;
  for (int i = 0; i < 50; ++i) {
    rc = xskBind(ifindex, queue, flags, false, busy_detail);
    if (rc != -EBUSY) break;
    usleep(10'000);
  }
  return rc;
}

void probeXsk(HostReport& r, int ifindex, uint32_t queue) {
  const std::string where = fmt::format("{} queue {}", r.interface, queue);
  HostFeature copy = feature("xsk_copy", "afxdp mode cannot run on this interface",
                             "kernel >= 4.18 (CONFIG_XDP_SOCKETS=y), CAP_NET_RAW + CAP_NET_ADMIN, "
                             "a queue id below the interface's rx queue count");
  HostFeature zc =
      feature("xsk_zero_copy",
              "afxdp runs in copy mode: the kernel copies each frame into the UMEM (chosen "
              "automatically, afxdp.zero_copy: auto; measured on veth: copy-mode transmit is about "
              "half of afxdp's CPU per request, docs/BENCHMARKS.md)",
              "a driver with AF_XDP zero-copy (ice, i40e, ixgbe, mlx5, igc, stmmac, ...); veth and "
              "most virtual NICs have none");
  HostFeature wake = feature(
      "xsk_need_wakeup",
      "every ring is kicked with a system call per burst instead of only when the kernel asks",
      "kernel >= 5.4");
  HostFeature sg = feature("xsk_multi_buffer",
                           "frames larger than one UMEM chunk are dropped by the kernel: keep the "
                           "MTU below afxdp.frame_size minus headroom (the default 1500 fits)",
                           "kernel >= 6.6 and a driver with multi-buffer XDP");
  HostFeature busy = feature("xsk_busy_poll",
                             "afxdp.busy_poll is switched off with a warning: reactors sleep in "
                             "poll(2)",
                             "kernel >= 5.11 for SO_PREFER_BUSY_POLL/SO_BUSY_POLL_BUDGET; "
                             "CAP_NET_ADMIN for the budget");
  auto busyOr = [&](int rc, HostFeature& f) {
    f.support = rc == -EPERM || rc == -EACCES || rc == -EBUSY ? Support::kUnknown : Support::kNo;
    f.detail = rc == -EBUSY ? "not probed: " + where + " is in use by another AF_XDP socket"
                            : "bind: " + errText(rc);
  };
  std::string busy_detail = "not probed";
  int rc = xskBind(ifindex, queue, XDP_COPY | XDP_USE_NEED_WAKEUP, true, &busy_detail);
  if (rc == 0) {
    copy.support = wake.support = Support::kYes;
    copy.detail = "bound in copy mode on " + where;
    wake.detail = "bound with XDP_USE_NEED_WAKEUP";
    busy.support = busy_detail.empty() ? Support::kYes : Support::kNo;
    busy.detail = busy_detail.empty() ? "the socket options were accepted" : busy_detail;
  } else {
    int rc2 = xskBindAfterProbe(ifindex, queue, XDP_COPY, &busy_detail);
    if (rc2 == 0) {
      copy.support = Support::kYes;
      copy.detail = "bound in copy mode on " + where;
      wake.support = Support::kNo;
      wake.detail = "bind with XDP_USE_NEED_WAKEUP: " + errText(rc);
    } else {
      busyOr(rc2, copy);
      busyOr(rc2, wake);
    }
    busyOr(rc2, busy);
  }
  if (copy.support == Support::kYes) {
    rc = xskBindAfterProbe(ifindex, queue, XDP_ZEROCOPY, &busy_detail);
    zc.support = rc == 0 ? Support::kYes : Support::kNo;
    zc.detail = rc == 0 ? "bound in zero-copy mode" : "bind with XDP_ZEROCOPY: " + errText(rc);
    rc = xskBindAfterProbe(ifindex, queue, XDP_COPY | XDP_USE_SG, &busy_detail);
    sg.support = rc == 0 ? Support::kYes : Support::kNo;
    sg.detail = rc == 0 ? "bound with XDP_USE_SG" : "bind with XDP_USE_SG: " + errText(rc);
  } else {
    zc.detail = sg.detail = "not probed: no copy-mode bind";
  }
  for (HostFeature* f : {&copy, &zc, &wake, &sg, &busy}) r.features.push_back(std::move(*f));
}

void probeAttach(HostReport& r, int ifindex) {
  HostFeature native = feature(
      "xdp_native",
      "the program runs in generic (skb) mode after the kernel allocated an skb: slower, and "
      "afxdp has copy mode only (xdp.attach: generic)",
      "a driver with native XDP (veth, virtio_net, ixgbe, i40e, ice, mlx5, ena, ...)");
  HostFeature generic =
      feature("xdp_generic", "the XDP modes (xdp-filter, afxdp) cannot run here", "kernel >= 4.12");
  Loaded p;
  loadProgram(p, BPF_PROG_TYPE_XDP, xdpPass());
  if (p.fd < 0) {
    fromLoad(native, p, "");
    fromLoad(generic, p, "");
    if (native.support == Support::kNo && (p.err == -EPERM || p.err == -EACCES))
      native.support = generic.support = Support::kUnknown;
  } else {
    LIBBPF_OPTS(bpf_xdp_query_opts, q);
    const bool busy = bpf_xdp_query(ifindex, 0, &q) == 0 && q.attach_mode != XDP_ATTACHED_NONE;
    if (busy) {
      // Never replace what is there: report it.
      const bool drv = q.attach_mode == XDP_ATTACHED_DRV || q.attach_mode == XDP_ATTACHED_MULTI;
      native.support = drv ? Support::kYes : Support::kUnknown;
      native.detail =
          fmt::format("in use: program id {} attached in {} mode",
                      q.prog_id ? q.prog_id : (q.drv_prog_id ? q.drv_prog_id : q.skb_prog_id),
                      drv                                 ? "native"
                      : q.attach_mode == XDP_ATTACHED_SKB ? "generic"
                                                          : "offload");
      generic.support = q.attach_mode == XDP_ATTACHED_SKB ? Support::kYes : Support::kUnknown;
      generic.detail = native.detail;
    } else {
      for (auto [f, mode] :
           {std::pair{&native, XDP_FLAGS_DRV_MODE}, {&generic, XDP_FLAGS_SKB_MODE}}) {
        int err = bpf_xdp_attach(ifindex, p.fd, XDP_FLAGS_UPDATE_IF_NOEXIST | mode, nullptr);
        if (err == 0) {
          bpf_xdp_detach(ifindex, mode, nullptr);
          f->support = Support::kYes;
          f->detail = "an XDP_PASS program attached and detached";
        } else {
          f->support = err == -EPERM || err == -EACCES ? Support::kUnknown : Support::kNo;
          f->detail = "attach: " + errText(err);
        }
      }
    }
  }
  r.features.push_back(std::move(native));
  r.features.push_back(std::move(generic));
}

std::string interfaceDriverName(const std::string& ifname) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  ethtool_drvinfo info{};
  info.cmd = ETHTOOL_GDRVINFO;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  ifr.ifr_data = reinterpret_cast<char*>(&info);
  const int rc = ioctl(fd, SIOCETHTOOL, &ifr);
  close(fd);
  return rc == 0 ? std::string(info.driver) : "";
}

}  // namespace

std::string verifierReason(const char* log) {
  std::istringstream in(log);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.empty() || line.rfind("processed ", 0) == 0 ||
        line.rfind("verification time", 0) == 0 || line.rfind("stack depth", 0) == 0)
      continue;
    last = line;
  }
  return last;
}

const char* supportName(Support s) {
  switch (s) {
    case Support::kYes:
      return "yes";
    case Support::kNo:
      return "no";
    default:
      return "unknown";
  }
}

const HostFeature* HostReport::find(const std::string& name) const {
  for (const HostFeature& f : features)
    if (f.name == name) return &f;
  return nullptr;
}

bool HostReport::has(const std::string& name) const {
  const HostFeature* f = find(name);
  return f && f->support == Support::kYes;
}

std::string HostReport::summary() const {
  std::string yes, no, unknown;
  auto add = [](std::string& to, const std::string& what) {
    if (!to.empty()) to += ", ";
    to += what;
  };
  for (const HostFeature& f : features) {
    if (f.support == Support::kYes)
      add(yes, f.name);
    else if (f.support == Support::kNo)
      add(no, f.name);
    else
      add(unknown, f.name);
  }
  std::string s = "kernel " + kernel;
  if (!interface.empty()) s += fmt::format(", {} ({})", interface, driver.empty() ? "?" : driver);
  s += "; yes: " + (yes.empty() ? "-" : yes) + "; no: " + (no.empty() ? "-" : no);
  if (!unknown.empty()) s += "; unknown: " + unknown;
  return s;
}

HelperProbe probeXdpHelper(int helper) {
  // The test hook: INFERGATE_PROBE_REFUSE (a comma-separated list of these names) makes the
  // probe report the helper refused, so the fallback runs on a host that has the better path
  // (tests/integration: the afxdp tests' `.prefix` runs).
  const char* name = helper == BPF_FUNC_xdp_adjust_meta   ? "xdp_adjust_meta"
                     : helper == BPF_FUNC_xdp_adjust_head ? "xdp_adjust_head"
                     : helper == BPF_FUNC_xdp_adjust_tail ? "xdp_adjust_tail"
                                                          : nullptr;
  if (const char* refuse = std::getenv("INFERGATE_PROBE_REFUSE"); refuse && name) {
    std::string list = std::string(",") + refuse + ",";
    if (list.find(std::string(",") + name + ",") != std::string::npos) {
      HelperProbe r;
      r.detail =
          fmt::format("refused by the verifier (simulated: INFERGATE_PROBE_REFUSE={})", refuse);
      return r;
    }
  }
  static std::mutex mu;
  static std::map<int, HelperProbe> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(helper); it != cache.end()) return it->second;
  }
  HelperProbe r = runHelperProbe(helper);
  if (!r.permission) {
    std::lock_guard<std::mutex> lock(mu);
    cache[helper] = r;
  }
  return r;
}

HostReport probeHost(const HostProbeOptions& o) {
  HostReport r;
  utsname u{};
  if (uname(&u) == 0) r.kernel = u.release;
  r.interface = o.interface;
  if (!o.interface.empty()) r.driver = interfaceDriverName(o.interface);

  HostFeature bpf = feature("bpf", "only socket mode runs (no XDP program, no GPU probes)",
                            "run as root or grant CAP_BPF + CAP_NET_ADMIN + CAP_PERFMON; "
                            "kernel.unprivileged_bpf_disabled does not matter with those");
  {
    Loaded p;
    loadProgram(p, BPF_PROG_TYPE_XDP, xdpPass());
    fromLoad(bpf, p, "an XDP program loaded");
    if (p.fd < 0 && (p.err == -EPERM || p.err == -EACCES)) bpf.support = Support::kNo;
  }
  r.features.push_back(bpf);
  r.features.push_back(helperFeature(
      "xdp_adjust_meta", BPF_FUNC_xdp_adjust_meta,
      "afxdp carries the XDP program's tag as a 16-byte prefix in front of the frame "
      "(bpf_xdp_adjust_head) that the AF_XDP device strips (xdp.tags: auto picks it; measured: "
      "no cost beyond the noise: 17 ns a packet, 3 % of req/s, docs/HOSTS.md)",
      "kernel >= 4.15 whose verifier accepts bpf_xdp_adjust_meta in XDP programs, and a driver "
      "with metadata room; none is needed: the prefix does the same job"));
  r.features.push_back(helperFeature(
      "xdp_adjust_head", BPF_FUNC_xdp_adjust_head,
      "with no metadata either, afxdp cannot carry the program's tag: it refuses to start",
      "kernel >= 4.10"));
  r.features.push_back(helperFeature(
      "xdp_adjust_tail", BPF_FUNC_xdp_adjust_tail,
      "the program cannot build RSTs or cookie SYN-ACKs in place: set xdp.send_rst: false and "
      "xdp.syn_cookies: off",
      "kernel >= 4.18"));
  {
    HostFeature f =
        feature("xskmap", "afxdp mode cannot run (no map to redirect to AF_XDP sockets)",
                "kernel >= 4.18 with CONFIG_XDP_SOCKETS=y");
    int fd = bpf_map_create(BPF_MAP_TYPE_XSKMAP, "ig_probe", 4, 4, 1, nullptr);
    if (fd >= 0) {
      close(fd);
      f.support = Support::kYes;
      f.detail = "an XSKMAP was created";
    } else {
      f.support = errno == EPERM || errno == EACCES ? Support::kUnknown : Support::kNo;
      f.detail = "bpf_map_create(XSKMAP): " + errText(errno);
    }
    r.features.push_back(f);
  }
  {
    // bpf_tcp_raw_gen_syncookie_ipv4(iph, th, th_len) on zeroed stack memory: loading is the
    // probe (the call itself refuses a zero header).
    HostFeature f =
        feature("syncookie_helpers",
                "nothing: infergate signs and checks its own SYN cookies in the program "
                "(dataplane/tcp/syncookie.h), so the helpers are not needed",
                "kernel >= 6.0 (bpf_tcp_raw_gen_syncookie_ipv4/_ipv6, CONFIG_SYN_COOKIES=y)");
    std::vector<bpf_insn> insns;
    for (int16_t off = -64; off < 0; off += 8) insns.push_back(stDw(10, off, 0));
    insns.push_back(movReg(1, 10));
    insns.push_back(addImm(1, -64));
    insns.push_back(movReg(2, 10));
    insns.push_back(addImm(2, -40));
    insns.push_back(movImm(3, 20));
    insns.push_back(call(BPF_FUNC_tcp_raw_gen_syncookie_ipv4));
    insns.push_back(movImm(0, XDP_PASS));
    insns.push_back(exitInsn());
    Loaded p;
    loadProgram(p, BPF_PROG_TYPE_XDP, insns);
    fromLoad(f, p, "bpf_tcp_raw_gen_syncookie_ipv4 accepted by the verifier");
    if (p.fd < 0 && (p.err == -EPERM || p.err == -EACCES)) f.support = Support::kUnknown;
    r.features.push_back(f);
  }
  r.features.push_back(probeUprobe());
  btf* vmlinux = btf__load_vmlinux_btf();  // once for both tracing probes
  {
    const std::string lsms = readFirstLine("/sys/kernel/security/lsm");
    HostFeature f =
        probeTracing(vmlinux, "bpf_lsm", BPF_PROG_TYPE_LSM, BPF_LSM_MAC, "bpf_lsm_file_open",
                     "nothing today: no infergate feature uses BPF LSM programs",
                     std::string("CONFIG_BPF_LSM=y, 'bpf' in the lsm= boot parameter (now: ") +
                         (lsms.empty() ? "unreadable" : lsms) + "), and lockdown=none (now: " +
                         (lockdownMode().empty() ? "unknown" : lockdownMode()) + ")");
    r.features.push_back(f);
  }
  r.features.push_back(probeTracing(
      vmlinux, "fentry", BPF_PROG_TYPE_TRACING, BPF_TRACE_FENTRY, "bpf_fentry_test1",
      "nothing today: the GPU watch uses uprobes, not fentry/fexit programs",
      "kernel >= 5.5 with BTF (CONFIG_DEBUG_INFO_BTF=y) on x86-64/arm64, and lockdown=none (now: " +
          (lockdownMode().empty() ? "unknown" : lockdownMode()) + ")"));
  if (vmlinux) btf__free(vmlinux);

  if (!o.interface.empty()) {
    const int ifindex = static_cast<int>(if_nametoindex(o.interface.c_str()));
    if (ifindex == 0) {
      HostFeature f =
          feature("interface", "nothing can be probed on it", "name an existing interface");
      f.support = Support::kNo;
      f.detail = "no interface named '" + o.interface + "'";
      r.features.push_back(f);
      return r;
    }
    if (o.attach) probeAttach(r, ifindex);
    if (o.xsk) probeXsk(r, ifindex, o.queue);
  }
  return r;
}

void registerHostMetrics(common::MetricsRegistry& registry, const HostReport& report) {
  registry.addCollector([report](std::string& out) {
    out +=
        "# HELP infergate_host_feature What this host gave when probed at start-up (1 yes, 0 no; "
        "infergate doctor says why and the fix).\n";
    out += "# TYPE infergate_host_feature gauge\n";
    for (const HostFeature& f : report.features) {
      if (f.support == Support::kUnknown) continue;
      out += fmt::format("infergate_host_feature{{feature=\"{}\"}} {}\n", f.name,
                         f.support == Support::kYes ? 1 : 0);
    }
  });
}

}  // namespace infergate::xdp
