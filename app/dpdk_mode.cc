#include "app/dpdk_mode.h"

#include <arpa/inet.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "app/modes/overload.h"
#include "app/userspace_stack_mode.h"
#include "backends/model.h"
#include "common/clock.h"
#include "dataplane/afxdp_reactor.h"
#include "dataplane/dpdk/dpdk_device.h"
#include "dataplane/dpdk/eal.h"
#include "dataplane/ingress_filter/ingress_filter.h"
#include "dataplane/tcp/syncookie_jar.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "spdlog/spdlog.h"
#include "xdp/xdp_filter.h"

namespace infergate::app {

namespace {

using dataplane::AfXdpReactor;
using dataplane::dpdk::DpdkDevice;
using dataplane::dpdk::DpdkPort;
using dataplane::ingress_filter::FilteringDevice;
namespace tcp = dataplane::tcp;

// One queue as the reactor sees it: the filter in front of the DPDK queue, with the polling
// calls going to the queue itself (fd -1: the reactor spins; busyPoll() is a no-op because
// rxBurst() polls the NIC). Owns both; the filter goes first.
class FilteredQueue final : public dataplane::PollableDevice {
 public:
  explicit FilteredQueue(std::unique_ptr<DpdkDevice> dev) : dev_(std::move(dev)) {}
  absl::Status init(const dataplane::ingress_filter::FilterOptions& o) {
    absl::StatusOr<std::unique_ptr<FilteringDevice>> f =
        FilteringDevice::create(*dev_, o, common::SteadyClock::instance());
    if (!f.ok()) return f.status();
    filter_ = std::move(*f);
    return absl::OkStatus();
  }

  size_t rxBurst(dataplane::Frame* frames, size_t max) override {
    return filter_->rxBurst(frames, max);
  }
  void rxRelease(const dataplane::Frame* frames, size_t n) override {
    filter_->rxRelease(frames, n);
  }
  uint32_t rxHoldBudget() const override { return filter_->rxHoldBudget(); }
  bool txAlloc(dataplane::Frame* frame) override { return filter_->txAlloc(frame); }
  void txBurst(dataplane::Frame* frames, size_t n) override { filter_->txBurst(frames, n); }
  void txFlush() override { filter_->txFlush(); }
  uint32_t mtu() const override { return filter_->mtu(); }
  bool txChecksumOffload() const override { return filter_->txChecksumOffload(); }
  int fd() const override { return -1; }
  void kick() override { dev_->kick(); }
  bool txPending() const override { return dev_->txPending(); }
  void busyPoll() override { dev_->busyPoll(); }

  FilteringDevice& filter() { return *filter_; }
  DpdkDevice& device() { return *dev_; }

