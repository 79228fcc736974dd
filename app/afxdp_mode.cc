#include "app/afxdp_mode.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include <linux/capability.h>

#include "app/privileges.h"
#include "app/userspace_stack_mode.h"
#include "backends/model.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "spdlog/spdlog.h"

#include "dataplane/afxdp_reactor.h"
#include "dataplane/tcp/syncookie_jar.h"
#include "dataplane/xsk/xsk_device.h"
#include "xdp/xdp_filter.h"

namespace infergate::app {

namespace {
uint32_t envU32(const char* name, uint32_t def) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return def;
  return static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
}
}  // namespace

AfXdpModeOptions AfXdpModeOptions::fromEnvironment() {
  AfXdpModeOptions o;
  if (const char* z = std::getenv("INFERGATE_AFXDP_ZERO_COPY"); z && *z) o.zero_copy = z;
  o.frames = envU32("INFERGATE_AFXDP_FRAMES", o.frames);
  return o;
}

absl::StatusOr<std::unique_ptr<AfXdpMode>> startAfXdpMode(
    const config::Config& config, const ListenerFactory& factory,
    common::MetricsRegistry& registry, const backends::ModelRegistry* models) {
  return AfXdpMode::start(config, factory, registry, AfXdpModeOptions::fromEnvironment(), models);
}

namespace {

using dataplane::AfXdpReactor;
using dataplane::xsk::XskDevice;
namespace tcp = dataplane::tcp;

// What the /metrics collector reads; outlives the mode (collectors cannot be removed), emptied
// at stop.
struct MetricsView {
  std::mutex mu;
  xdp::XdpFilter* filter = nullptr;
  std::vector<AfXdpReactor*> reactors;
  std::vector<XskDevice*> devices;
};

uint64_t relaxed(const uint64_t& v) {
  // Reactor-owned plain counters read from the admin thread (see dataplane/tcp/counters.h).
  return __atomic_load_n(&v, __ATOMIC_RELAXED);
}

void renderMetrics(MetricsView& view, std::string& out) {
  std::lock_guard<std::mutex> lock(view.mu);
  if (view.reactors.empty()) return;
  if (view.filter) out += xdp::renderPrometheus(view.filter->readCounters());
  renderTcpMetrics(view.reactors, out);
  out += "# TYPE infergate_afxdp_zero_copy gauge\n";
  for (size_t q = 0; q < view.devices.size(); ++q)
    out += fmt::format("infergate_afxdp_zero_copy{{queue=\"{}\"}} {}\n", q,
                       view.devices[q]->zeroCopy() ? 1 : 0);
  std::vector<dataplane::xsk::XskStats> st;
  for (XskDevice* d : view.devices) st.push_back(d->statsWithKernel());
  out += "# TYPE infergate_afxdp_rx_frames_outstanding gauge\n";
  for (size_t q = 0; q < st.size(); ++q)
    out += fmt::format("infergate_afxdp_rx_frames_outstanding{{queue=\"{}\"}} {}\n", q,
                       relaxed(st[q].rx_outstanding));
  auto emit = [&](const char* name, uint64_t dataplane::xsk::XskStats::*f) {
    out += fmt::format("# TYPE infergate_afxdp_{}_total counter\n", name);
    for (size_t q = 0; q < st.size(); ++q)
      out += fmt::format("infergate_afxdp_{}_total{{queue=\"{}\"}} {}\n", name, q, st[q].*f);
  };
  using S = dataplane::xsk::XskStats;
  emit("rx_frames", &S::rx_frames);
  emit("tx_frames", &S::tx_frames);
  emit("tx_kicks", &S::tx_kicks);
  emit("tx_kick_busy", &S::tx_kick_busy);
  emit("rx_wakeups", &S::rx_wakeups);
  emit("tx_alloc_failed", &S::tx_alloc_failed);
  emit("meta_missing", &S::meta_missing);
  emit("tag_prefixed", &S::tag_prefixed);
  emit("kernel_rx_dropped", &S::rx_dropped);
  emit("kernel_rx_ring_full", &S::rx_ring_full);
  emit("kernel_rx_fill_ring_empty", &S::rx_fill_ring_empty);
  emit("kernel_rx_invalid_descs", &S::rx_invalid_descs);
  emit("kernel_tx_invalid_descs", &S::tx_invalid_descs);
}

// The interface's IPv4 address and MAC, for the log ("" when it has none).
std::pair<std::string, std::string> interfaceAddresses(const std::string& ifname) {
  std::string ip, mac;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {ip, mac};
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  if (ioctl(fd, SIOCGIFADDR, &ifr) == 0) {
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ifr.ifr_addr)->sin_addr, buf, sizeof buf);
    ip = buf;
  }
  std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  if (ioctl(fd, SIOCGIFHWADDR, &ifr) == 0) {
    const auto* m = reinterpret_cast<const uint8_t*>(ifr.ifr_hwaddr.sa_data);
    mac = fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5]);
  }
  close(fd);
  return {ip, mac};
}

