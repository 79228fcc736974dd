#include "xdp/xdp_filter.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/ethtool.h>
#include <linux/if_link.h>
#include <linux/sockios.h>
#include <linux/magic.h>
#include <net/if.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "common/secret.h"
#include "xdp/host_probe.h"
#include "ig_ingress.skel.h"

namespace infergate::xdp {
namespace {

constexpr const char* kProgName = "ig_xdp_ingress";

int libbpfPrint(enum libbpf_print_level level, const char* fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  int n = vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string line(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) vsnprintf(line.data(), line.size() + 1, fmt, args);
  while (!line.empty() && line.back() == '\n') line.pop_back();
  // The verifier's log (hundreds of lines) is for debugging: a refused load's error names the
  // verifier's reason and the file holding the whole log (XdpFilter::loadSkeleton).
  if (level == LIBBPF_WARN && line.find("PROG LOAD LOG") == std::string::npos) {
    spdlog::warn("libbpf: {}", line);
  } else {
    spdlog::debug("libbpf: {}", line);
  }
  return 0;
}

// The whole verifier log into $TMPDIR (or /tmp); the file's path, "" when it cannot be written.
std::string writeVerifierLog(const char* log) {
  const char* dir = std::getenv("TMPDIR");
  std::string path = fmt::format("{}/infergate-xdp-verifier-{}.log", dir && *dir ? dir : "/tmp",
                                 static_cast<int>(getpid()));
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return "";
  std::fputs(log, f);
  std::fclose(f);
  spdlog::debug("xdp: verifier log written to {}", path);
  return path;
}

void setupLibbpf() {
  static std::once_flag once;
  std::call_once(once, [] { libbpf_set_print(libbpfPrint); });
}

std::string errnoText(int err) {
  if (err < 0) err = -err;
  return fmt::format("{} ({})", std::strerror(err), err);
}

// The MTU of an interface, 0 when unknown.
int interfaceMtu(const std::string& ifname) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  int rc = ioctl(fd, SIOCGIFMTU, &ifr);
  close(fd);
  return rc == 0 ? ifr.ifr_mtu : 0;
}

// The driver of an interface ("veth", "ixgbe", ...), empty when unknown.
std::string interfaceDriver(const std::string& ifname) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  ethtool_drvinfo info{};
  info.cmd = ETHTOOL_GDRVINFO;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  ifr.ifr_data = reinterpret_cast<char*>(&info);
  int rc = ioctl(fd, SIOCETHTOOL, &ifr);
  close(fd);
  if (rc != 0) return {};
  return std::string(info.driver, strnlen(info.driver, sizeof(info.driver)));
}

// Reads a per-CPU map of `nkeys` entries with values of `value_size` bytes, summing every
// 8-byte field over CPUs into out[key * (value_size / 8) + field].
bool readPercpuSums(int fd, uint32_t nkeys, size_t value_size, std::vector<uint64_t>& out) {
  int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return false;
  size_t stride = (value_size + 7) / 8 * 8;
  size_t fields = value_size / 8;
  std::vector<uint8_t> buf(stride * static_cast<size_t>(ncpu));
  out.assign(nkeys * fields, 0);
  for (uint32_t k = 0; k < nkeys; ++k) {
    if (bpf_map_lookup_elem(fd, &k, buf.data()) != 0) return false;
    for (int c = 0; c < ncpu; ++c) {
      for (size_t f = 0; f < fields; ++f) {
        uint64_t v;
        std::memcpy(&v, buf.data() + stride * c + 8 * f, 8);
        out[k * fields + f] += v;
      }
    }
  }
  return true;
}

XdpCounters readCountersFromFds(int counters_fd, int class_fd) {
  XdpCounters c;
  std::vector<uint64_t> v;
  if (counters_fd >= 0 &&
      readPercpuSums(counters_fd, IG_NUM_ACTIONS * IG_R_MAX, sizeof(ig_counter), v)) {
    for (int a = 0; a < IG_NUM_ACTIONS; ++a) {
      for (int r = 0; r < IG_R_MAX; ++r) {
        c.packets[a][r] = v[(a * IG_R_MAX + r) * 2];
        c.bytes[a][r] = v[(a * IG_R_MAX + r) * 2 + 1];
      }
    }
  }
  if (class_fd >= 0 && readPercpuSums(class_fd, IG_NUM_CLASSES * IG_TV_MAX, sizeof(uint64_t), v)) {
    for (int k = 0; k < IG_NUM_CLASSES; ++k)
      for (int t = 0; t < IG_TV_MAX; ++t) c.requests[k][t] = v[k * IG_TV_MAX + t];
  }
  return c;
}

absl::Status fillPrefix(const std::string& prefix, bool allow, int cls, ig_prefix* p,
                        const std::string& where) {
  if (prefix.empty() || prefix.size() > IG_PREFIX_MAX_LEN || prefix[0] != '/')
    return absl::InvalidArgumentError(fmt::format(
        "{}: '{}' must start with '/' and be 1..{} bytes", where, prefix, IG_PREFIX_MAX_LEN));
  std::memset(p, 0, sizeof(*p));
  for (size_t i = 0; i < prefix.size(); ++i) {
    p->word[i / 8] |= static_cast<uint64_t>(static_cast<uint8_t>(prefix[i])) << (8 * (i % 8));
    p->mask[i / 8] |= 0xffULL << (8 * (i % 8));
  }
  p->len = static_cast<uint8_t>(prefix.size());
  p->allow = allow ? 1 : 0;
  p->cls = cls < 0 ? IG_CLASS_NONE : static_cast<uint8_t>(cls);
  return absl::OkStatus();
}

}  // namespace

const char* reasonName(int reason) {
  static const char* kNames[IG_R_MAX] = {
      "none",           "not_ip",          "not_tcp",          "not_service",
      "ipv6_ext",       "ip_fragment",     "segment",          "syn",
      "request",        "truncated",       "bad_ip_header",    "bad_tcp_header",
      "bad_tcp_flags",  "bad_request_line", "bad_method",      "bad_path",
      "bad_version",    "bad_h2_preface",  "bad_h2_frame",     "rejected_flow",
      "syn_rate_limited", "syn_overload",  "syn_cookie_sent", "cookie_ack_deferred",
      "cookie_valid",   "cookie_no_match", "rst_rate_limited", "no_tag_room"};
  static_assert(IG_R_MAX == 28, "reasonName table out of date");
  return reason >= 0 && reason < IG_R_MAX ? kNames[reason] : "unknown";
}

const char* actionName(int action) {
  switch (action) {
    case XDP_ABORTED: return "aborted";
    case XDP_DROP: return "drop";
    case XDP_PASS: return "pass";
    case XDP_TX: return "tx";
    case XDP_REDIRECT: return "redirect";
  }
  return "unknown";
}

const char* tagVerdictName(int verdict) {
  switch (verdict) {
    case IG_TV_ADMIT: return "admit";
    case IG_TV_RATE_LIMITED: return "rate_limited";
    case IG_TV_OVERLOAD: return "overload";
  }
  return "unknown";
}

uint64_t XdpCounters::total(int action) const {
  uint64_t t = 0;
  for (auto v : packets[action]) t += v;
  return t;
}

uint64_t XdpCounters::byReason(int reason) const {
  uint64_t t = 0;
  if (reason < 0 || reason >= IG_R_MAX) return 0;
  for (int a = 0; a < IG_NUM_ACTIONS; ++a) t += packets[a][reason];
  return t;
}

