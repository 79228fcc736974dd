#include "app/gpu_watch.h"

#include <arpa/inet.h>
#include <linux/capability.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

#include "app/admin_client.h"
#include "app/privileges.h"
#include "common/clock.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#ifdef INFERGATE_GPU_PROBES
#include "gpu/gpu_probes.h"
#endif

namespace infergate::app {

namespace {

// The source when the probes are off: empty snapshots and the reason, so the monitor, the
// metrics and the view say the same thing in every build.
class InactiveSource final : public gpu::GpuSource {
 public:
  explicit InactiveSource(gpu::AttachReport report) : report_(std::move(report)) {}
  gpu::GpuSnapshot snapshot() override {
    gpu::GpuSnapshot s;
    s.taken_ns = common::monotonicNs();
    return s;
  }
  std::vector<gpu::LiveAlloc> liveAllocs(uint32_t, size_t) override { return {}; }
  std::vector<gpu::GpuEvent> drainEvents(size_t) override { return {}; }
  void forget(uint32_t) override {}
  const gpu::AttachReport& report() const override { return report_; }

 private:
  gpu::AttachReport report_;
};

gpu::GpuMonitorOptions monitorOptions(const config::GpuConfig& c) {
  gpu::GpuMonitorOptions o;
  o.interval_ms = c.interval_ms;
  o.leak_window_ms = c.leak_window_ms;
  o.leak_min_age_ms = c.leak_min_age_ms;
  o.leak_check_interval_ms = c.leak_check_interval_ms;
  o.anomaly_factor = c.anomaly_factor;
  o.anomaly_min_syncs = c.anomaly_min_syncs;
  o.baseline_windows = c.baseline_windows;
  o.default_quota_bytes = c.default_quota_bytes;
  for (const config::GpuQuotaConfig& q : c.quotas) o.quotas.push_back({q.match, q.max_device_bytes});
  o.log_interval_ms = c.log_interval_ms;
  o.webhook_url = c.webhook_url;
  o.webhook_timeout_ms = c.webhook_timeout_ms;
  o.max_series = c.max_series;
  return o;
}

// The names and addresses that mean "this machine" in an endpoint.
std::vector<std::string> localHosts() {
  std::vector<std::string> out = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "::"};
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0 && name[0] != '\0') out.emplace_back(name);
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr) continue;
      char buf[INET6_ADDRSTRLEN] = {};
      if (i->ifa_addr->sa_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
      } else if (i->ifa_addr->sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, buf, sizeof buf);
      } else {
        continue;
      }
      out.emplace_back(buf);
    }
    freeifaddrs(ifs);
  }
  return out;
}

// The process the pids of a model's GPU work are looked up for (an in-process model: us).
constexpr const char* kSelf = "(in-process)";

}  // namespace

GpuWatch::GpuWatch(const config::GpuConfig& config, const backends::ModelRegistry& models)
    : config_(config), models_(models) {}