// Cookie mode at the NIC, decided from the stacks' backlogs (xdp.syn_cookies: auto). On as soon
// as any reactor's half-open connections reach half its backlog (or a SYN found it full);
// off again once the program's cookie SYN-ACK rate has stayed below a tenth of the backlog
// per second for kCalmNs (the stacks can keep state for that many again). While on, SYNs never
// reach userspace; ACKs and first data segments that prove a cookie create connections.
class CookieModeController {
 public:
  static constexpr uint64_t kPeriodNs = 50'000'000;
  static constexpr uint64_t kCalmNs = 10'000'000'000;

  CookieModeController(xdp::XdpFilter& filter, std::vector<AfXdpReactor*> reactors,
                       uint32_t syn_backlog)
      : filter_(filter), reactors_(std::move(reactors)), backlog_(std::max(1u, syn_backlog)) {
    full_seen_.assign(reactors_.size(), 0);
    thread_ = std::thread([this] { run(); });
  }
  ~CookieModeController() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();  // pairs with the wait in run()
    thread_.join();
  }
  uint64_t switches() const { return switches_.load(std::memory_order_relaxed); }

 private:
  static uint64_t nowNs() {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  }
  void run() {
    bool on = filter_.cookieMode();
    uint64_t calm_since = 0, cookies_at_calm = 0;
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::nanoseconds(kPeriodNs), [this] { return stop_; })) {
      const uint64_t now = nowNs();
      bool pressure = false;
      for (size_t i = 0; i < reactors_.size(); ++i) {
        const tcp::TcpCounters& c = reactors_[i]->tcpCounters();
        const uint64_t half_open = __atomic_load_n(
            &c.conns_by_state[static_cast<size_t>(tcp::TcpState::kSynReceived)], __ATOMIC_RELAXED);
        const uint64_t full = __atomic_load_n(&c.syn_backlog_full, __ATOMIC_RELAXED);
        if (half_open >= backlog_ / 2 || full != full_seen_[i]) pressure = true;
        full_seen_[i] = full;
      }
      const uint64_t sent = xdp::CookieCounters::from(filter_.readCounters()).syn_cookies_sent;
      if (pressure) {
        calm_since = 0;
        if (!on && set(true)) on = true;
        continue;
      }
      if (!on) continue;
      if (calm_since == 0) {
        calm_since = now;
        cookies_at_calm = sent;
        continue;
      }
      if (now - calm_since < kCalmNs) continue;
      const uint64_t rate = (sent - cookies_at_calm) * 1'000'000'000ull / (now - calm_since);
      if (rate < backlog_ / 10 && set(false)) {
        on = false;
      } else {
        calm_since = now;  // still flooded: look again after another calm period
        cookies_at_calm = sent;
      }
    }
  }
  bool set(bool on) {
    if (absl::Status st = filter_.setCookieMode(on); !st.ok()) {
      spdlog::warn("afxdp: SYN cookie mode: {}", st.ToString());
      return false;
    }
    switches_.fetch_add(1, std::memory_order_relaxed);
    spdlog::info("afxdp: SYN cookies at the NIC {}", on ? "on (a backlog is under pressure)"
                                                        : "off (the SYN rate is back to normal)");
    return true;
  }

  xdp::XdpFilter& filter_;
  std::vector<AfXdpReactor*> reactors_;
  const uint32_t backlog_;
  std::vector<uint64_t> full_seen_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<uint64_t> switches_{0};
  std::thread thread_;
};

}  // namespace