CookieCounters CookieCounters::from(const XdpCounters& c) {
  CookieCounters k;
  k.syn_cookies_sent = c.byReason(IG_R_SYN_COOKIE_SENT);
  k.acks_deferred = c.byReason(IG_R_COOKIE_ACK_DEFERRED);
  k.cookies_valid = c.byReason(IG_R_COOKIE_VALID);
  k.acks_no_match = c.byReason(IG_R_COOKIE_NO_MATCH);
  k.rst_rate_limited = c.byReason(IG_R_RST_RATE_LIMITED);
  return k;
}

absl::Status checkOptions(const XdpOptions& o) {
  ig_config scratch;
  return buildConfig(o, &scratch);
}

absl::Status buildConfig(const XdpOptions& o, ig_config* cfg) {
  std::memset(cfg, 0, sizeof(*cfg));
  if (o.service_ports.empty() || o.service_ports.size() > IG_MAX_PORTS)
    return absl::InvalidArgumentError(
        fmt::format("xdp: {} service ports (expected 1..{})", o.service_ports.size(), IG_MAX_PORTS));
  for (size_t i = 0; i < o.service_ports.size(); ++i) cfg->ports[i] = htons(o.service_ports[i]);
  cfg->nports = static_cast<uint32_t>(o.service_ports.size());

  if (o.methods.empty() || o.methods.size() > IG_MAX_METHODS)
    return absl::InvalidArgumentError(
        fmt::format("xdp.methods: {} methods (expected 1..{})", o.methods.size(), IG_MAX_METHODS));
  for (size_t i = 0; i < o.methods.size(); ++i) {
    const std::string& m = o.methods[i];
    if (m.empty() || m.size() > 8)
      return absl::InvalidArgumentError(fmt::format("xdp.methods[{}]: '{}' must be 1..8 bytes", i, m));
    uint64_t key = 0;
    for (size_t j = 0; j < m.size(); ++j) {
      if (m[j] < 'A' || m[j] > 'Z')
        return absl::InvalidArgumentError(
            fmt::format("xdp.methods[{}]: '{}' must be upper-case letters", i, m));
      key |= static_cast<uint64_t>(static_cast<uint8_t>(m[j])) << (8 * j);
    }
    cfg->method_key[i] = key;
  }
  cfg->nmethods = static_cast<uint32_t>(o.methods.size());

  if (o.path_prefixes.size() + o.path_classes.size() > IG_MAX_PREFIXES)
    return absl::InvalidArgumentError(fmt::format(
        "xdp.path_prefixes: {} prefixes and {} class rules (at most {} together)",
        o.path_prefixes.size(), o.path_classes.size(), IG_MAX_PREFIXES));
  uint32_t n = 0;
  // class rules first: the first matching rule with a class wins
  for (size_t i = 0; i < o.path_classes.size(); ++i) {
    const auto& r = o.path_classes[i];
    if (r.cls < 0 || r.cls >= kNumClasses)
      return absl::InvalidArgumentError(
          fmt::format("xdp.path_classes[{}]: class {} (expected 0..{})", i, r.cls, kNumClasses - 1));
    if (auto s = fillPrefix(r.prefix, false, r.cls, &cfg->prefix[n++],
                            fmt::format("xdp.path_classes[{}]", i));
        !s.ok())
      return s;
  }
  for (size_t i = 0; i < o.path_prefixes.size(); ++i) {
    if (auto s = fillPrefix(o.path_prefixes[i], true, -1, &cfg->prefix[n++],
                            fmt::format("xdp.path_prefixes[{}]", i));
        !s.ok())
      return s;
  }
  cfg->nprefixes = n;
  if (o.http2_max_frame_size < 16384 || o.http2_max_frame_size > 16777215)
    return absl::InvalidArgumentError(fmt::format(
        "xdp.http2_max_frame_size: {} (expected 16384..16777215)", o.http2_max_frame_size));
  cfg->h2_max_frame = o.http2_max_frame_size;
  cfg->syn_rate = o.syn_rate_per_sec;
  cfg->syn_burst = o.syn_burst ? o.syn_burst : o.syn_rate_per_sec;
  cfg->req_rate = o.request_rate_per_sec;
  cfg->req_burst = o.request_burst ? o.request_burst : o.request_rate_per_sec;
  if (o.default_class < 0 || o.default_class >= kNumClasses)
    return absl::InvalidArgumentError(fmt::format("xdp: default class {}", o.default_class));
  cfg->default_cls = static_cast<uint8_t>(o.default_class);
  cfg->send_rst = o.send_rst;
  cfg->priority_header = !o.priority_header                              ? IG_PRIO_HDR_OFF
                         : o.priority_from == XdpOptions::PriorityFrom::kAll ? IG_PRIO_HDR_ALL
                         : o.priority_from == XdpOptions::PriorityFrom::kOff ? IG_PRIO_HDR_OFF
                                                                               : IG_PRIO_HDR_TRUSTED;
  // The placement as asked; loadSkeleton resolves kAuto against this kernel.
  cfg->tag_mode = o.tags == XdpOptions::TagPlacement::kMetadata ? IG_TAG_META
                  : o.tags == XdpOptions::TagPlacement::kPrefix ? IG_TAG_PREFIX
                  : o.tags == XdpOptions::TagPlacement::kAuto   ? IG_TAG_META
                                                                : IG_TAG_NONE;
  if (cfg->tag_mode == IG_TAG_PREFIX && !o.redirect_xsk)
    return absl::InvalidArgumentError(
        "xdp.tags: prefix applies to frames redirected to AF_XDP sockets (afxdp mode) only");
  cfg->track_flows = o.track_flows;
  cfg->cidr_rules = !o.cidr_rules.empty() ||
                    (cfg->priority_header == IG_PRIO_HDR_TRUSTED && !o.trusted_sources.empty());
  cfg->cidr_classes = !o.cidr_rules.empty();
  cfg->redirect_xsk = o.redirect_xsk;
  cfg->reject_mid_stream = o.reject_mid_stream;
  cfg->tx_redirect = o.rst_tx == RstTx::kRedirect;
  cfg->syn_cookies = o.redirect_xsk && o.syn_cookies != SynCookies::kOff;
  cfg->prove_handshake = o.redirect_xsk;
  cfg->frag_policy = o.fragments == FragPolicy::kDropAll ? IG_FRAG_DROP_ALL
                     : o.fragments == FragPolicy::kPass  ? IG_FRAG_PASS
                                                         : IG_FRAG_DROP;
  cfg->rst_rate = o.rst_rate_per_sec;
  cfg->rst_burst = o.rst_burst ? o.rst_burst : o.rst_rate_per_sec;
  cfg->reject_ttl_ns = static_cast<uint64_t>(o.reject_ttl_ms) * 1'000'000;
  if (o.source_prefix_v4 < 1 || o.source_prefix_v4 > 32)
    return absl::InvalidArgumentError(
        fmt::format("xdp.source_prefix_v4: {} (expected 1..32)", o.source_prefix_v4));
  if (o.source_prefix_v6 < 1 || o.source_prefix_v6 > 128)
    return absl::InvalidArgumentError(
        fmt::format("xdp.source_prefix_v6: {} (expected 1..128)", o.source_prefix_v6));
  auto mask32 = [](int bits) -> uint32_t {  // the first `bits` of a word, network order
    if (bits <= 0) return 0;
    if (bits >= 32) return 0xffffffffu;
    return htonl(~((1u << (32 - bits)) - 1));
  };
  cfg->src_mask4 = mask32(o.source_prefix_v4);
  for (int i = 0; i < 4; ++i) cfg->src_mask6[i] = mask32(o.source_prefix_v6 - 32 * i);
  if (o.synack_wscale > 14)
    return absl::InvalidArgumentError(
        fmt::format("xdp: synack_wscale {} (expected 0..14)", o.synack_wscale));
  cfg->synack_mss = o.synack_mss ? o.synack_mss : 1460;
  if (cfg->synack_mss < 536 + 20)
    return absl::InvalidArgumentError(
        fmt::format("xdp: synack_mss {} (expected at least 556)", cfg->synack_mss));
  cfg->synack_wscale = o.synack_wscale;
  if (o.flow_entries == 0 || o.flow_entries > (1u << 24))
    return absl::InvalidArgumentError(
        fmt::format("xdp: flow_entries {} (expected 1..{})", o.flow_entries, 1u << 24));
  uint32_t slots = 1;
  while (slots < o.flow_entries) slots <<= 1;  // a power of two: slot = hash & mask
  cfg->flow_mask = slots - 1;
  return absl::OkStatus();
}