 private:
  std::unique_ptr<DpdkDevice> dev_;
  std::unique_ptr<FilteringDevice> filter_;  // references *dev_: declared after, destroyed first
};

// What the /metrics collector reads; outlives the mode (collectors cannot be removed), emptied
// at stop.
struct MetricsView {
  std::mutex mu;
  std::vector<AfXdpReactor*> reactors;
  std::vector<FilteredQueue*> queues;  // owned by the reactors
  dataplane::dpdk::PortCaps caps;
};

uint64_t relaxed(const uint64_t& v) {
  // Reactor-owned plain counters read from the admin thread (dataplane/tcp/counters.h).
  return __atomic_load_n(&v, __ATOMIC_RELAXED);
}

void renderMetrics(MetricsView& view, std::string& out) {
  std::lock_guard<std::mutex> lock(view.mu);
  if (view.reactors.empty()) return;
  // The XDP program's rules, run in userspace: the same counter names, summed over the queues.
  dataplane::ingress_filter::IngressCounters sum;
  for (FilteredQueue* q : view.queues) sum += q->filter().counters();
  xdp::XdpCounters xc;
  xc.packets = sum.packets;
  xc.bytes = sum.bytes;
  xc.requests = sum.requests;
  out += xdp::renderPrometheus(xc);

  renderTcpMetrics(view.reactors, out);

  // The port.
  const dataplane::dpdk::PortCaps& caps = view.caps;
  out += "# TYPE infergate_dpdk_port_info gauge\n";
  out += fmt::format(
      "infergate_dpdk_port_info{{driver=\"{}\",name=\"{}\",queues=\"{}\",rss=\"{}\","
      "tx_checksum_offload=\"{}\",rx_checksum_offload=\"{}\"}} 1\n",
      caps.driver, caps.name, view.queues.size(), caps.rss ? 1 : 0,
      caps.tx_checksum_offload ? 1 : 0, caps.rx_checksum_offload ? 1 : 0);
  std::vector<dataplane::dpdk::DpdkStats> st;
  for (FilteredQueue* q : view.queues) st.push_back(q->device().stats());
  using S = dataplane::dpdk::DpdkStats;
  auto emit = [&](const char* name, const char* type, uint64_t S::*f) {
    out += fmt::format("# TYPE infergate_dpdk_{} {}\n", name, type);
    for (size_t q = 0; q < st.size(); ++q)
      out += fmt::format("infergate_dpdk_{}{{queue=\"{}\"}} {}\n", name, q, relaxed(st[q].*f));
  };
  emit("rx_packets_total", "counter", &S::rx_packets);
  emit("rx_bytes_total", "counter", &S::rx_bytes);
  emit("rx_dropped_chained_total", "counter", &S::rx_dropped_chained);
  emit("tx_packets_total", "counter", &S::tx_packets);
  emit("tx_bytes_total", "counter", &S::tx_bytes);
  emit("tx_deferred_total", "counter", &S::tx_deferred);
  emit("tx_retries_total", "counter", &S::tx_retries);
  emit("tx_dropped_total", "counter", &S::tx_dropped);
  emit("tx_alloc_failed_total", "counter", &S::tx_alloc_failed);
  emit("rx_outstanding", "gauge", &S::rx_outstanding);
  emit("rx_outstanding_max", "gauge", &S::rx_outstanding_max);
  emit("tx_pending", "gauge", &S::tx_pending);
  emit("rx_checksum_bad_total", "counter", &S::rx_checksum_bad);
  emit("rx_checksum_good_total", "counter", &S::rx_checksum_good);
  emit("rx_checksum_unknown_total", "counter", &S::rx_checksum_unknown);
  emit("tx_checksum_offloaded_total", "counter", &S::tx_checksum_offloaded);
  emit("tx_checksum_fallbacks_total", "counter", &S::tx_checksum_fallbacks);
  // What a kernel would have answered (dataplane/ingress_filter/l2_responder.h).
  std::vector<dataplane::ingress_filter::L2Counters> l2;
  for (FilteredQueue* q : view.queues) l2.push_back(q->filter().l2Counters());
  using L = dataplane::ingress_filter::L2Counters;
  auto emitL2 = [&](const char* name, uint64_t L::*f) {
    out += fmt::format("# TYPE infergate_dpdk_l2_{}_total counter\n", name);
    for (size_t q = 0; q < l2.size(); ++q)
      out += fmt::format("infergate_dpdk_l2_{}_total{{queue=\"{}\"}} {}\n", name, q, l2[q].*f);
  };
  emitL2("arp_replies", &L::arp_replies);
  emitL2("icmp_echo_replies", &L::icmp_echo_replies);
  emitL2("icmp6_echo_replies", &L::icmp6_echo_replies);
  emitL2("nd_adverts", &L::nd_adverts);
  emitL2("not_for_us", &L::not_for_us);
  emitL2("malformed", &L::malformed);
  emitL2("over_budget", &L::over_budget);
  emitL2("no_tx_frame", &L::no_tx_frame);
}

// The CPUs this process may run on, in order.
std::vector<int> allowedCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  if (cpus.empty()) cpus.push_back(0);
  return cpus;
}

// True when the raw EAL arguments choose the lcores themselves.
bool argsChooseLcores(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "-l" || a == "-c" || a.rfind("--lcores", 0) == 0 || a.rfind("-l", 0) == 0 ||
        (a.rfind("-c", 0) == 0 && a.size() > 2 && a[2] != '-'))
      return true;
  }
  return false;
}

bool argsMention(const std::vector<std::string>& args, std::string_view prefix) {
  for (const std::string& a : args)
    if (a.rfind(prefix, 0) == 0) return true;
  return false;
}

std::string macText(const uint8_t m[6]) {
  return fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4],
                     m[5]);
}