absl::StatusOr<std::unique_ptr<GpuWatch>> GpuWatch::start(const config::GpuConfig& config,
                                                          const backends::ModelRegistry& models,
                                                          common::MetricsRegistry& registry) {
  std::unique_ptr<GpuWatch> w(new GpuWatch(config, models));
  w->local_hosts_ = localHosts();
  gpu::AttachReport off;
#ifdef INFERGATE_GPU_PROBES
  // The backends' processes first (their libcuda may live in a container's root).
  std::vector<uint32_t> backend_pids;
  for (const auto& m : models.models()) {
    for (const std::string& ep : m->backendEndpoints()) {
      if (uint16_t port = localPortOf(ep, w->local_hosts_); port != 0) {
        if (std::optional<uint32_t> pid = w->info_.listenerOf(port)) backend_pids.push_back(*pid);
      }
    }
  }
  std::string why;
  std::optional<std::string> lib =
      gpu::locateCudaLibrary(config.library, backend_pids, w->info_, &why);
  if (lib) {
    gpu::GpuProbeOptions po;
    po.library = *lib;
    po.large_alloc_bytes = config.large_alloc_bytes;
    absl::StatusOr<std::unique_ptr<gpu::GpuProbes>> probes = gpu::GpuProbes::attach(po);
    if (probes.ok()) {
      w->source_ = std::move(*probes);
    } else {
      why = std::string(probes.status().message());
    }
  }
  if (!w->source_) {
    off.library = lib.value_or("");
    off.reason = why;
  }
#else
  off.reason = "this build has no GPU probes (libbpf, clang or bpftool were missing at build time)";
#endif
  if (!w->source_) {
    if (config.required) {
      return absl::FailedPreconditionError(
          fmt::format("gpu.required is true but the GPU probes are off: {}", off.reason));
    }
    spdlog::warn("gpu: probes off: {} (the GPU watch runs without them; set gpu.library or "
                 "see docs/GPU.md)",
                 off.reason);
    w->source_ = std::make_unique<InactiveSource>(std::move(off));
  } else {
    const gpu::AttachReport& r = w->source_->report();
    spdlog::info("gpu: probes on {}: {} symbol(s) attached{}", r.library, r.attached.size(),
                 r.missing.empty() ? std::string()
                                   : fmt::format(", {} missing ({})", r.missing.size(),
                                                 fmt::join(r.missing, ", ")));
  }
  w->monitor_ = std::make_unique<gpu::GpuMonitor>(*w->source_, w->info_, monitorOptions(config),
                                                  &registry);
  GpuWatch* self = w.get();
  w->monitor_->setListener([self](const gpu::GpuView& view) { self->applyHealth(view); });
  w->monitor_->start();
  return w;
}

GpuWatch::~GpuWatch() {
  if (monitor_) {
    monitor_->setListener(nullptr);
    monitor_->stop();
  }
  for (const auto& [model, level] : levels_) {
    if (level != 0) const_cast<backends::Model*>(model)->setExternalOverload(0);
  }
  monitor_.reset();
  source_.reset();  // detaches the probes
}

uint16_t GpuWatch::localPortOf(const std::string& endpoint,
                               const std::vector<std::string>& local_hosts) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon + 1 >= endpoint.size()) return 0;
  std::string host = endpoint.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned port = 0;
  const char* b = endpoint.data() + colon + 1;
  const char* e = endpoint.data() + endpoint.size();
  auto [p, ec] = std::from_chars(b, e, port);
  if (ec != std::errc() || p != e || port == 0 || port > 65535) return 0;
  const bool local = host.rfind("127.", 0) == 0 ||
                     std::find(local_hosts.begin(), local_hosts.end(), host) != local_hosts.end();
  return local ? static_cast<uint16_t>(port) : 0;
}