ig_config loadTimePart(const ig_config& c) {
  ig_config l;
  std::memset(&l, 0, sizeof(l));
  l.tag_mode = c.tag_mode;
  l.redirect_xsk = c.redirect_xsk;
  l.tx_redirect = c.tx_redirect;
  l.flow_mask = c.flow_mask;
  l.syn_cookies = c.syn_cookies;
  l.prove_handshake = c.prove_handshake;
  l.synack_mss = c.synack_mss;
  l.synack_wscale = c.synack_wscale;
  return l;
}

FlowTuple FlowTuple::fromSockaddrs(const sockaddr* peer, const sockaddr* local) {
  FlowTuple f;
  auto fill = [&f](const sockaddr* sa, std::array<uint8_t, 16>& addr, uint16_t& port) {
    if (sa->sa_family == AF_INET) {
      auto* s4 = reinterpret_cast<const sockaddr_in*>(sa);
      f.family = AF_INET;
      std::memcpy(addr.data(), &s4->sin_addr, 4);
      port = ntohs(s4->sin_port);
    } else {
      auto* s6 = reinterpret_cast<const sockaddr_in6*>(sa);
      port = ntohs(s6->sin6_port);
      if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
        f.family = AF_INET;
        std::memcpy(addr.data(), reinterpret_cast<const uint8_t*>(&s6->sin6_addr) + 12, 4);
      } else {
        f.family = AF_INET6;
        std::memcpy(addr.data(), &s6->sin6_addr, 16);
      }
    }
  };
  fill(peer, f.peer_addr, f.peer_port);
  fill(local, f.local_addr, f.local_port);
  return f;
}

absl::StatusOr<std::unique_ptr<XdpFilter>> XdpFilter::load(const XdpOptions& opts) {
  std::unique_ptr<XdpFilter> f(new XdpFilter(opts));
  if (auto s = f->loadProgram(); !s.ok()) return s;
  return f;
}

absl::StatusOr<std::unique_ptr<XdpFilter>> XdpFilter::attach(const XdpOptions& opts) {
  return attach(opts, nullptr);
}

absl::StatusOr<std::unique_ptr<XdpFilter>> XdpFilter::attach(
    const XdpOptions& opts, const std::function<absl::Status(XdpFilter&)>& before_attach) {
  if (opts.interface.empty())
    return absl::InvalidArgumentError("xdp.interface is required in xdp-filter and afxdp modes");
  std::unique_ptr<XdpFilter> f(new XdpFilter(opts));
  f->ifindex_ = static_cast<int>(if_nametoindex(opts.interface.c_str()));
  if (f->ifindex_ == 0)
    return absl::NotFoundError(fmt::format("xdp.interface: no interface named '{}'", opts.interface));
  // A veth's XDP_TX queues the frame for the peer but wakes the peer's NAPI only when the peer
  // runs an XDP program itself (drivers/net/veth.c, veth_xdp_flush): with GRO alone there, a
  // RST waits until unrelated traffic arrives (seconds). XDP_REDIRECT to the same interface
  // goes through ndo_xdp_xmit, which flushes. Native mode only: generic XDP_TX uses the stack.
  if (opts.attach == AttachMode::kNative && interfaceDriver(opts.interface) == "veth") {
    f->tx_redirect_ = true;
    if (opts.rst_tx == RstTx::kAuto)
      spdlog::info("xdp: {} is a veth: RSTs are sent with XDP_REDIRECT to {} (XDP_TX on a veth "
                   "is not flushed to a peer without an XDP program)",
                   opts.interface, opts.interface);
  }
  if (opts.keep_attached && !opts.pin_path.empty()) f->reusePinned();
  if (auto s = f->loadProgram(); !s.ok()) {
    if (f->maps_.flows < 0) return s;
    // The pins of a previous process do not fit this program (another build, other map
    // sizes): start over with maps of our own, replacing its program atomically.
    spdlog::warn("xdp: the maps pinned under {} do not fit this program ({}); using new maps",
                 opts.pin_path, std::string(s.message()));
    f.reset(new XdpFilter(opts));
    f->ifindex_ = static_cast<int>(if_nametoindex(opts.interface.c_str()));
    f->tx_redirect_ = opts.attach == AttachMode::kNative && interfaceDriver(opts.interface) == "veth";
    if (auto s2 = f->loadProgram(); !s2.ok()) return s2;
  }
  if (before_attach) {
    if (auto s = before_attach(*f); !s.ok()) return s;
  }
  if (auto s = f->attachProgram(); !s.ok()) return s;
  if (!opts.pin_path.empty()) {
    if (auto s = f->pinMaps(); !s.ok()) return s;
  }
  return f;
}

absl::Status XdpFilter::loadProgram() {
  absl::StatusOr<ig_ingress*> skel = loadSkeleton(opts_);
  if (!skel.ok()) return skel.status();
  skel_ = *skel;
  if (maps_.flows < 0) {  // the first program: its maps are the ones every later one shares
    auto own = [](bpf_map* m) { return fcntl(bpf_map__fd(m), F_DUPFD_CLOEXEC, 3); };
    maps_.counters = own(skel_->maps.ig_counters);
    maps_.class_counters = own(skel_->maps.ig_class_counters);
    maps_.flows = own(skel_->maps.ig_flows);
    maps_.buckets = own(skel_->maps.ig_buckets);
    maps_.state = own(skel_->maps.ig_state);
    maps_.cookie = own(skel_->maps.ig_cookie);
    maps_.xsks = own(skel_->maps.ig_xsks);
    maps_.rst_tokens = own(skel_->maps.ig_rst_tokens);
  }
  // The rules of the program in force (this one, until attach adopts another).
  cidrs_fd_ = fcntl(bpf_map__fd(skel_->maps.ig_cidrs), F_DUPFD_CLOEXEC, 3);
  rules_fd_ = fcntl(bpf_map__fd(skel_->maps.ig_rules), F_DUPFD_CLOEXEC, 3);
  if (cidrs_fd_ < 0 || rules_fd_ < 0)
    return absl::InternalError(fmt::format("xdp: duplicating the rule maps: {}", errnoText(errno)));
  return absl::OkStatus();
}