// The filter's rules from the xdp: options, as afxdp mode builds the program's (the tag travels
// in Frame::meta; the stack sends the RSTs; prove_handshake with the stacks' cookie keys):
// `c`'s xdp: section with the listeners' ports and what dpdk mode sets itself. At start-up and
// at each reload.
xdp::XdpOptions filterXdpOptions(const xdp::XdpOptions& configured,
                                 const std::vector<uint16_t>& ports) {
  xdp::XdpOptions xo = configured;
  xo.service_ports = ports;
  xo.redirect_xsk = true;  // (tags travel in Frame::meta: no placement applies here)
  xo.reject_mid_stream = false;  // our TCP + HTTP validate mid-stream requests in full
  return xo;
}

absl::Status filterRules(const xdp::XdpOptions& xo, ig_config* config,
                         std::vector<dataplane::ingress_filter::CidrRule>* cidrs) {
  if (absl::Status s = xdp::buildConfig(xo, config); !s.ok()) return s;
  absl::StatusOr<std::vector<xdp::CidrEntry>> entries = xdp::cidrEntries(xo);
  if (!entries.ok()) return entries.status();
  cidrs->clear();
  cidrs->reserve(entries->size());
  for (const xdp::CidrEntry& e : *entries) cidrs->push_back({e.cidr, e.cls, e.exempt, e.trusted});
  return absl::OkStatus();
}

}  // namespace

struct DpdkMode::State {
  std::shared_ptr<tcp::SynCookieJar> cookie_jar = std::make_shared<tcp::SynCookieJar>();
  std::vector<std::unique_ptr<AfXdpReactor>> reactors;
  std::vector<FilteredQueue*> queues;  // owned by the reactors
  std::unique_ptr<DpdkPort> port;
  std::shared_ptr<MetricsView> view = std::make_shared<MetricsView>();
  const backends::ModelRegistry* models = nullptr;  // overload listeners set (cleared at stop)
  xdp::XdpOptions xo;  // the filter's options in force (start, then each reload)
  bool stopped = false;
};

DpdkMode::DpdkMode() : state_(std::make_unique<State>()) {}

DpdkMode::~DpdkMode() { stop(0); }

