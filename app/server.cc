#include "app/server.h"

#include "app/gpu_watch.h"


#include <linux/capability.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "app/modes/mode.h"
#include "app/privileges.h"
#include "backends/batched_model.h"
#include "backends/identity_model.h"
#include "common/metrics.h"
#include "frontend/sniffing_session.h"
#include "spdlog/spdlog.h"

namespace infergate::app {

Server::Server(config::Config config) : config_(std::move(config)) {}

Server::~Server() { stop(0); }

absl::Status Server::start() {
  const config::Config& c = config_;
  absl::StatusOr<std::unique_ptr<ServingMode>> mode = makeServingMode(c.mode);
  if (!mode.ok()) return mode.status();
  mode_ = std::move(*mode);

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
  ModeContext ctx{c, registry, models_,
                  [sessionFactoryFor](const config::ListenerConfig& l) {
                    return sessionFactoryFor(l.protocol);
                  },
                  connection_metrics_.get(), &connections_};
  if (absl::Status st = mode_->start(ctx); !st.ok()) {
    mode_->stop(0);
    return st;
  }
  // GPU observability (docs/GPU.md): the probes attach now, while we still have the privilege.
  if (c.gpu.enabled) {
    absl::StatusOr<std::unique_ptr<GpuWatch>> w = GpuWatch::start(c.gpu, models_, registry);
    if (!w.ok()) {
      mode_->stop(0);
      return w.status();
    }
    gpu_ = std::move(*w);
    GpuWatch* watch = gpu_.get();
    admin_handler_->addRoute("/admin/gpu", [watch](const frontend::HttpRequest& r) {
      return watch->adminResponse(r);
    });
  }
  if (c.admin.enabled) {
    uint16_t port = c.admin.port;
    absl::StatusOr<int> fd = dataplane::openListener(c.admin.address, port, &port);
    if (!fd.ok()) {
      mode_->stop(0);
      return absl::Status(fd.status().code(), "admin listener: " + std::string(fd.status().message()));
    }
    dataplane::ReactorOptions ro;
    ro.index = c.reactors;
    ro.name = "admin";
    admin_ = std::make_unique<dataplane::SocketReactor>(ro);
    admin_->addListener(*fd, frontend::makeHttp1SessionFactory(*admin_handler_, admin_options_, nullptr));
    spdlog::info("admin listener on {}:{} (/metrics, /v2/health/*{})", c.admin.address, port,
                 gpu_ ? ", /admin/gpu" : "");
  }
  // Every privileged step is done: give up what serving does not need (app/privileges.h).
  if (absl::Status st = dropPrivileges(registry); !st.ok()) {
    stop(0);
    return st;
  }
  mode_->serve();
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
  const bool xdp = mode_->attachesXdp();
  PrivilegeOptions po;
  // xdp-filter and afxdp keep CAP_NET_ADMIN in the permitted set only, to detach the program
  // through netlink at shutdown (ScopedCapability in stop()); map reads and updates through
  // the open fds and AF_XDP rx/tx need no capability (docs/OPERATIONS.md "Privileges").
  po.keep = xdp ? capBit(CAP_NET_ADMIN) : 0;
  // gpu.enabled: CAP_SYS_PTRACE, raised only around reading the /proc/PID/fd links that map a
  // backend's port to its process (GpuWatch): a process of another user, or one with more
  // capabilities than ours, is not readable without it.
  if (gpu_) po.keep |= capBit(CAP_SYS_PTRACE);
  po.user = sec.user;
  po.group = sec.group;
  po.seccomp = sec.seccomp;
  po.seccomp_options.action = sec.seccomp_action == "kill"  ? SeccompAction::kKill
                              : sec.seccomp_action == "log" ? SeccompAction::kLog
                                                            : SeccompAction::kErrno;
  const bool gpu_probes = gpu_ && gpu_->probesActive();
  po.seccomp_options.bpf_maps = xdp || gpu_probes;
  po.seccomp_options.gpu_watch = gpu_ != nullptr;
  po.seccomp_options.dpdk = config_.mode == config::Mode::kDpdk;
  po.seccomp_options.raise_caps = xdp || gpu_ != nullptr;
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
               r->threads, r->identity,
               r->kept == 0 ? std::string("none")
                            : fmt::format("{}{}{}",
                                          (r->kept & capBit(CAP_NET_ADMIN)) ? "CAP_NET_ADMIN (XDP detach)" : "",
                                          (r->kept & capBit(CAP_NET_ADMIN)) && (r->kept & capBit(CAP_SYS_PTRACE)) ? ", " : "",
                                          (r->kept & capBit(CAP_SYS_PTRACE)) ? "CAP_SYS_PTRACE (GPU process lookup)" : ""),
               r->bounding_dropped ? "reduced to the same" : "left (no CAP_SETPCAP)",
               sec.seccomp ? fmt::format("{} system calls allowed, others {}", r->syscalls,
                                         sec.seccomp_action == "errno" ? "EPERM"
                                                                       : sec.seccomp_action)
                           : std::string("off"));
  return absl::OkStatus();
}

void Server::stop(uint64_t drain_ms) {
  if (mode_) mode_->stop(drain_ms);
  gpu_.reset();  // the monitor stops and the probes detach before the models go
  if (admin_) {
    admin_->stop(0);
    admin_->join();
  }
  admin_.reset();
}

}  // namespace infergate::app