absl::StatusOr<ig_ingress*> XdpFilter::loadSkeleton(const XdpOptions& o) {
  setupLibbpf();
  ig_config cfg;
  if (auto s = buildConfig(o, &cfg); !s.ok()) return s;
  ig_ingress* skel = ig_ingress__open();
  if (!skel)
    return absl::InternalError(fmt::format("opening the XDP skeleton: {}", errnoText(errno)));
  struct Destroy {
    ig_ingress*& skel;
    ~Destroy() {
      if (skel) ig_ingress__destroy(skel);
    }
  } destroy{skel};
  if (o.rst_tx == RstTx::kRedirect || (o.rst_tx == RstTx::kAuto && tx_redirect_))
    cfg.tx_redirect = 1;
  if (o.synack_mss == 0 && !o.interface.empty()) {
    int mtu = interfaceMtu(o.interface);
    if (mtu >= 576 + 40) cfg.synack_mss = static_cast<uint16_t>(std::min(mtu - 40, 65495));
  }
  flow_mask_ = cfg.flow_mask;
  // The tag placement: the best this kernel accepts, probed by loading a program that calls
  // the helper (xdp/host_probe.h), so the verifier never sees a helper the kernel refuses.
  tag_reason_ = "asked for";
  if (cfg.tag_mode == IG_TAG_META) {
    const HelperProbe meta = probeXdpHelper(BPF_FUNC_xdp_adjust_meta);
    if (!meta.permission && !(meta.loaded && meta.call_ok)) {
      if (o.tags == XdpOptions::TagPlacement::kMetadata)
        return absl::FailedPreconditionError(fmt::format(
            "xdp.tags: metadata: this kernel cannot write XDP metadata: bpf_xdp_adjust_meta {}; "
            "use xdp.tags: prefix (or auto, which picks it)",
            meta.detail));
      cfg.tag_mode = o.redirect_xsk ? IG_TAG_PREFIX : IG_TAG_NONE;
      tag_reason_ = "bpf_xdp_adjust_meta " + meta.detail;
    } else {
      tag_reason_ = meta.loaded ? "bpf_xdp_adjust_meta accepted" : meta.detail;
    }
  }
  tag_mode_ = cfg.tag_mode;
  const ig_config load_time = loadTimePart(cfg);
  std::memcpy(&skel->rodata->ig_cfg, &load_time, sizeof(load_time));
  if (!have_secret_) {
    flow_secret_ = common::randomSipKey();
    have_secret_ = true;
  }
  std::memcpy(&skel->rodata->ig_flow_secret, &flow_secret_, sizeof(flow_secret_));
  bpf_map__set_max_entries(skel->maps.ig_flows, cfg.flow_mask + 1);
  bpf_map__set_max_entries(skel->maps.ig_buckets, o.bucket_entries ? o.bucket_entries : 1);
  if (maps_.flows >= 0) {  // a later program, or a previous process's pins: share the maps
    const std::pair<bpf_map*, int> shared[] = {
        {skel->maps.ig_counters, maps_.counters}, {skel->maps.ig_class_counters, maps_.class_counters},
        {skel->maps.ig_flows, maps_.flows},       {skel->maps.ig_buckets, maps_.buckets},
        {skel->maps.ig_state, maps_.state},       {skel->maps.ig_cookie, maps_.cookie},
        {skel->maps.ig_xsks, maps_.xsks},         {skel->maps.ig_rst_tokens, maps_.rst_tokens}};
    for (const auto& [m, fd] : shared) {
      if (fd < 0) continue;
      if (int err = bpf_map__reuse_fd(m, fd); err)
        return absl::FailedPreconditionError(
            fmt::format("xdp: map {} cannot be shared: {}", bpf_map__name(m), errnoText(err)));
    }
  }
  // The verifier's log of the main program, kept for a refused load (its tail: the kernel
  // keeps the last bytes when the log outgrows the buffer).
  std::vector<char> vlog(4u << 20);
  vlog[0] = '\0';
  bpf_program__set_log_buf(skel->progs.ig_xdp_ingress, vlog.data(), vlog.size());
  int err = ig_ingress__load(skel);
  if (err && vlog[0] != '\0' && errno != EPERM && err != -EPERM) {
    const std::string reason = verifierReason(vlog.data());
    const std::string file = writeVerifierLog(vlog.data());
    std::string hint;
    if (reason.find("cannot use helper") != std::string::npos)
      hint = reason.find("adjust_meta") != std::string::npos
                 ? "; this kernel refuses XDP metadata: set xdp.tags: prefix (auto picks it)"
                 : "; this kernel refuses a helper the program calls: infergate doctor says "
                   "what this host gives";
    return absl::FailedPreconditionError(fmt::format(
        "loading the XDP program failed: {}: the verifier said '{}'{} (whole log: {})",
        errnoText(err), reason, hint, file.empty() ? "not written" : file));
  }
  if (err) {
    if (err == -EPERM || errno == EPERM)
      return absl::PermissionDeniedError(
          "loading the XDP program was refused (EPERM): run as root or grant CAP_BPF, "
          "CAP_NET_ADMIN and CAP_PERFMON, and check kernel.unprivileged_bpf_disabled");
    if (maps_.flows >= 0)
      return absl::FailedPreconditionError(fmt::format(
          "loading the XDP program over the shared maps failed: {}", errnoText(err)));
    return absl::InternalError(fmt::format(
        "loading the XDP program failed: {} (run with log level debug for the verifier log)",
        errnoText(err)));
  }
  {
    std::lock_guard<std::mutex> lock(runtime_mu_);
    if (maps_.flows < 0) {  // a new state; a shared one keeps its overload level and cookie mode
      runtime_.overload_level = static_cast<uint32_t>(o.overload_level);
      runtime_.cookie_mode = cfg.syn_cookies && o.syn_cookies == SynCookies::kAlways
                                 ? IG_COOKIE_ON
                                 : IG_COOKIE_OFF;
    }
    uint32_t zero = 0;
    if (bpf_map__update_elem(skel->maps.ig_state, &zero, sizeof(zero), &runtime_,
                             sizeof(runtime_), BPF_ANY))
      return absl::InternalError(fmt::format("xdp: writing ig_state: {}", errnoText(errno)));
  }
  // Both entries of a new program's ig_rules hold its rules: whichever rules_slot the (maybe
  // shared) ig_state names, they are in force.
  for (uint32_t slot = 0; slot < 2; ++slot) {
    if (bpf_map__update_elem(skel->maps.ig_rules, &slot, sizeof(slot), &cfg, sizeof(cfg), BPF_ANY))
      return absl::InternalError(fmt::format("xdp: writing ig_rules: {}", errnoText(errno)));
  }
  absl::StatusOr<std::vector<CidrEntry>> entries = cidrEntries(o);
  if (!entries.ok()) return entries.status();
  for (const CidrEntry& e : *entries) {
    ig_cidr_key k{};
    k.prefixlen = e.cidr.prefix;
    std::memcpy(k.addr, e.cidr.addr.data(), 16);
    ig_cidr_val v{};
    v.cls = e.cls;
    v.exempt = e.exempt;
    v.trusted = e.trusted;
    if (bpf_map__update_elem(skel->maps.ig_cidrs, &k, sizeof(k), &v, sizeof(v), BPF_ANY))
      return absl::InternalError(
          fmt::format("xdp: CIDR map update for {}: {}", e.cidr.toString(), errnoText(errno)));
  }
  ig_ingress* out = skel;
  skel = nullptr;  // loaded: the caller owns it
  return out;
}