absl::StatusOr<std::unique_ptr<DpdkMode>> DpdkMode::start(const config::Config& c,
                                                          const ListenerFactory& factory,
                                                          common::MetricsRegistry& registry,
                                                          const backends::ModelRegistry* models) {
  const config::DpdkConfig& d = c.dpdk;
  if (d.ipv4.empty())
    return absl::InvalidArgumentError("dpdk.ipv4 is required in mode dpdk (the gateway's address)");
  absl::StatusOr<std::vector<uint16_t>> service_ports =
      servicePorts(c, "dpdk", "the filter needs the port");
  if (!service_ports.ok()) return service_ports.status();
  const std::vector<uint16_t>& ports = *service_ports;
  const xdp::XdpOptions xo = filterXdpOptions(c.xdp, ports);
  dataplane::ingress_filter::FilterOptions fo;
  if (absl::Status s = filterRules(xo, &fo.config, &fo.cidrs); !s.ok()) return s;
  fo.bucket_entries = xo.bucket_entries;
  if (inet_pton(AF_INET, d.ipv4.c_str(), &fo.l2.ipv4) != 1)
    return absl::InvalidArgumentError(fmt::format("dpdk.ipv4: invalid address '{}'", d.ipv4));
  if (!d.ipv6.empty() && inet_pton(AF_INET6, d.ipv6.c_str(), fo.l2.ipv6.data()) != 1)
    return absl::InvalidArgumentError(fmt::format("dpdk.ipv6: invalid address '{}'", d.ipv6));
  const tcp::SynCookies stack_cookies = stackSynCookies(xo.syn_cookies);

  // 1. EAL. rte_eal_init pins the calling thread to the main lcore; every thread the process
  // starts later would inherit that one CPU, so the main thread gets its mask back afterwards.
  const std::vector<int> cpus = allowedCpus();
  dataplane::dpdk::EalOptions eo;
  eo.args = d.eal_args;
  if (!argsMention(d.eal_args, "--telemetry") && !argsMention(d.eal_args, "--no-telemetry"))
    eo.args.insert(eo.args.begin(), "--no-telemetry");
  eo.main_lcore = argsChooseLcores(d.eal_args) ? -1 : cpus.front();
  eo.memory_mb = d.memory_mb;
  if (d.no_huge && d.memory_mb == 0) {
    // Anonymous memory: the pools (about 2.5 KiB per mbuf) plus 128 MiB for EAL and the rings.
    const uint64_t pools = uint64_t{d.mbufs_per_queue} * static_cast<uint64_t>(c.reactors) * 2560;
    eo.memory_mb = static_cast<uint32_t>(128 + (pools >> 20));
  }
  eo.no_huge = d.no_huge;
  eo.in_memory = d.in_memory;
  eo.vdevs = d.vdevs;
  eo.allow_pci = d.allow_pci;
  eo.file_prefix = d.file_prefix;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  const bool have_mask = sched_getaffinity(0, sizeof mask, &mask) == 0;
  absl::Status eal = dataplane::dpdk::initEal(eo);
  if (have_mask) sched_setaffinity(0, sizeof mask, &mask);
  if (!eal.ok()) return eal;

  // 2. The port: one queue pair per reactor.
  dataplane::dpdk::DpdkPortOptions po;
  po.port_id = d.port;
  po.queues = static_cast<uint16_t>(c.reactors);
  po.rx_desc = d.rx_desc;
  po.tx_desc = d.tx_desc;
  po.mbufs_per_queue = d.mbufs_per_queue;
  po.hold_frames = c.afxdp_held_frames;
  po.checksum_offload = d.checksum_offload ? dataplane::dpdk::ChecksumOffload::kAuto
                                           : dataplane::dpdk::ChecksumOffload::kOff;
  absl::StatusOr<std::unique_ptr<DpdkPort>> port = DpdkPort::configure(po);
  if (!port.ok()) return port.status();

  std::unique_ptr<DpdkMode> mode(new DpdkMode());
  State& st = *mode->state_;
  st.xo = xo;
  st.port = std::move(*port);
  const dataplane::dpdk::PortCaps& caps = st.port->caps();
  std::memcpy(fo.l2.mac.data(), caps.mac, 6);

  // 3. A reactor per queue.
  auto fail = [&](absl::Status s) {
    st.reactors.clear();  // devices before the port
    st.queues.clear();
    st.port.reset();
    return s;
  };
  for (int q = 0; q < c.reactors; ++q) {
    absl::StatusOr<std::unique_ptr<DpdkDevice>> dev =
        DpdkDevice::open(*st.port, static_cast<uint16_t>(q));
    if (!dev.ok()) return fail(dev.status());
    auto fq = std::make_unique<FilteredQueue>(std::move(*dev));
    if (absl::Status s = fq->init(fo); !s.ok()) return fail(s);
    // Reactor thread not started yet: set the keys from here.
    fq->filter().setCookieKeys(st.cookie_jar->snapshot());
    FilteredQueue* raw = fq.get();
    dataplane::AfXdpReactorOptions ro =
        userspaceReactorOptions(c, q, st.cookie_jar, stack_cookies, registry);
    ro.name = "dpdk";
    ro.cpu = c.cpus.empty() ? cpus[static_cast<size_t>(q) % cpus.size()] : c.cpus[q];
    ro.busy_poll = true;  // nothing to sleep on (fd -1)
    auto reactor = std::make_unique<AfXdpReactor>(ro, std::move(fq));
    if (absl::Status s = listenAll(*reactor, c, factory); !s.ok()) return fail(s);
    st.queues.push_back(raw);
    st.reactors.push_back(std::move(reactor));
  }
  // Key rotations happen on whichever reactor's poll finds the period over; every filter gets
  // the new keys on its own thread (setCookieKeys is reactor-thread only).
  {
    std::vector<std::pair<AfXdpReactor*, FilteredQueue*>> rq;
    for (size_t q = 0; q < st.reactors.size(); ++q)
      rq.emplace_back(st.reactors[q].get(), st.queues[q]);
    st.cookie_jar->setListener([rq](const ig_cookie_keys& keys) {
      for (auto [r, fq] : rq) r->post([fq, keys] { fq->filter().setCookieKeys(keys); });
    });
  }
  {
    std::lock_guard<std::mutex> lock(st.view->mu);
    for (auto& r : st.reactors) st.view->reactors.push_back(r.get());
    st.view->queues = st.queues;
    st.view->caps = caps;
  }
  registry.addCollector([view = st.view](std::string& out) { renderMetrics(*view, out); });
  if (models != nullptr) mode->modelsChanged(*models);
  for (const config::ListenerConfig& l : c.listeners) {
    spdlog::info(
        "listener '{}' on DPDK port {} ({}) {} port {} protocol {} ({} queue(s), "
        "userspace TCP)",
        l.name, d.port, caps.name, d.ipv4, l.port, l.protocol, c.reactors);
  }
  spdlog::info(
      "dpdk: port {} {} (driver {}, MAC {}), {} queue(s){}, {} mbufs per queue, {}; ARP/ICMP "
      "answered for {}{}{}; filter for port(s) {}",
      d.port, caps.name, caps.driver, macText(caps.mac), c.reactors, caps.rss ? " with RSS" : "",
      d.mbufs_per_queue, dataplane::dpdk::checksumSummary(caps, po.checksum_offload), d.ipv4,
      d.ipv6.empty() ? "" : " and ", d.ipv6, fmt::join(ports, ","));
  return mode;
}