struct AfXdpMode::State {
  std::shared_ptr<tcp::SynCookieJar> cookie_jar = std::make_shared<tcp::SynCookieJar>();
  std::unique_ptr<CookieModeController> cookie_ctl;
  std::unique_ptr<xdp::XdpFilter> filter;
  std::vector<std::unique_ptr<AfXdpReactor>> reactors;
  std::vector<XskDevice*> devices;  // owned by the reactors
  std::shared_ptr<MetricsView> view = std::make_shared<MetricsView>();
  const backends::ModelRegistry* models = nullptr;  // overload listeners set (cleared at stop)
  bool cookie_auto = false;      // serve() starts the cookie controller
  uint32_t syn_backlog = 0;
  std::string interface;
  bool stopped = false;
};

AfXdpMode::AfXdpMode() : state_(std::make_unique<State>()) {}

AfXdpMode::~AfXdpMode() { stop(0); }

absl::StatusOr<std::unique_ptr<AfXdpMode>> AfXdpMode::start(const config::Config& c,
                                                           const ListenerFactory& factory,
                                                           common::MetricsRegistry& registry,
                                                           const AfXdpModeOptions& o,
                                                           const backends::ModelRegistry* models) {
  const std::string& ifname = c.xdp.interface;
  if (ifname.empty())
    return absl::InvalidArgumentError("xdp.interface is required in mode afxdp");
  if (if_nametoindex(ifname.c_str()) == 0)
    return absl::NotFoundError(fmt::format("xdp.interface: no interface named '{}'", ifname));
  dataplane::xsk::ZeroCopy zc;
  if (o.zero_copy == "auto") zc = dataplane::xsk::ZeroCopy::kAuto;
  else if (o.zero_copy == "require") zc = dataplane::xsk::ZeroCopy::kRequire;
  else if (o.zero_copy == "off") zc = dataplane::xsk::ZeroCopy::kOff;
  else
    return absl::InvalidArgumentError(fmt::format(
        "INFERGATE_AFXDP_ZERO_COPY='{}' (expected auto, require or off)", o.zero_copy));

  // One reactor per rx queue: RSS spreads flows over the queues, and each queue's frames are
  // redirected to that queue's socket only.
  absl::StatusOr<uint32_t> queues = dataplane::xsk::rxQueueCount(ifname);
  if (!queues.ok()) return queues.status();
  if (*queues != static_cast<uint32_t>(c.reactors))
    return absl::FailedPreconditionError(fmt::format(
        "afxdp mode needs one reactor per rx queue: interface {} has {} rx queue(s) but "
        "reactors is {}; set reactors: {} or change the queue count (ethtool -L {} combined {})",
        ifname, *queues, c.reactors, *queues, ifname, c.reactors));
  if (*queues > xdp::XdpFilter::kMaxXskQueues)
    return absl::FailedPreconditionError(fmt::format(
        "interface {} has {} rx queues; afxdp mode supports at most {}", ifname, *queues,
        xdp::XdpFilter::kMaxXskQueues));

  absl::StatusOr<std::vector<uint16_t>> service_ports =
      servicePorts(c, "afxdp", "the XDP program needs the port");
  if (!service_ports.ok()) return service_ports.status();
  const std::vector<uint16_t>& ports = *service_ports;
  xdp::XdpOptions xo = c.xdp;
  xo.service_ports = ports;
  xo.redirect_xsk = true;  // before the check: xdp.tags: prefix needs it
  if (absl::Status s = xdp::checkOptions(xo); !s.ok()) return s;
  // The program's tags reach the stack in metadata or in a prefix (xdp.tags; auto: the best
  // this kernel accepts, XdpFilter::tagMode()).
  if (xo.tags == xdp::XdpOptions::TagPlacement::kOff) xo.tags = xdp::XdpOptions::TagPlacement::kAuto;
  xo.reject_mid_stream = false;  // our TCP + HTTP validate mid-stream requests in full
  // Cookie SYN-ACKs from the program must announce the window shift the stack uses.
  xo.synack_wscale = tcp::windowShiftFor(c.afxdp_tcp_rcv_buf);
  const tcp::SynCookies stack_cookies = stackSynCookies(xo.syn_cookies);

  const auto [ip, mac] = interfaceAddresses(ifname);
  std::unique_ptr<AfXdpMode> mode(new AfXdpMode());
  State& st = *mode->state_;
  st.interface = ifname;
  const unsigned ncpu = std::max(1u, std::thread::hardware_concurrency());

  // Sockets first (into the XSKMAP), then the program: no service segment falls through to
  // the kernel, which has no listener on these ports and would reset the connection.
  auto bind_sockets = [&](xdp::XdpFilter& filter) -> absl::Status {
    for (int q = 0; q < c.reactors; ++q) {
      dataplane::xsk::XskOptions so;
      so.interface = ifname;
      so.queue = static_cast<uint32_t>(q);
      so.rx_frames = o.frames;
      so.tx_frames = o.frames;
      // Spare rx frames for out-of-order segments the stack holds (xdp.held_frames).
      so.hold_frames = c.afxdp_held_frames;
      so.zero_copy = zc;
      so.tag_mode = static_cast<uint8_t>(filter.tagMode());  // as the program was loaded
      so.xskmap_fd = filter.xskMapFd();
      so.busy_poll = c.xdp.busy_poll;
      so.prefer_busy_poll = c.xdp.prefer_busy_poll;
      so.busy_poll_usecs = c.xdp.busy_poll_usecs;
      so.busy_poll_budget = c.xdp.busy_poll_budget;
      absl::StatusOr<std::unique_ptr<XskDevice>> dev = XskDevice::open(so);
      if (!dev.ok()) return dev.status();
      XskDevice* raw = dev->get();
      // One key pair for every reactor and the program.
      dataplane::AfXdpReactorOptions ro =
          userspaceReactorOptions(c, q, st.cookie_jar, stack_cookies, registry);
      ro.cpu = c.cpus.empty() ? static_cast<int>(static_cast<unsigned>(q) % ncpu) : c.cpus[q];
      ro.busy_poll = c.xdp.busy_poll;
      auto reactor = std::make_unique<AfXdpReactor>(ro, std::move(*dev));
      if (absl::Status s = listenAll(*reactor, c, factory); !s.ok()) return s;
      st.devices.push_back(raw);
      st.reactors.push_back(std::move(reactor));
    }
    // Always: the stacks' ISNs are cookies whatever the mode, and the program proves
    // handshakes with these keys (request-rate charging of proven flows only).
    if (absl::Status s = filter.setCookieKeys(st.cookie_jar->snapshot()); !s.ok()) return s;
    return absl::OkStatus();
  };
  absl::StatusOr<std::unique_ptr<xdp::XdpFilter>> filter = xdp::XdpFilter::attach(xo, bind_sockets);
  if (!filter.ok()) {
    st.reactors.clear();
    return filter.status();
  }
  st.filter = std::move(*filter);
  spdlog::info("afxdp: the XDP program's tags reach the stack {} ({})",
               st.filter->tagMode() == IG_TAG_META ? "in XDP metadata"
                                                   : "as a 16-byte prefix in front of each frame",
               st.filter->tagReason());
  {
    std::lock_guard<std::mutex> lock(st.view->mu);
    st.view->filter = st.filter.get();
    for (auto& r : st.reactors) st.view->reactors.push_back(r.get());
    st.view->devices = st.devices;
  }
  registry.addCollector([view = st.view](std::string& out) { renderMetrics(*view, out); });
  if (models != nullptr) {
    st.models = models;
    publishOverloadLevels(*models, [f = st.filter.get()](int level) {
      return f->setOverloadLevel(level);
    });
  }
  {
    // Rotations happen on whichever reactor's poll finds the period over; the program's map
    // follows at once (its previous key stays valid, like the stacks').
    st.cookie_jar->setListener([f = st.filter.get()](const ig_cookie_keys& keys) {
      if (absl::Status s = f->setCookieKeys(keys); !s.ok())
        spdlog::warn("afxdp: SYN cookie keys: {}", s.ToString());
    });
  }
  st.cookie_auto = xo.syn_cookies == xdp::SynCookies::kAuto;
  st.syn_backlog = synBacklogPerReactor(c);
  for (const config::ListenerConfig& l : c.listeners) {
    spdlog::info("listener '{}' on {} port {} protocol {} (afxdp: {} queue(s), userspace TCP)",
                 l.name, ifname, l.port, l.protocol, c.reactors);
  }
  spdlog::info("afxdp: {} ({} {}), {} queue(s) in {} mode{}, XDP redirect for port(s) {}", ifname,
               ip.empty() ? "no IPv4 address" : ip, mac, c.reactors,
               st.devices.front()->zeroCopy() ? "zero-copy" : "copy",
               c.xdp.busy_poll ? ", busy polling" : "", fmt::join(ports, ","));
  return mode;
}