namespace {

// The read-only data (ig_cfg, the flow secret) and the map ids of a loaded program.
bool programRodata(int prog_fd, ig_ingress::ig_ingress__rodata* out, std::vector<uint32_t>* map_ids) {
  uint32_t ids[32] = {};
  bpf_prog_info info{};
  info.nr_map_ids = 32;
  info.map_ids = reinterpret_cast<uint64_t>(ids);
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0) return false;
  bool found = false;
  for (uint32_t i = 0; i < std::min<uint32_t>(info.nr_map_ids, 32); ++i) {
    if (map_ids) map_ids->push_back(ids[i]);
    int fd = bpf_map_get_fd_by_id(ids[i]);
    if (fd < 0) continue;
    bpf_map_info mi{};
    uint32_t mlen = sizeof(mi);
    // The section's value starts with the skeleton's struct (its layout) and may hold more
    // constants after it.
    if (!found && bpf_obj_get_info_by_fd(fd, &mi, &mlen) == 0 &&
        std::string_view(mi.name).find(".rodata") != std::string_view::npos &&
        mi.value_size >= sizeof(*out) && mi.value_size <= (1u << 20)) {
      std::vector<uint8_t> value(mi.value_size);
      uint32_t zero = 0;
      found = bpf_map_lookup_elem(fd, &zero, value.data()) == 0;
      if (found) std::memcpy(out, value.data(), sizeof(*out));
    }
    close(fd);
  }
  return found;
}

uint32_t mapId(int fd) {
  bpf_map_info mi{};
  uint32_t len = sizeof(mi);
  return fd >= 0 && bpf_obj_get_info_by_fd(fd, &mi, &len) == 0 ? mi.id : 0;
}

constexpr const char* kPinnedMaps[] = {"ig_counters", "ig_class_counters", "ig_flows",
                                       "ig_buckets",  "ig_state",          "ig_cookie",
                                       "ig_rst_tokens"};

}  // namespace

void XdpFilter::reusePinned() {
  int* fds[] = {&maps_.counters, &maps_.class_counters, &maps_.flows,     &maps_.buckets,
                &maps_.state,    &maps_.cookie,         &maps_.rst_tokens};
  for (size_t i = 0; i < std::size(kPinnedMaps); ++i) {
    std::string path = opts_.pin_path + "/" + kPinnedMaps[i];
    *fds[i] = bpf_obj_get(path.c_str());
  }
  if (maps_.flows < 0 || maps_.counters < 0 || maps_.state < 0) {  // none, or a partial set
    for (int* fd : fds) {
      if (*fd >= 0) close(*fd);
      *fd = -1;
    }
    return;
  }
  // The flow secret of the program on the interface, when it is an infergate program over
  // these maps: flow entries it wrote stay readable by our lookups.
  uint32_t id = 0;
  const uint32_t mode = opts_.attach == AttachMode::kNative ? XDP_FLAGS_DRV_MODE : XDP_FLAGS_SKB_MODE;
  if (bpf_xdp_query_id(ifindex_, static_cast<int>(mode), &id) == 0 && id != 0) {
    int fd = bpf_prog_get_fd_by_id(id);
    ig_ingress::ig_ingress__rodata ro{};
    std::vector<uint32_t> ids;
    if (fd >= 0 && programRodata(fd, &ro, &ids) &&
        std::find(ids.begin(), ids.end(), mapId(maps_.flows)) != ids.end()) {
      flow_secret_ = ro.ig_flow_secret;
      have_secret_ = true;
    }
    if (fd >= 0) close(fd);
  }
  // The run-time state goes on as the previous process left it (overload level, cookie mode,
  // the ig_rules entry in force) until this process sets it.
  {
    std::lock_guard<std::mutex> lock(runtime_mu_);
    uint32_t zero = 0;
    ig_runtime rt{};
    if (bpf_map_lookup_elem(maps_.state, &zero, &rt) == 0) runtime_ = rt;
  }
  spdlog::info("xdp: reusing the maps pinned under {} (xdp.keep_attached){}", opts_.pin_path,
               have_secret_ ? ", and the flow secret of the attached program" : "");
}

absl::StatusOr<std::vector<CidrEntry>> cidrEntries(const XdpOptions& o) {
  struct Rule {
    common::Cidr cidr;
    uint8_t cls;
    uint8_t exempt;
  };
  std::vector<Rule> rules;
  for (size_t i = 0; i < o.cidr_rules.size(); ++i) {
    const CidrRule& r = o.cidr_rules[i];
    absl::StatusOr<common::Cidr> c = common::parseCidr(r.cidr);
    if (!c.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("xdp.cidr_rules[{}]: {}", i, std::string(c.status().message())));
    }
    if (r.cls >= kNumClasses) {
      return absl::InvalidArgumentError(fmt::format("xdp.cidr_rules[{}]: class {}", i, r.cls));
    }
    rules.push_back({*c, r.cls < 0 ? uint8_t{IG_CLASS_NONE} : static_cast<uint8_t>(r.cls),
                     uint8_t{r.exempt}});
  }
  common::CidrSet trusted;
  if (o.priority_header && o.priority_from == XdpOptions::PriorityFrom::kTrusted) {
    absl::StatusOr<common::CidrSet> t = common::CidrSet::parse(o.trusted_sources);
    if (!t.ok()) {
      return absl::InvalidArgumentError("priority.trusted_sources" +
                                        std::string(t.status().message()));
    }
    trusted = std::move(*t);
  }
  // One LPM trie holds both lists. The entry an address matches is its longest prefix, so
  // each entry carries what every list says about that prefix: class and exemption of the
  // longest class rule covering it, trust if any trusted source covers it.
  std::vector<common::Cidr> prefixes;
  for (const Rule& r : rules) prefixes.push_back(r.cidr);
  for (const common::Cidr& c : trusted.cidrs()) prefixes.push_back(c);
  std::vector<CidrEntry> out;
  for (const common::Cidr& c : prefixes) {
    bool dup = false;
    for (const CidrEntry& e : out) dup = dup || e.cidr == c;
    if (dup) continue;
    CidrEntry e;
    e.cidr = c;
    const Rule* best = nullptr;
    for (const Rule& r : rules) {
      if (r.cidr.covers(c) && (best == nullptr || r.cidr.prefix > best->cidr.prefix)) best = &r;
    }
    if (best != nullptr) {
      e.cls = best->cls;
      e.exempt = best->exempt;
    }
    e.trusted = trusted.covers(c) ? 1 : 0;
    out.push_back(e);
  }
  if (out.size() > kMaxCidrEntries) {
    return absl::InvalidArgumentError(fmt::format(
        "xdp.cidr_rules and priority.trusted_sources make {} prefixes (at most {})", out.size(),
        kMaxCidrEntries));
  }
  return out;
}