void DpdkMode::serve() {
  for (auto& r : state_->reactors) r->start();
}

void DpdkMode::stop(uint64_t drain_ms) {
  if (!state_ || state_->stopped) return;
  State& st = *state_;
  st.stopped = true;
  if (st.models != nullptr) clearOverloadListeners(*st.models);  // before the filters go
  st.cookie_jar->setListener(nullptr);  // no rotation may post to a reactor after this
  stopReactors(st.reactors, drain_ms);
  {
    std::lock_guard<std::mutex> lock(st.view->mu);
    st.view->reactors.clear();
    st.view->queues.clear();
  }
  // Stacks (their held mbufs released), then filters and devices (pending tx frames freed),
  // then the port (its rx rings' mbufs back to the pools) and the pools.
  st.reactors.clear();
  st.queues.clear();
  const bool had_port = st.port != nullptr;
  st.port.reset();
  if (had_port) spdlog::info("dpdk: stopped; port stopped and its pools freed");
}

absl::Status DpdkMode::reconfigureXdp(const xdp::XdpOptions& next) {
  State& st = *state_;
  if (st.stopped || st.reactors.empty())
    return absl::FailedPreconditionError("dpdk mode is not serving");
  const xdp::XdpOptions o = filterXdpOptions(next, st.xo.service_ports);  // the listeners stay
  // The tables' sizes (as XdpFilter::reconfigure refuses them; the planner refuses them first).
  if (o.flow_entries != st.xo.flow_entries)
    return absl::FailedPreconditionError("xdp.flow_entries cannot change without a restart");
  if (o.bucket_entries != st.xo.bucket_entries)
    return absl::FailedPreconditionError("xdp.bucket_entries cannot change without a restart");
  ig_config cfg{};
  std::vector<dataplane::ingress_filter::CidrRule> cidrs;
  if (absl::Status s = filterRules(o, &cfg, &cidrs); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<const FilteringDevice::Rules>> rules =
      FilteringDevice::prepareRules(cfg, cidrs);
  if (!rules.ok()) return rules.status();
  // Each reactor puts them in force on its own thread, between two bursts (setRules checks
  // only the flow table's size, equal here).
  for (size_t q = 0; q < st.reactors.size(); ++q) {
    st.reactors[q]->post([fq = st.queues[q], rules = *rules, q] {
      if (absl::Status s = fq->filter().setRules(rules); !s.ok())
        spdlog::error("dpdk: queue {}: ingress filter rules not reloaded: {}", q,
                      std::string(s.message()));
    });
  }
  st.xo = o;
  spdlog::info("dpdk: ingress filter rules reloaded on {} queue(s) ({} CIDR entries)",
               st.reactors.size(), cidrs.size());
  return absl::OkStatus();
}

void DpdkMode::modelsChanged(const backends::ModelRegistry& models) {
  State& st = *state_;
  if (st.stopped) return;
  st.models = &models;
  publishOverloadLevels(models, [queues = st.queues](int level) {
    for (FilteredQueue* q : queues) q->filter().setOverloadLevel(static_cast<uint32_t>(level));
    return absl::OkStatus();
  });
}

}  // namespace infergate::app
