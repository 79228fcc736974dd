#include "app/server.h"

#include "app/afxdp_mode.h"

#include <linux/capability.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "app/privileges.h"
#include "backends/batched_model.h"
#include "backends/identity_model.h"
#include "common/metrics.h"
#include "fmt/ranges.h"
#include "frontend/sniffing_session.h"
#include "spdlog/spdlog.h"
#ifdef INFERGATE_HAVE_XDP
#include "xdp/xdp_filter.h"
#endif

namespace infergate::app {

#ifdef INFERGATE_HAVE_XDP
struct Server::XdpState {
  std::unique_ptr<xdp::XdpFilter> filter;
  std::unique_ptr<AfXdpMode> afxdp;
};
#else
struct Server::XdpState {
  std::unique_ptr<AfXdpMode> afxdp;
};
#endif

namespace {
#ifdef INFERGATE_HAVE_XDP
std::optional<net::IngressTag> lookupTag(const xdp::XdpFilter& f, const sockaddr_storage& peer,
                                              const sockaddr_storage& local) {
  const std::optional<xdp::Tag> t =
      f.lookupFlowTag(xdp::FlowTuple::fromSockaddrs(reinterpret_cast<const sockaddr*>(&peer),
                                                    reinterpret_cast<const sockaddr*>(&local)));
  if (!t) return std::nullopt;
  return net::IngressTag::fromProgram(t->cls, t->verdict, t->rx_ns);
}
#endif
}  // namespace

Server::Server(config::Config config) : config_(std::move(config)) {}

Server::~Server() { stop(0); }

absl::Status Server::start() {
  const config::Config& c = config_;
  if (c.mode == config::Mode::kDpdk) {
    return absl::UnimplementedError("mode '" + std::string(config::modeName(c.mode)) +
                                    "' is not available in this build yet; use mode: socket or "
                                    "xdp-filter");
  }
#ifndef INFERGATE_HAVE_XDP
  if (c.mode == config::Mode::kXdpFilter) {
    return absl::UnimplementedError(
        "mode 'xdp-filter' needs a build with the XDP program (cmake -DINFERGATE_WITH_XDP=ON, "
        "with libbpf-dev, libxdp-dev, bpftool and clang installed); use mode: socket");
  }
#endif
  xdp_ = std::make_unique<XdpState>();

  // Models.
  std::vector<std::string> names;
  for (const backends::ModelConfig& mc : c.models) {
    absl::StatusOr<std::unique_ptr<backends::Model>> m = backends::createModel(
        mc, mc.dynamic_batching ? &*mc.dynamic_batching : nullptr,
        &common::MetricsRegistry::global(), &pinned_);
    if (!m.ok()) return m.status();
    const bool batching = mc.dynamic_batching && mc.dynamic_batching->enabled;
    spdlog::info("model '{}' version {} ready (backend {}, max_batch_size {}, {} input(s), cost "
                 "{}+{}us/item, dynamic batching {})",
                 mc.name, mc.version, mc.backend, mc.max_batch_size, mc.inputs.size(),
                 mc.cost_fixed_us, mc.cost_per_item_us,
                 batching ? fmt::format("on: max queue delay {}us, {} priority level(s)",
                                        mc.dynamic_batching->max_queue_delay_us,
                                        mc.dynamic_batching->priority_levels)
                          : "off");
    models_.add(std::move(*m));
    names.push_back(mc.name);
  }

  common::MetricsRegistry& registry = common::MetricsRegistry::global();
  connection_metrics_ = std::make_unique<dataplane::ConnectionMetrics>(registry);
  metrics_ = std::make_unique<frontend::ServerMetrics>(registry, names);
  kserve_ = std::make_unique<frontend::KServeRestHandler>(
      models_, frontend::ServerInfo{"infergate", INFERGATE_VERSION}, metrics_.get());
  admin_handler_ = std::make_unique<frontend::AdminHandler>(registry, models_);
  grpc_ = std::make_unique<frontend::InferenceGrpcServices>(
      models_, frontend::ServerInfo{"infergate", INFERGATE_VERSION}, metrics_.get());
  http2_options_.max_message_bytes = c.limits.max_body_bytes;
  http2_options_.max_header_list_bytes = c.limits.max_header_bytes;
  http2_options_.idle_timeout_ns = c.limits.idle_timeout_ms * 1'000'000;
  // Who may choose a request's priority (validated by the config loader).
  client_priority_.mode = *frontend::parseClientPriorityMode(c.priority.from_client);
  if (absl::StatusOr<common::CidrSet> trusted = common::CidrSet::parse(c.priority.trusted_sources);
      trusted.ok()) {
    client_priority_.trusted = std::move(*trusted);
  } else {
    return absl::InvalidArgumentError("priority.trusted_sources" +
                                      std::string(trusted.status().message()));
  }
  http2_options_.client_priority = &client_priority_;
  http2_options_.header_timeout_ns = c.limits.header_timeout_ms * 1'000'000;
  http2_options_.stream_timeout_ns = c.limits.body_timeout_ms * 1'000'000;
  http2_options_.max_connection_memory_bytes =
      std::max<uint64_t>(http2_options_.max_connection_memory_bytes, c.limits.max_body_bytes);

  http_options_.limits.max_header_bytes = c.limits.max_header_bytes;
  http_options_.limits.max_body_bytes = c.limits.max_body_bytes;
  http_options_.idle_timeout_ns = c.limits.idle_timeout_ms * 1'000'000;
  http_options_.header_timeout_ns = c.limits.header_timeout_ms * 1'000'000;
  http_options_.body_timeout_ns = c.limits.body_timeout_ms * 1'000'000;
  http_options_.access_log = c.logging.access_log;
  http_options_.client_priority = &client_priority_;
  admin_options_ = http_options_;
  admin_options_.access_log = false;

  // http: HTTP/1.1; grpc: HTTP/2 prior knowledge; auto: either, by the connection preface.
  auto sessionFactoryFor = [this](const std::string& protocol) -> net::SessionFactory {
    auto h1 = frontend::makeHttp1SessionFactory(*kserve_, http_options_, metrics_.get());
    auto h2 = frontend::makeHttp2SessionFactory(*grpc_, http2_options_, metrics_.get());
    if (protocol == "grpc") return h2;
    if (protocol == "auto") return frontend::makeSniffingSessionFactory(h1, h2);
    return h1;
  };
  if (c.mode == config::Mode::kAfXdp) {  // afxdp: userspace TCP on the interface's queues
    auto m = startAfXdpMode(c, [sessionFactoryFor](const config::ListenerConfig& l) {
      return sessionFactoryFor(l.protocol);
    }, registry, &models_);  // &models_: overload publishing, as in xdp-filter mode
    if (!m.ok()) return m.status();
    xdp_->afxdp = std::move(*m);
  }
  // Reactors and their SO_REUSEPORT listeners. With port 0 the first socket picks the port and
  // the other reactors bind the same one.
  for (int i = 0; i < c.reactors && c.mode != config::Mode::kAfXdp; ++i) {
    dataplane::ReactorOptions ro;
    ro.index = i;
    ro.cpu = c.cpus.empty() ? -1 : c.cpus[i];
    ro.max_connections = c.limits.max_connections;
    ro.connections = &connections_;
    ro.metrics = connection_metrics_.get();
    ro.output.send_timeout_ns = c.limits.send_timeout_ms * 1'000'000;
    ro.output.min_drain_bytes = c.limits.min_drain_bytes;
    ro.output.max_bytes_per_connection = c.limits.max_output_bytes_per_connection;
    ro.output.max_bytes = c.limits.max_output_bytes;
    ro.output.used = &dataplane::outputBytesGauge(registry);
#ifdef INFERGATE_HAVE_XDP
    if (c.mode == config::Mode::kXdpFilter) {
      XdpState* state = xdp_.get();
      ro.tag_lookup = [state](const sockaddr_storage& peer, const sockaddr_storage& local) {
        return state->filter ? lookupTag(*state->filter, peer, local) : std::nullopt;
      };
    }
#endif
    reactors_.push_back(std::make_unique<dataplane::SocketReactor>(ro));
  }
  std::vector<uint16_t> service_ports;
  for (const config::ListenerConfig& l : c.listeners) {
    if (c.mode == config::Mode::kAfXdp) break;
    uint16_t port = l.port;
    for (int i = 0; i < c.reactors; ++i) {
      absl::StatusOr<int> fd = dataplane::openListener(l.address, port, &port);
      if (!fd.ok()) {
        reactors_.clear();
        return absl::Status(fd.status().code(),
                            "listener '" + l.name + "': " + std::string(fd.status().message()));
      }
      reactors_[i]->addListener(
          *fd, sessionFactoryFor(l.protocol),
          l.protocol == "http" ? dataplane::SocketReactor::kHttpRefusal : std::string());
    }
    service_ports.push_back(port);
    spdlog::info("listener '{}' on {}:{} protocol {} ({} reactor(s), SO_REUSEPORT)", l.name,
                 l.address, port, l.protocol, c.reactors);
  }
  if (c.admin.enabled) {
    uint16_t port = c.admin.port;
    absl::StatusOr<int> fd = dataplane::openListener(c.admin.address, port, &port);
    if (!fd.ok()) {
      reactors_.clear();
      return absl::Status(fd.status().code(), "admin listener: " + std::string(fd.status().message()));
    }
    dataplane::ReactorOptions ro;
    ro.index = c.reactors;
    ro.name = "admin";
    admin_ = std::make_unique<dataplane::SocketReactor>(ro);
    admin_->addListener(*fd, frontend::makeHttp1SessionFactory(*admin_handler_, admin_options_, nullptr));
    spdlog::info("admin listener on {}:{} (/metrics, /v2/health/*)", c.admin.address, port);
  }
#ifdef INFERGATE_HAVE_XDP
  if (c.mode == config::Mode::kXdpFilter) {
    xdp::XdpOptions opts = c.xdp;
    opts.service_ports = service_ports;
    absl::StatusOr<std::unique_ptr<xdp::XdpFilter>> filter = xdp::XdpFilter::attach(opts);
    if (!filter.ok()) {
      reactors_.clear();
      return filter.status();
    }
    xdp_->filter = std::move(*filter);
    xdp_->filter->registerMetrics(registry);
    if (auto warning = xdp::kernelSynCookiesWarning()) spdlog::warn("{}", *warning);
    // Overload publishing (docs/BATCHING.md "Overload level"): the NIC sheds the lowest classes
    // while a batched model's queues are full; the level is the highest over the models.
    publishOverloadLevels(models_, [f = xdp_->filter.get()](int level) {
      return f->setOverloadLevel(level);
    });
    spdlog::info("XDP program attached to {} ({} mode) for port(s) {}{}", c.xdp.interface,
                 xdp::attachModeName(c.xdp.attach), fmt::join(service_ports, ","),
                 c.xdp.pin_path.empty() ? "" : ", maps pinned under " + c.xdp.pin_path);
  }
#endif
  // Every privileged step is done: give up what serving does not need (app/privileges.h).
  if (absl::Status st = dropPrivileges(registry); !st.ok()) {
    stop(0);
    return st;
  }
  if (xdp_->afxdp) xdp_->afxdp->serve();
  for (auto& r : reactors_) r->start();
  if (admin_) admin_->start();
  spdlog::info("infergate {} serving: mode {}, {} reactor(s)", INFERGATE_VERSION,
               config::modeName(c.mode), c.reactors);
  return absl::OkStatus();
}

absl::Status Server::dropPrivileges(common::MetricsRegistry& registry) {
  const config::SecurityConfig& sec = config_.security;
  if (!sec.drop_privileges) {
    spdlog::warn("security.drop_privileges is false: serving with every privilege infergate "
                 "started with (uid {}, effective capabilities {:#x})",
                 getuid(), currentCaps().effective);
    return absl::OkStatus();
  }
  const bool xdp = config_.mode == config::Mode::kXdpFilter || config_.mode == config::Mode::kAfXdp;
  PrivilegeOptions po;
  // xdp-filter and afxdp keep CAP_NET_ADMIN in the permitted set only, to detach the program
  // through netlink at shutdown (ScopedCapability in stop()); map reads and updates through
  // the open fds and AF_XDP rx/tx need no capability (docs/OPERATIONS.md "Privileges").
  po.keep = xdp ? capBit(CAP_NET_ADMIN) : 0;
  po.user = sec.user;
  po.group = sec.group;
  po.seccomp = sec.seccomp;
  po.seccomp_options.action = sec.seccomp_action == "kill"  ? SeccompAction::kKill
                              : sec.seccomp_action == "log" ? SeccompAction::kLog
                                                            : SeccompAction::kErrno;
  po.seccomp_options.bpf_maps = xdp;
  po.seccomp_options.raise_caps = xdp;
#ifdef INFERGATE_WITH_CUDA
  po.seccomp_options.cuda = true;
#endif
  if (!sec.user.empty() && xdp && !config_.xdp.pin_path.empty()) {
    // The pinned maps are unpinned at shutdown: the new user must be able to unlink them.
    struct stat st {};
    if (stat(config_.xdp.pin_path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      if (absl::StatusOr<std::pair<uid_t, gid_t>> ids = resolveUser(sec.user, sec.group); ids.ok())
        if (chown(config_.xdp.pin_path.c_str(), ids->first, ids->second) != 0)
          spdlog::warn("xdp.pin_path {}: chown to {}: {} (the pins will stay after exit)",
                       config_.xdp.pin_path, sec.user, std::strerror(errno));
    }
  }
  absl::StatusOr<DropReport> r = app::dropPrivileges(po);
  if (!r.ok()) return r.status();
  registry.addCollector([](std::string& out) { renderSeccompMetrics(out); });
  spdlog::info("privileges dropped in {} thread(s): {}, capabilities kept (permitted, not "
               "effective): {}, bounding set {}, no_new_privs, seccomp {}",
               r->threads, r->identity, r->kept == 0 ? "none" : "CAP_NET_ADMIN (XDP detach)",
               r->bounding_dropped ? "reduced to the same" : "left (no CAP_SETPCAP)",
               sec.seccomp ? fmt::format("{} system calls allowed, others {}", r->syscalls,
                                         sec.seccomp_action == "errno" ? "EPERM"
                                                                       : sec.seccomp_action)
                           : std::string("off"));
  return absl::OkStatus();
}

void Server::stop(uint64_t drain_ms) {
  if (xdp_ && xdp_->afxdp) xdp_->afxdp->stop(drain_ms);
  for (auto& r : reactors_) r->stop(drain_ms * 1'000'000);
  for (auto& r : reactors_) r->join();
  if (admin_) {
    admin_->stop(0);
    admin_->join();
  }
  reactors_.clear();
  admin_.reset();
#ifdef INFERGATE_HAVE_XDP
  if (xdp_ && xdp_->filter) {
    clearOverloadListeners(models_);
    ScopedCapability net_admin(CAP_NET_ADMIN);  // netlink detach; kept for this (dropPrivileges)
    xdp_->filter->detach();
    spdlog::info("XDP program detached from {}", config_.xdp.interface);
    xdp_->filter.reset();
  }
#endif
}

}  // namespace infergate::app