absl::Status XdpFilter::attachProgram() {
  const std::string_view mode = attachModeName(opts_.attach);
  uint32_t mode_flag = opts_.attach == AttachMode::kNative ? XDP_FLAGS_DRV_MODE : XDP_FLAGS_SKB_MODE;
  int prog_fd = bpf_program__fd(skel_->progs.ig_xdp_ingress);

  // What runs there now? Ours (a previous infergate) is replaced atomically; others are kept.
  uint32_t old_id = 0;
  int old_fd = -1;
  if (bpf_xdp_query_id(ifindex_, static_cast<int>(mode_flag), &old_id) == 0 && old_id != 0) {
    old_fd = bpf_prog_get_fd_by_id(old_id);
    bpf_prog_info info{};
    uint32_t len = sizeof(info);
    if (old_fd < 0 || bpf_obj_get_info_by_fd(old_fd, &info, &len) != 0) {
      if (old_fd >= 0) close(old_fd);
      return absl::FailedPreconditionError(fmt::format(
          "interface {} already has XDP program id {} ({} mode) that cannot be inspected: {}",
          opts_.interface, old_id, mode, errnoText(errno)));
    }
    if (std::strncmp(info.name, kProgName, sizeof(info.name)) != 0) {
      close(old_fd);
      return absl::FailedPreconditionError(fmt::format(
          "interface {} already runs XDP program '{}' (id {}) in {} mode; remove it "
          "(ip link set dev {} xdp off) or choose another xdp.interface",
          opts_.interface, info.name, old_id, mode, opts_.interface));
    }
    if (opts_.keep_attached) {
      // Restart: the previous process's program stays when it is this very program (same
      // instructions, same rules) over the maps we reused; otherwise it is replaced below.
      ig_ingress::ig_ingress__rodata ro{};
      std::vector<uint32_t> ids;
      bpf_prog_info ours{};
      uint32_t ours_len = sizeof(ours);
      const char* differs = nullptr;
      if (!programRodata(old_fd, &ro, &ids)) {
        differs = "its read-only data cannot be read (another build?)";
      } else if (std::memcmp(&ro.ig_cfg, const_cast<const ig_config*>(&skel_->rodata->ig_cfg),
                             sizeof(ro.ig_cfg)) != 0) {
        // (the load-time part only: the rules are map entries, rewritten below)
        differs = "its load-time options (ports, afxdp, RST transmit, flow table) differ";
      } else if (std::memcmp(&ro.ig_flow_secret, &flow_secret_, sizeof(flow_secret_)) != 0 ||
                 std::find(ids.begin(), ids.end(), mapId(maps_.flows)) == ids.end()) {
        differs = "its maps are not the ones pinned under xdp.pin_path";
      } else if (bpf_obj_get_info_by_fd(prog_fd, &ours, &ours_len) != 0 ||
                 std::memcmp(ours.tag, info.tag, sizeof(ours.tag)) != 0) {
        differs = "its instructions differ (another build)";
      }
      if (differs != nullptr) {
        spdlog::info("xdp: the program left on {} (id {}) is not kept: {}", opts_.interface,
                     old_id, differs);
      } else {
        // Its rule maps: this configuration's rules go there (in place, as a reload does).
        int cidrs = -1, rules = -1;
        for (uint32_t map_id : ids) {
          int fd = bpf_map_get_fd_by_id(map_id);
          bpf_map_info mi{};
          uint32_t mlen = sizeof(mi);
          if (fd >= 0 && bpf_obj_get_info_by_fd(fd, &mi, &mlen) == 0) {
            const std::string_view name(mi.name);
            if (name == "ig_cidrs" && cidrs < 0) {
              cidrs = fd;
              continue;
            }
            if (name == "ig_rules" && rules < 0) {
              rules = fd;
              continue;
            }
          }
          if (fd >= 0) close(fd);
        }
        absl::Status applied =
            cidrs >= 0 && rules >= 0
                ? absl::OkStatus()
                : absl::FailedPreconditionError("its rule maps cannot be opened");
        if (applied.ok()) {
          std::swap(cidrs_fd_, cidrs);
          std::swap(rules_fd_, rules);
          applied = applyRules(opts_);
          if (!applied.ok()) {  // back to the loaded program's maps: it replaces the old one
            std::swap(cidrs_fd_, cidrs);
            std::swap(rules_fd_, rules);
          }
        }
        if (cidrs >= 0) close(cidrs);
        if (rules >= 0) close(rules);
        if (applied.ok()) {
          attached_ = true;
          adopted_ = true;
          attach_flags_ = mode_flag;
          attached_prog_fd_ = old_fd;
          spdlog::info("xdp: kept program id {} on {} (left attached by a previous infergate: "
                       "the same program over the pinned maps; this configuration's rules "
                       "written into its rule maps)",
                       old_id, opts_.interface);
          return absl::OkStatus();
        }
        spdlog::info("xdp: the program left on {} (id {}) is not kept: {}", opts_.interface,
                     old_id, std::string(applied.message()));
      }
    }
    spdlog::info("xdp: replacing infergate program id {} on {}", old_id, opts_.interface);
  }
  LIBBPF_OPTS(bpf_xdp_attach_opts, aopts);
  uint32_t flags = mode_flag;
  if (old_fd >= 0) {
    aopts.old_prog_fd = old_fd;
    flags |= XDP_FLAGS_REPLACE;
  } else {
    flags |= XDP_FLAGS_UPDATE_IF_NOEXIST;
  }
  int err = bpf_xdp_attach(ifindex_, prog_fd, flags, &aopts);
  if (old_fd >= 0) close(old_fd);
  if (!err) attached_prog_fd_ = fcntl(prog_fd, F_DUPFD_CLOEXEC, 3);
  if (err) {
    switch (-err) {
      case EPERM:
      case EACCES:
        return absl::PermissionDeniedError(fmt::format(
            "attaching XDP to {} in {} mode was refused: needs CAP_NET_ADMIN (and CAP_BPF)",
            opts_.interface, mode));
      case EOPNOTSUPP:
        return absl::FailedPreconditionError(fmt::format(
            "interface {}'s driver has no {} XDP support; set xdp.attach: generic", opts_.interface,
            mode));
      case EBUSY:
      case EEXIST:
        return absl::FailedPreconditionError(fmt::format(
            "interface {} already has an XDP program in another mode than {}; remove it "
            "(ip link set dev {} xdp off)",
            opts_.interface, mode, opts_.interface));
      default:
        return absl::InternalError(fmt::format(
            "attaching XDP to {} in {} mode failed: {} (a native XDP program limits the MTU; "
            "check `ip link` and dmesg)",
            opts_.interface, mode, errnoText(err)));
    }
  }
  attached_ = true;
  attach_flags_ = mode_flag;
  spdlog::info("xdp: program attached to {} ({} mode), service ports {}", opts_.interface, mode,
               fmt::join(opts_.service_ports, ","));
  return absl::OkStatus();
}

absl::Status XdpFilter::pinMaps() {
  struct statfs st;
  // Create the pin directory itself when its parent is a bpffs (the usual /sys/fs/bpf/<name>).
  if (statfs(opts_.pin_path.c_str(), &st) != 0 && errno == ENOENT) {
    mkdir(opts_.pin_path.c_str(), 0700);
  }
  if (statfs(opts_.pin_path.c_str(), &st) != 0 || st.f_type != BPF_FS_MAGIC)
    return absl::FailedPreconditionError(fmt::format(
        "xdp.pin_path: {} is not a directory on a bpf filesystem (mount -t bpf bpf /sys/fs/bpf "
        "and mkdir it)",
        opts_.pin_path));
  const int fds[] = {maps_.counters, maps_.class_counters, maps_.flows,     maps_.buckets,
                     maps_.state,    maps_.cookie,         maps_.rst_tokens};
  for (size_t i = 0; i < std::size(kPinnedMaps); ++i) {
    std::string path = opts_.pin_path + "/" + kPinnedMaps[i];
    if (opts_.keep_attached && mapId(bpf_obj_get(path.c_str())) == mapId(fds[i]) && mapId(fds[i]) != 0)
      continue;  // already pinned (a previous process's maps we reused)
    unlink(path.c_str());  // a previous run's pin: replaced by ours
    if (bpf_obj_pin(fds[i], path.c_str()) != 0)
      return absl::InternalError(fmt::format("pinning {}: {}", path, errnoText(errno)));
  }
  pinned_ = true;
  return absl::OkStatus();
}

void XdpFilter::detach() {
  if (opts_.keep_attached && (attached_ || pinned_)) {
    if (attached_)
      spdlog::info("xdp: program id {} stays attached to {} and its maps pinned under {} "
                   "(xdp.keep_attached: the next infergate takes them over)",
                   attachedProgramId(), opts_.interface, opts_.pin_path);
    attached_ = false;
    pinned_ = false;
    return;
  }
  if (attached_) {
    LIBBPF_OPTS(bpf_xdp_attach_opts, aopts);
    aopts.old_prog_fd = attached_prog_fd_;
    int err = bpf_xdp_detach(ifindex_, attach_flags_ | XDP_FLAGS_REPLACE, &aopts);
    if (err)
      spdlog::warn("xdp: detaching from {}: {} (another program replaced ours?)", opts_.interface,
                   errnoText(err));
    else
      spdlog::info("xdp: program detached from {}", opts_.interface);
    attached_ = false;
  }
  if (pinned_) {
    for (const char* name : kPinnedMaps) unlink((opts_.pin_path + "/" + name).c_str());
    pinned_ = false;
  }
}

