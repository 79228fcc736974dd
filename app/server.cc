#include "app/server.h"

#include "app/doctor.h"
#include "app/gpu_watch.h"


#include <linux/capability.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>

#include "app/modes/mode.h"
#include "app/privileges.h"
#include "app/reload.h"
#include "common/logging.h"
#include "backends/batched_model.h"
#include "backends/identity_model.h"
#include "backends/pool.h"
#include "common/cidr.h"
#include "common/metrics.h"
#include "frontend/admin_handler.h"
#include "frontend/sniffing_session.h"
#include "spdlog/spdlog.h"

namespace infergate::app {

namespace {

// A configured model, built and logged (start-up and reload).
absl::StatusOr<std::unique_ptr<backends::Model>> buildModel(const backends::ModelConfig& mc,
                                                            backends::PinnedOptions* pinned) {
  absl::StatusOr<std::unique_ptr<backends::Model>> m = backends::createModel(
      mc, mc.dynamic_batching ? &*mc.dynamic_batching : nullptr,
      &common::MetricsRegistry::global(), pinned);
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
  return m;
}

std::string jsonString(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// The config's tenants: section as the limiter's options (CIDRs already validated).
frontend::TenantsOptions tenantsOptions(const config::TenantsConfig& c) {
  auto limits = [](const config::TenantLimitsConfig& l) {
    frontend::TenantLimits out;
    out.rate = l.rate;
    out.burst = l.burst;
    out.max_concurrent = l.max_concurrent;
    out.priority_class = l.priority_class;
    return out;
  };
  frontend::TenantsOptions o;
  o.api_key_header = c.api_key_header;
  o.default_limits = limits(c.default_limits);
  for (const config::TenantConfig& t : c.tenants) {
    frontend::TenantSpec spec;
    spec.name = t.name;
    for (const std::string& s : t.sources) {
      if (absl::StatusOr<common::Cidr> cidr = common::parseCidr(s); cidr.ok()) {
        spec.sources.push_back(*cidr);
      }
    }
    spec.api_keys = t.api_keys;
    spec.limits = limits(t.limits);
    o.tenants.push_back(std::move(spec));
  }
  return o;
}

// The config's priority: section as the policy (validated by the config loader).
absl::StatusOr<frontend::ClientPriorityPolicy> clientPriorityPolicy(
    const config::PriorityConfig& c) {
  frontend::ClientPriorityPolicy p;
  p.mode = frontend::parseClientPriorityMode(c.from_client).value_or(p.mode);
  absl::StatusOr<common::CidrSet> trusted = common::CidrSet::parse(c.trusted_sources);
  if (!trusted.ok()) {
    return absl::InvalidArgumentError("priority.trusted_sources: " +
                                      std::string(trusted.status().message()));
  }
  p.trusted = std::move(*trusted);
  return p;
}

}  // namespace

Server::Server(config::Config config) : config_(std::move(config)), running_(config_) {}

Server::~Server() { stop(0); }

absl::Status Server::start() {
  const config::Config& c = config_;
  absl::StatusOr<std::unique_ptr<ServingMode>> mode = makeServingMode(c.mode);
  if (!mode.ok()) return mode.status();
  mode_ = std::move(*mode);

  // Models.
  std::vector<std::string> names;
  for (const backends::ModelConfig& mc : c.models) {
    absl::StatusOr<std::unique_ptr<backends::Model>> m = buildModel(mc, &pinned_);
    if (!m.ok()) return m.status();
    models_.add(std::move(*m));
    names.push_back(mc.name);
  }

  common::MetricsRegistry& registry = common::MetricsRegistry::global();
  constexpr const char* kReloadsHelp =
      "Configuration reloads (SIGHUP, POST /admin/reload) by result: ok (applied), refused (a "
      "key that cannot change live; nothing applied), invalid (the file does not load)";
  reloads_ok_ = &registry.counter("infergate_config_reloads_total", kReloadsHelp, {{"result", "ok"}});
  reloads_refused_ =
      &registry.counter("infergate_config_reloads_total", kReloadsHelp, {{"result", "refused"}});
  reloads_invalid_ =
      &registry.counter("infergate_config_reloads_total", kReloadsHelp, {{"result", "invalid"}});
  generation_gauge_ = &registry.gauge(
      "infergate_config_generation",
      "Generation of the configuration in effect: 1 at start-up, +1 per applied reload");
  generation_gauge_->set(static_cast<int64_t>(generation_));
  {
    std::lock_guard<std::mutex> lock(*hash_mu_);
    hash_ = std::make_shared<std::string>(running_text_.empty() ? std::string("embedded")
                                                                : configHash(running_text_));
  }
  registry.addCollector([hash = hash_, mu = hash_mu_](std::string& out) {
    std::lock_guard<std::mutex> lock(*mu);
    out += "# HELP infergate_config_info The configuration in effect (hash: FNV-1a 64 of the file).\n";
    out += "# TYPE infergate_config_info gauge\n";
    out += fmt::format("infergate_config_info{{hash=\"{}\"}} 1\n", *hash);
  });
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
  {
    absl::StatusOr<frontend::ClientPriorityPolicy> p = clientPriorityPolicy(c.priority);
    if (!p.ok()) return p.status();
    if (absl::Status st = client_priority_.publish(std::move(*p)); !st.ok()) return st;
  }
  http2_options_.live_client_priority = &client_priority_;
  http2_options_.header_timeout_ns = c.limits.header_timeout_ms * 1'000'000;
  http2_options_.stream_timeout_ns = c.limits.body_timeout_ms * 1'000'000;
  http2_options_.request_deadline_ns = c.limits.request_deadline_ms * 1'000'000;
  http2_options_.max_connection_memory_bytes =
      std::max<uint64_t>(http2_options_.max_connection_memory_bytes, c.limits.max_body_bytes);

  http_options_.limits.max_header_bytes = c.limits.max_header_bytes;
  http_options_.limits.max_body_bytes = c.limits.max_body_bytes;
  http_options_.idle_timeout_ns = c.limits.idle_timeout_ms * 1'000'000;
  http_options_.header_timeout_ns = c.limits.header_timeout_ms * 1'000'000;
  http_options_.body_timeout_ns = c.limits.body_timeout_ms * 1'000'000;
  http_options_.request_deadline_ns = c.limits.request_deadline_ms * 1'000'000;
  http_options_.cancel_on_peer_close = c.limits.cancel_on_half_close;
  http_options_.access_log = c.logging.access_log;
  http_options_.live_client_priority = &client_priority_;
  admin_options_ = http_options_;
  admin_options_.access_log = false;
  // Per-tenant limits on the serving listeners (validated by the config loader).
  if (c.tenants.enabled()) {
    absl::StatusOr<std::unique_ptr<frontend::TenantLimiter>> t =
        frontend::TenantLimiter::create(tenantsOptions(c.tenants), nullptr, &registry);
    if (!t.ok()) return absl::InvalidArgumentError("tenants: " + std::string(t.status().message()));
    spdlog::info("tenants: {} configured (api key header '{}') plus 'default'",
                 (*t)->tenants() - 1, (*t)->apiKeyHeader());
    if (absl::Status st = tenants_.publish(std::move(*t)); !st.ok()) return st;
  }
  // Always set (a reload may turn tenants on); current() null: none.
  http_options_.tenants = &tenants_;
  http2_options_.tenants = &tenants_;

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
  // What this kernel gives, once, before the mode picks its options from it (docs/HOSTS.md).
  probeHostAtStartup(c, registry);
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
  admin_handler_->addPostRoute("/admin/reload", [this](const frontend::HttpRequest&) {
    ReloadResult r = reload();
    frontend::HttpResponse resp;
    resp.status = r.http_status;
    resp.content_type = "application/json";
    resp.body = std::move(r.json);
    return resp;
  });
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
    spdlog::info("admin listener on {}:{} (/metrics, /v2/health/*, POST /admin/reload{})", c.admin.address, port,
                 gpu_ ? ", /admin/gpu" : "");
    admin_handler_->setToken(c.admin.token);
    absl::StatusOr<common::Cidr> bound = common::parseCidr(c.admin.address);
    if (!bound.ok() || !frontend::AdminHandler::loopback(bound->addr)) {
      if (c.admin.token.empty()) {
        spdlog::warn("admin listener on {} is not loopback: /metrics and /v2/health/* answer any peer; "
                     "/admin/* and POST answer loopback peers only (403 to others): set admin.token "
                     "or admin.token_file to admit others with Authorization: Bearer",
                     c.admin.address);
      } else {
        spdlog::info("admin listener on {}: /admin/* and POST answer loopback peers and peers with "
                     "the admin token (Authorization: Bearer); /metrics and health answer any peer",
                     c.admin.address);
      }
    }
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
  {
    std::lock_guard<std::mutex> lock(reload_mu_);  // a reload in progress finishes first
    stopping_ = true;
  }
  if (mode_) mode_->stop(drain_ms);
  gpu_.reset();  // the monitor stops and the probes detach before the models go
  if (admin_) {
    admin_->stop(0);
    admin_->join();
  }
  admin_.reset();
}

}  // namespace infergate::app

namespace infergate::app {

void Server::setReloadSource(std::string path, std::string text) {
  std::lock_guard<std::mutex> lock(reload_mu_);
  reload_path_ = std::move(path);
  running_text_ = std::move(text);
  if (hash_) {
    std::lock_guard<std::mutex> hl(*hash_mu_);
    *hash_ = configHash(running_text_);
  }
}

Server::ReloadResult Server::reload() {
  std::lock_guard<std::mutex> lock(reload_mu_);
  ReloadResult out;
  auto finish = [&](const std::string& result, int status, const ReloadPlan* plan,
                    const std::string& error) {
    out.result = result;
    out.http_status = status;
    std::string applied, refused;
    if (plan != nullptr) {
      for (const std::string& k : plan->applied) {
        applied += (applied.empty() ? "" : ",") + jsonString(k);
      }
      for (const ReloadRefusal& r : plan->refused) {
        refused += fmt::format("{}{{\"key\":{},\"reason\":{}}}", refused.empty() ? "" : ",",
                               jsonString(r.key), jsonString(r.reason));
      }
    }
    std::string hash;
    {
      std::lock_guard<std::mutex> hl(*hash_mu_);
      hash = hash_ ? *hash_ : std::string();
    }
    out.json = fmt::format(
        "{{\"result\":{},\"generation\":{},\"hash\":{},\"applied\":[{}],\"refused\":[{}]{}}}\n",
        jsonString(result), generation_, jsonString(hash), result == "ok" ? applied : "", refused,
        error.empty() ? "" : ",\"error\":" + jsonString(error));
    (result == "ok" ? reloads_ok_ : result == "refused" ? reloads_refused_ : reloads_invalid_)
        ->inc();
    return out;
  };
  if (stopping_) {
    return finish("invalid", 503, nullptr, "infergate is stopping");
  }
  if (reload_path_.empty()) {
    spdlog::warn("config reload refused: infergate was started without -c (the embedded "
                 "configuration cannot be re-read)");
    return finish("invalid", 400, nullptr,
                  "started without -c: there is no configuration file to re-read");
  }
  absl::StatusOr<std::string> text = readConfigText(reload_path_);
  absl::StatusOr<config::Config> next =
      text.ok() ? config::loadConfigString(*text, reload_path_)
                : absl::StatusOr<config::Config>(text.status());
  if (!next.ok()) {
    spdlog::warn("config reload: {} is invalid, nothing applied: {}", reload_path_,
                 std::string(next.status().message()));
    return finish("invalid", 400, nullptr, std::string(next.status().message()));
  }
  absl::StatusOr<ReloadPlan> plan = planReload(running_, running_text_, *next, *text);
  if (!plan.ok()) return finish("invalid", 400, nullptr, std::string(plan.status().message()));
  if (!plan->ok()) {
    spdlog::warn("config reload of {} refused, nothing applied: {}", reload_path_,
                 plan->refusalMessage());
    return finish("refused", 409, &*plan, "");
  }
  // Endpoint-only changes (plan->models_endpoints) are checked on the running models before
  // anything is built or applied; they are applied with the models, nothing is rebuilt.
  std::vector<std::pair<backends::Model*, std::vector<std::string>>> endpoint_changes;
  for (const backends::ModelConfig& mc : next->models) {
    const std::string key = modelKey(mc);
    if (std::find(plan->models_endpoints.begin(), plan->models_endpoints.end(), key) ==
            plan->models_endpoints.end() ||
        mc.remote == nullptr)
      continue;
    backends::Model* m = models_.find(mc.name, mc.version);
    const absl::Status st = m == nullptr ? absl::NotFoundError("the model is not served")
                                         : m->checkEndpoints(mc.remote->endpoints);
    if (!st.ok()) {
      spdlog::warn("config reload: models.{}.endpoints: {}; nothing applied", key,
                   std::string(st.message()));
      return finish("invalid", 400, &*plan,
                    fmt::format("models.{}.endpoints: {}", key, std::string(st.message())));
    }
    endpoint_changes.emplace_back(m, mc.remote->endpoints);
  }
  // Build every new model first: a model that cannot be built refuses the reload as a whole.
  std::vector<std::unique_ptr<backends::Model>> built;
  std::vector<std::pair<std::string, std::string>> gone;
  for (const backends::ModelConfig& mc : next->models) {
    const std::string key = modelKey(mc);
    const bool added = std::find(plan->models_added.begin(), plan->models_added.end(), key) !=
                       plan->models_added.end();
    const bool changed = std::find(plan->models_changed.begin(), plan->models_changed.end(),
                                   key) != plan->models_changed.end();
    if (!added && !changed) continue;
    absl::StatusOr<std::unique_ptr<backends::Model>> m = buildModel(mc, &pinned_);
    if (!m.ok()) {
      spdlog::warn("config reload: model '{}': {}; nothing applied", key,
                   std::string(m.status().message()));
      return finish("invalid", 400, &*plan,
                    fmt::format("models.{}: {}", key, std::string(m.status().message())));
    }
    built.push_back(std::move(*m));
    if (changed) gone.emplace_back(mc.name, mc.version);
  }
  for (const backends::ModelConfig& mc : running_.models) {
    if (std::find(plan->models_removed.begin(), plan->models_removed.end(), modelKey(mc)) !=
        plan->models_removed.end())
      gone.emplace_back(mc.name, mc.version);
  }
  if (models_.retiredCount() + gone.size() > backends::ModelRegistry::kMaxRetired) {
    return finish("refused", 409, &*plan,
                  fmt::format("{} models were removed since start-up (at most {} kept for their "
                              "in-flight requests): restart infergate",
                              models_.retiredCount(), backends::ModelRegistry::kMaxRetired));
  }
  // A new tenant limiter / priority policy, built before anything is applied.
  std::unique_ptr<frontend::TenantLimiter> next_tenants;
  std::optional<frontend::ClientPriorityPolicy> next_priority;
  if (plan->tenants) {
    if (tenants_.full()) {
      plan->refused.push_back(
          {"tenants", fmt::format("changed {} times since start-up (every limiter is kept for "
                                  "its leases): restart infergate",
                                  frontend::TenantLimiters::kMaxGenerations)});
      return finish("refused", 409, &*plan, "");
    }
    if (next->tenants.enabled()) {
      absl::StatusOr<std::unique_ptr<frontend::TenantLimiter>> t =
          frontend::TenantLimiter::create(tenantsOptions(next->tenants), nullptr,
                                          &common::MetricsRegistry::global(), tenants_.current());
      if (!t.ok()) {
        return finish("invalid", 400, &*plan, "tenants: " + std::string(t.status().message()));
      }
      next_tenants = std::move(*t);
    }
  }
  if (plan->priority) {
    if (client_priority_.full()) {
      plan->refused.push_back(
          {"priority", fmt::format("changed {} times since start-up: restart infergate",
                                   frontend::ClientPriorityPolicies::kMaxGenerations)});
      return finish("refused", 409, &*plan, "");
    }
    absl::StatusOr<frontend::ClientPriorityPolicy> p = clientPriorityPolicy(next->priority);
    if (!p.ok()) return finish("invalid", 400, &*plan, std::string(p.status().message()));
    next_priority = std::move(*p);
  }
  // The XDP rules next (the step that can still fail), then the models, then the log level.
  if (plan->xdp_program && mode_) {
    if (absl::Status st = mode_->reconfigureXdp(next->xdp); !st.ok()) {
      spdlog::warn("config reload: XDP rules: {}; nothing applied", std::string(st.message()));
      if (st.code() == absl::StatusCode::kFailedPrecondition) {
        plan->refused.push_back({"xdp", std::string(st.message())});
        return finish("refused", 409, &*plan, "");
      }
      return finish("invalid", 400, &*plan, "xdp: " + std::string(st.message()));
    }
  }
  for (auto& [m, endpoints] : endpoint_changes) {
    // Checked above (reloads are serialized, so the model is still served).
    if (absl::Status st = m->setEndpoints(endpoints); !st.ok()) {
      spdlog::error("config reload: models.{}.endpoints: {}", modelKey(m->config()),
                    std::string(st.message()));
    }
  }
  if (!gone.empty() || !built.empty()) {
    std::vector<backends::Model*> leaving;
    for (const auto& [name, version] : gone) {
      if (backends::Model* m = models_.find(name, version)) leaving.push_back(m);
    }
    // The request metrics of added models first, so their first requests are counted under
    // their name (a name already known keeps its series).
    if (metrics_) {
      for (const backends::ModelConfig& mc : next->models) metrics_->addModel(mc.name);
    }
    if (absl::Status st = models_.update(gone, std::move(built)); !st.ok()) {
      return finish("refused", 409, &*plan, std::string(st.message()));  // checked above
    }
    for (backends::Model* m : leaving) m->setOverloadListener(nullptr);
    if (mode_) mode_->modelsChanged(models_);
  }
  if (plan->tenants) {
    std::vector<std::string> before;  // tenant names whose series leave /metrics if they go
    if (const frontend::TenantLimiter* t = tenants_.current()) {
      for (size_t i = 0; i < t->tenants(); ++i) before.push_back(t->name(static_cast<int>(i)));
    }
    // Checked above: cannot fail. Old limiters stay alive for their leases.
    if (absl::Status st = tenants_.publish(std::move(next_tenants)); !st.ok())
      spdlog::warn("config reload: {}", std::string(st.message()));
    const frontend::TenantLimiter* now = tenants_.current();
    for (const std::string& name : before) {
      bool kept = false;
      for (size_t i = 0; now != nullptr && i < now->tenants(); ++i)
        kept = kept || now->name(static_cast<int>(i)) == name;
      // (a tenant added back later registers, and so shows, its series again)
      if (!kept) common::MetricsRegistry::global().hideSeries({{"tenant", name}});
    }
  }
  if (next_priority) {
    if (absl::Status st = client_priority_.publish(std::move(*next_priority)); !st.ok())
      spdlog::warn("config reload: {}", std::string(st.message()));
  }
  if (plan->log_level) {
    if (absl::Status st = common::setupLogging(next->logging.level); !st.ok())
      spdlog::warn("config reload: logging.level: {}", std::string(st.message()));
  }
  running_ = std::move(*next);
  running_text_ = std::move(*text);
  if (!plan->empty()) ++generation_;
  generation_gauge_->set(static_cast<int64_t>(generation_));
  {
    std::lock_guard<std::mutex> hl(*hash_mu_);
    *hash_ = configHash(running_text_);
  }
  std::string list;
  for (const std::string& k : plan->applied) list += (list.empty() ? "" : ", ") + k;
  spdlog::info("config reloaded from {} (generation {}, hash {}): {}", reload_path_, generation_,
               configHash(running_text_), list.empty() ? "no change" : "applied " + list);
  return finish("ok", 200, &*plan, "");
}

}  // namespace infergate::app