void AfXdpMode::serve() {
  State& st = *state_;
  for (auto& r : st.reactors) r->start();
  if (st.cookie_auto) {
    std::vector<AfXdpReactor*> rs;
    for (auto& r : st.reactors) rs.push_back(r.get());
    st.cookie_ctl = std::make_unique<CookieModeController>(*st.filter, std::move(rs), st.syn_backlog);
  }
}

void AfXdpMode::stop(uint64_t drain_ms) {
  if (!state_ || state_->stopped) return;
  State& st = *state_;
  st.stopped = true;
  if (st.models != nullptr) clearOverloadListeners(*st.models);  // before the filter goes
  st.cookie_ctl.reset();                // before the filter and the reactors go
  st.cookie_jar->setListener(nullptr);  // no rotation may reach the filter after this
  stopReactors(st.reactors, drain_ms);
  {
    std::lock_guard<std::mutex> lock(st.view->mu);
    st.view->reactors.clear();
    st.view->devices.clear();
    st.view->filter = nullptr;
  }
  if (st.filter) {
    for (size_t q = 0; q < st.reactors.size(); ++q) {
      if (absl::Status s = st.filter->removeXsk(static_cast<uint32_t>(q)); !s.ok())
        spdlog::warn("{}", std::string(s.message()));
    }
  }
  st.reactors.clear();  // closes the sockets and frees the UMEMs
  st.devices.clear();
  if (st.filter) {
    // Detaching goes through netlink: CAP_NET_ADMIN, the one capability kept after the drop.
    ScopedCapability net_admin(CAP_NET_ADMIN);
    st.filter->detach();
    st.filter.reset();
  }
  spdlog::info("afxdp: stopped; XDP program detached from {}", st.interface);
}

absl::Status AfXdpMode::reconfigureXdp(const xdp::XdpOptions& next) {
  State& st = *state_;
  if (st.stopped || !st.filter)
    return absl::FailedPreconditionError("the XDP program is not attached");
  const xdp::XdpOptions& now = st.filter->options();
  xdp::XdpOptions o = next;
  o.service_ports = now.service_ports;  // what start() set: the listeners and the afxdp knobs
  o.redirect_xsk = now.redirect_xsk;
  o.tags = now.tags;
  o.reject_mid_stream = now.reject_mid_stream;
  o.synack_wscale = now.synack_wscale;
  return st.filter->reconfigure(o);
}

void AfXdpMode::modelsChanged(const backends::ModelRegistry& models) {
  State& st = *state_;
  if (st.stopped || !st.filter) return;
  st.models = &models;
  publishOverloadLevels(models, [f = st.filter.get()](int level) {
    return f->setOverloadLevel(level);
  });
}

}  // namespace infergate::app