uint32_t XdpFilter::attachedProgramId() const {
  if (attached_prog_fd_ < 0) return 0;
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  return bpf_obj_get_info_by_fd(attached_prog_fd_, &info, &len) == 0 ? info.id : 0;
}

absl::Status XdpFilter::reconfigure(const XdpOptions& next) {
  auto refuse = [](std::string_view key) {
    return absl::FailedPreconditionError(
        fmt::format("xdp.{} cannot change without a restart", key));
  };
  // The load-time part (the program's read-only data, the maps' sizes, the attachment).
  if (next.interface != opts_.interface) return refuse("interface");
  if (next.attach != opts_.attach) return refuse("attach");
  if (next.pin_path != opts_.pin_path) return refuse("pin_path");
  if (next.keep_attached != opts_.keep_attached) return refuse("keep_attached");
  if (next.flow_entries != opts_.flow_entries) return refuse("flow_entries");
  if (next.bucket_entries != opts_.bucket_entries) return refuse("bucket_entries");
  if (next.rst_tx != opts_.rst_tx) return refuse("rst_tx");
  if (next.synack_mss != opts_.synack_mss) return refuse("synack_mss");
  if (next.tags != opts_.tags) return refuse("tags");
  if (next.redirect_xsk != opts_.redirect_xsk ||
      next.syn_cookies != opts_.syn_cookies || next.synack_wscale != opts_.synack_wscale)
    return refuse("syn_cookies");
  if (next.service_ports != opts_.service_ports)
    return absl::FailedPreconditionError("the service ports (listeners) cannot change without a "
                                         "restart");
  if (rules_fd_ < 0 || cidrs_fd_ < 0) return absl::FailedPreconditionError("xdp: no program loaded");
  if (absl::Status st = applyRules(next); !st.ok()) return st;
  const int level = opts_.overload_level;
  opts_ = next;
  opts_.overload_level = level;
  spdlog::info("xdp: rules reloaded in place on {} (program id {} kept, rules entry {})",
               opts_.interface.empty() ? "(not attached)" : opts_.interface, attachedProgramId(),
               rulesSlot());
  return absl::OkStatus();
}

absl::Status XdpFilter::applyRules(const XdpOptions& o) {
  ig_config rules;
  if (absl::Status st = buildConfig(o, &rules); !st.ok()) return st;
  absl::StatusOr<std::vector<CidrEntry>> entries = cidrEntries(o);
  if (!entries.ok()) return entries.status();
  auto key = [](const common::Cidr& c) {
    ig_cidr_key k{};
    k.prefixlen = c.prefix;
    std::memcpy(k.addr, c.addr.data(), 16);
    return k;
  };
  // 1. New and changed prefixes (an entry is written at once; the old rules do not look up
  //    entries they did not have, or treat them as the new rules do).
  for (const CidrEntry& e : *entries) {
    ig_cidr_key k = key(e.cidr);
    ig_cidr_val v{};
    v.cls = e.cls;
    v.exempt = e.exempt;
    v.trusted = e.trusted;
    if (bpf_map_update_elem(cidrs_fd_, &k, &v, BPF_ANY) != 0)
      return absl::InternalError(
          fmt::format("xdp: CIDR map update for {}: {}", e.cidr.toString(), errnoText(errno)));
  }
  // 2. The rules into the entry not in force, then the switch: one aligned 4-byte word of
  //    ig_state (rules_slot), so every packet is judged by the old rules or the new ones. The
  //    entry written here went out of force at the previous switch; a program run that read
  //    it then has long finished (runs last microseconds; kRulesGraceNs keeps two switches
  //    apart).
  {
    std::lock_guard<std::mutex> lock(runtime_mu_);
    const uint64_t now = common::monotonicNs();
    if (last_switch_ns_ != 0 && now - last_switch_ns_ < kRulesGraceNs)
      std::this_thread::sleep_for(std::chrono::nanoseconds(kRulesGraceNs - (now - last_switch_ns_)));
    const uint32_t next_slot = (runtime_.rules_slot & 1) ^ 1;
    if (bpf_map_update_elem(rules_fd_, &next_slot, &rules, BPF_ANY) != 0)
      return absl::InternalError(fmt::format("xdp: writing ig_rules: {}", errnoText(errno)));
    const uint32_t before = runtime_.rules_slot;
    runtime_.rules_slot = next_slot;
    if (absl::Status st = writeRuntime(); !st.ok()) {
      runtime_.rules_slot = before;
      return st;
    }
    last_switch_ns_ = common::monotonicNs();
  }
  // 3. Prefixes that went away (the new rules are in force: nothing they need is removed).
  std::vector<ig_cidr_key> gone;
  ig_cidr_key cur{}, nxt{};
  const void* prev = nullptr;
  for (size_t n = 0; n <= kMaxCidrEntries && bpf_map_get_next_key(cidrs_fd_, prev, &nxt) == 0;
       ++n) {
    bool kept = false;
    for (const CidrEntry& e : *entries) {
      const ig_cidr_key k = key(e.cidr);
      kept = kept || (k.prefixlen == nxt.prefixlen && std::memcmp(k.addr, nxt.addr, 16) == 0);
    }
    if (!kept) gone.push_back(nxt);
    cur = nxt;
    prev = &cur;
  }
  for (const ig_cidr_key& k : gone) {
    if (bpf_map_delete_elem(cidrs_fd_, &k) != 0 && errno != ENOENT)
      return absl::InternalError(fmt::format("xdp: CIDR map delete: {}", errnoText(errno)));
  }
  return absl::OkStatus();
}

uint32_t XdpFilter::rulesSlot() const {
  std::lock_guard<std::mutex> lock(runtime_mu_);
  return runtime_.rules_slot;
}

absl::StatusOr<ig_config> XdpFilter::rulesInForce() const {
  const uint32_t slot = rulesSlot();
  ig_config c{};
  if (rules_fd_ < 0 || bpf_map_lookup_elem(rules_fd_, &slot, &c) != 0)
    return absl::InternalError(fmt::format("xdp: reading ig_rules: {}", errnoText(errno)));
  return c;
}

XdpFilter::~XdpFilter() {
  detach();
  if (skel_) ig_ingress__destroy(skel_);
  for (int fd : {maps_.counters, maps_.class_counters, maps_.flows, maps_.buckets, maps_.state,
                 maps_.cookie, maps_.xsks, maps_.rst_tokens, attached_prog_fd_, cidrs_fd_,
                 rules_fd_}) {
    if (fd >= 0) close(fd);
  }
}

int XdpFilter::xskMapFd() const { return maps_.xsks; }

absl::Status XdpFilter::removeXsk(uint32_t queue) {
  if (maps_.xsks < 0) return absl::OkStatus();
  if (bpf_map_delete_elem(maps_.xsks, &queue) != 0 && errno != ENOENT)
    return absl::InternalError(fmt::format("xdp: removing queue {} from the XSKMAP: {}", queue,
                                           errnoText(errno)));
  return absl::OkStatus();
}

int XdpFilter::programFd() const { return bpf_program__fd(skel_->progs.ig_xdp_ingress); }
int XdpFilter::passProgramFd() const { return bpf_program__fd(skel_->progs.ig_xdp_pass); }