void GpuWatch::applyHealth(const gpu::GpuView& view) {
  std::map<uint32_t, const gpu::ProcessView*> by_pid;
  for (const gpu::ProcessView& p : view.processes) by_pid[p.tgid] = &p;
  // A process the probes know, or else the GPU processes of its cgroup (a server whose port
  // is owned by a parent while its workers hold the GPU).
  auto unhealthy = [&](uint32_t pid, bool* known) {
    if (auto it = by_pid.find(pid); it != by_pid.end()) {
      *known = true;
      return it->second->over_quota || it->second->anomaly;
    }
    *known = false;
    std::optional<std::string> path = info_.cgroupPathOf(pid);
    std::optional<uint64_t> cg = path ? info_.cgroupIdOf(*path) : std::nullopt;
    bool bad = false;
    for (const gpu::ProcessView& p : view.processes) {
      if (!cg || p.cgroup_id != *cg) continue;
      *known = true;
      bad = bad || p.over_quota || p.anomaly;
    }
    return bad;
  };
  for (const auto& m : models_.models()) {
    std::vector<std::string> endpoints = m->backendEndpoints();
    size_t known = 0, bad = 0;
    if (endpoints.empty()) {
      bool k = false;
      if (unhealthy(static_cast<uint32_t>(getpid()), &k)) ++bad;
      known += k ? 1 : 0;
      endpoints.push_back(kSelf);
    } else {
      for (const std::string& ep : endpoints) {
        const uint16_t port = localPortOf(ep, local_hosts_);
        std::optional<uint32_t> pid;
        if (port != 0) {
          // The fd links of a process with other credentials need CAP_SYS_PTRACE (kept
          // permitted by Server::dropPrivileges when the GPU watch is on).
          ScopedCapability ptrace(CAP_SYS_PTRACE);
          pid = info_.listenerOf(port);
        }
        bool k = false;
        const bool is_bad = pid && unhealthy(*pid, &k);
        known += k ? 1 : 0;
        bad += is_bad ? 1 : 0;
        if (!config_.prefer_healthy_endpoints) continue;
        bool& marked = degraded_[m->config().name + "\n" + ep];
        if (marked != is_bad) {
          marked = is_bad;
          m->setEndpointDegraded(ep, is_bad);
        }
      }
    }
    const int want = known > 0 && bad == known ? config_.overload_level : 0;
    int& have = levels_[m.get()];
    if (have != want) {
      if (want != 0) {
        spdlog::warn("gpu: model '{}': every GPU process behind it ({}) is over its quota or in "
                     "a latency anomaly: overload level {} (the lowest priority classes are shed)",
                     m->config().name, known, want);
      } else {
        spdlog::info("gpu: model '{}': its GPU processes are healthy again: overload level 0",
                     m->config().name);
      }
      have = want;
      m->setExternalOverload(want);
    }
  }
}

frontend::HttpResponse GpuWatch::adminResponse(const frontend::HttpRequest& request) const {
  frontend::HttpResponse r;
  const gpu::GpuView view = monitor_->view();
  const bool json = request.target.find("format=json") != std::string::npos;
  if (json) {
    r.body = gpu::renderGpuJson(view);
  } else {
    r.content_type = "text/plain; charset=utf-8";
    r.body = gpu::renderGpuText(view, 0);
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// `infergate gpu`: a small blocking HTTP/1.1 GET of the admin listener.

namespace {

volatile std::sig_atomic_t g_stop = 0;

// The admin listener's client is shared with `infergate top` (app/admin_client.h).
absl::StatusOr<std::string> httpGet(const std::string& admin, const std::string& target) {
  absl::StatusOr<AdminResponse> r = adminGet(admin, target);
  if (!r.ok()) return r.status();
  if (r->status != 200) {
    return absl::UnavailableError(fmt::format(
        "{}{}: HTTP {} {}", admin, target, r->status,
        r->status == 404 ? "(gpu.enabled is false in the gateway's configuration)" : r->body));
  }
  return std::move(r->body);
}

}  // namespace

int runGpuView(const std::string& admin, bool once, uint64_t interval_ms, bool json) {
  const std::string target = json ? "/admin/gpu?format=json" : "/admin/gpu";
  if (!once) {
    std::signal(SIGINT, [](int) { g_stop = 1; });
    std::signal(SIGTERM, [](int) { g_stop = 1; });
  }
  for (;;) {
    absl::StatusOr<std::string> body = httpGet(admin, target);
    if (!body.ok()) {
      std::fprintf(stderr, "infergate gpu: %s\n", std::string(body.status().message()).c_str());
      return 1;
    }
    if (!once) std::fputs("\033[H\033[2J", stdout);  // home + clear: a top-like refresh
    std::fputs(body->c_str(), stdout);
    std::fflush(stdout);
    if (once) return 0;
    for (uint64_t slept = 0; slept < interval_ms && !g_stop; slept += 50) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (g_stop) return 0;
  }
}

}  // namespace infergate::app