XdpCounters XdpFilter::readCounters() const {
  return readCountersFromFds(maps_.counters, maps_.class_counters);
}

std::optional<std::string> kernelSynCookiesWarning(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "re");
  int v = -1;
  if (f) {
    if (std::fscanf(f, "%d", &v) != 1) v = -1;
    std::fclose(f);
  }
  if (v > 0) return std::nullopt;
  return fmt::format(
      "xdp-filter mode: the kernel's SYN cookies are {} ({}{}): a SYN flood will fill the "
      "listen backlog; set sysctl -w net.ipv4.tcp_syncookies=1 in the gateway's network "
      "namespace (see docs/XDP.md, \"SYN cookies\")",
      v == 0 ? "off" : "unknown", path, v == 0 ? " is 0" : " is unreadable");
}

std::string renderPrometheus(const XdpCounters& c) {
  std::string out;
  // Packets and bytes, each by verdict and reason (a pair is listed once it has seen a packet).
  const struct {
    const char* name;
    const char* what;
    const decltype(c.packets)& value;
  } kByReason[] = {{"infergate_xdp_packets_total", "Packets", c.packets},
                   {"infergate_xdp_bytes_total", "Bytes", c.bytes}};
  for (const auto& m : kByReason) {
    out += fmt::format("# HELP {} {} seen by the XDP ingress program, by verdict and reason.\n",
                       m.name, m.what);
    out += fmt::format("# TYPE {} counter\n", m.name);
    for (int a = 0; a < IG_NUM_ACTIONS; ++a)
      for (int r = 0; r < IG_R_MAX; ++r)
        if (c.packets[a][r])
          out += fmt::format("{}{{verdict=\"{}\",reason=\"{}\"}} {}\n", m.name, actionName(a),
                             reasonName(r), m.value[a][r]);
  }
  out += "# HELP infergate_xdp_requests_total Request starts tagged by the XDP program, by class and tag verdict.\n";
  out += "# TYPE infergate_xdp_requests_total counter\n";
  for (int k = 0; k < IG_NUM_CLASSES; ++k)
    for (int t = 0; t < IG_TV_MAX; ++t)
      out += fmt::format("infergate_xdp_requests_total{{class=\"{}\",verdict=\"{}\"}} {}\n",
                         className(k), tagVerdictName(t), c.requests[k][t]);
  return out;
}

void XdpFilter::registerMetrics(common::MetricsRegistry& registry) {
  registry.addCollector([this](std::string& out) { out += renderPrometheus(readCounters()); });
}

absl::Status XdpFilter::writeRuntime() {
  uint32_t zero = 0;
  if (bpf_map_update_elem(maps_.state, &zero, &runtime_, BPF_ANY))
    return absl::InternalError(fmt::format("xdp: writing ig_state: {}", errnoText(errno)));
  return absl::OkStatus();
}

absl::Status XdpFilter::setOverloadLevel(int level) {
  if (level < 0 || level >= kNumClasses)
    return absl::InvalidArgumentError(
        fmt::format("overload level {} (expected 0..{})", level, kNumClasses - 1));
  std::lock_guard<std::mutex> lock(runtime_mu_);
  runtime_.overload_level = static_cast<uint32_t>(level);
  if (auto s = writeRuntime(); !s.ok()) return s;
  opts_.overload_level = level;
  return absl::OkStatus();
}

absl::Status XdpFilter::setCookieKeys(const ig_cookie_keys& keys) {
  uint32_t zero = 0;
  if (bpf_map_update_elem(maps_.cookie, &zero, &keys, BPF_ANY))
    return absl::InternalError(fmt::format("xdp: writing the SYN cookie keys: {}", errnoText(errno)));
  return absl::OkStatus();
}

absl::Status XdpFilter::setCookieMode(bool on, uint64_t drain_ns) {
  if (!skel_->rodata->ig_cfg.syn_cookies)
    return absl::FailedPreconditionError(
        "xdp: SYN cookies are not loaded (afxdp mode only, and xdp.syn_cookies is off)");
  std::lock_guard<std::mutex> lock(runtime_mu_);
  bool was_on = runtime_.cookie_mode == IG_COOKIE_ON;
  runtime_.cookie_mode = on ? IG_COOKIE_ON : IG_COOKIE_OFF;
  // common::monotonicNs() is CLOCK_MONOTONIC, bpf_ktime_get_ns()'s clock.
  if (!on && was_on) runtime_.cookie_check_until_ns = common::monotonicNs() + drain_ns;
  return writeRuntime();
}

bool XdpFilter::cookieMode() const {
  std::lock_guard<std::mutex> lock(runtime_mu_);
  return runtime_.cookie_mode == IG_COOKIE_ON;
}

std::optional<Tag> XdpFilter::lookupFlowTag(const FlowTuple& f) const {
  ig_flow_key k{};
  size_t n = f.family == AF_INET ? 4 : 16;
  std::memcpy(k.saddr, f.peer_addr.data(), n);
  std::memcpy(k.daddr, f.local_addr.data(), n);
  k.sport = htons(f.peer_port);
  k.dport = htons(f.local_port);
  k.family = f.family == AF_INET ? 4 : 6;
  uint64_t h = ig_flow_hash(&flow_secret_, &k);
  uint32_t idx = static_cast<uint32_t>(h) & flow_mask_;
  ig_flow_val v{};
  if (bpf_map_lookup_elem(maps_.flows, &idx, &v) != 0)
    return std::nullopt;
  if (v.check != (ig_flow_check(h) | IG_FLOW_TAGGED)) return std::nullopt;
  Tag t;
  t.cls = v.tag.cls;
  t.verdict = v.tag.verdict;
  t.flags = v.tag.flags;
  t.rx_ns = v.tag.rx_ns;
  return t;
}

absl::Status printPinnedStats(const std::string& pin_path, std::FILE* out) {
  std::string cpath = pin_path + "/ig_counters";
  int cfd = bpf_obj_get(cpath.c_str());
  if (cfd < 0)
    return absl::NotFoundError(fmt::format(
        "no XDP counters pinned at {}: {} (is infergate running with xdp.pin_path: {}?)", cpath,
        errnoText(errno), pin_path));
  std::string kpath = pin_path + "/ig_class_counters";
  int kfd = bpf_obj_get(kpath.c_str());
  XdpCounters c = readCountersFromFds(cfd, kfd);
  close(cfd);
  if (kfd >= 0) close(kfd);
  std::fprintf(out, "%-10s %-20s %16s %16s\n", "verdict", "reason", "packets", "bytes");
  for (int a = 0; a < IG_NUM_ACTIONS; ++a)
    for (int r = 0; r < IG_R_MAX; ++r)
      if (c.packets[a][r])
        std::fprintf(out, "%-10s %-20s %16llu %16llu\n", actionName(a), reasonName(r),
                     static_cast<unsigned long long>(c.packets[a][r]),
                     static_cast<unsigned long long>(c.bytes[a][r]));
  std::fprintf(out, "\n%-12s %12s %14s %12s\n", "class", "admitted", "rate_limited", "overload");
  for (int k = 0; k < IG_NUM_CLASSES; ++k)
    std::fprintf(out, "%-12s %12llu %14llu %12llu\n", className(k),
                 static_cast<unsigned long long>(c.requests[k][IG_TV_ADMIT]),
                 static_cast<unsigned long long>(c.requests[k][IG_TV_RATE_LIMITED]),
                 static_cast<unsigned long long>(c.requests[k][IG_TV_OVERLOAD]));
  return absl::OkStatus();
}

}  // namespace infergate::xdp
