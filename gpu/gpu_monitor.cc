#include "gpu/gpu_monitor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <unordered_set>
#include <utility>

#include "common/clock.h"
#include "fmt/format.h"
#include "gpu/webhook.h"
#include "spdlog/spdlog.h"

namespace infergate::gpu {

namespace {

constexpr uint64_t kNsPerMs = 1'000'000;
constexpr size_t kEventsPerTick = 256;

template <size_t N>
std::array<uint64_t, N> deltaOf(const std::array<uint64_t, N>& cur,
                                const std::array<uint64_t, N>& prev) {
  std::array<uint64_t, N> d{};
  for (size_t i = 0; i < N; ++i) d[i] = cur[i] >= prev[i] ? cur[i] - prev[i] : cur[i];
  return d;
}

// A counter's growth since the previous sample; a counter that went back (an entry recreated)
// counts from zero.
uint64_t deltaOf(uint64_t cur, uint64_t prev) { return cur >= prev ? cur - prev : cur; }

// Prometheus label values: backslash, double quote and newline escaped.
void appendLabelValue(std::string& out, std::string_view s) {
  for (char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
}

using LabelList = std::initializer_list<std::pair<std::string_view, std::string_view>>;

void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

template <typename V>
void sample(std::string& out, std::string_view name, LabelList labels, V value,
            std::string_view extra_label = {}) {
  out += name;
  if (labels.size() > 0 || !extra_label.empty()) {
    out += '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
      if (!first) out += ',';
      first = false;
      out += k;
      out += "=\"";
      appendLabelValue(out, v);
      out += '"';
    }
    if (!extra_label.empty()) {
      if (!first) out += ',';
      out += extra_label;
    }
    out += '}';
  }
  fmt::format_to(std::back_inserter(out), " {}\n", value);
}

// Names from processes and cgroup paths, for log lines: control characters become '?'.
std::string printable(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return out;
}

std::string ms(double ns) { return fmt::format("{:.2f} ms", ns / 1e6); }

}  // namespace

struct GpuMonitor::ProcState {
  ProcState(uint64_t window_ns, AnomalyOptions a) : leak(window_ns), anomaly(a) {}
  ProcStats prev;
  uint64_t prev_ns = 0;
  bool has_prev = false;
  LeakDetector leak;
  AnomalyDetector anomaly;
  std::vector<AllocView> leak_allocs;
  bool checked = false;        // the allocations were looked at, last at checked_ns
  uint64_t checked_ns = 0;
};

struct GpuMonitor::CgroupState {
  CgroupStats prev;
  uint64_t prev_ns = 0;
  bool has_prev = false;
  QuotaDetector quota;
};

struct GpuMonitor::Series {
  std::string pid, comm, container;
  int64_t device_bytes = 0;
  uint64_t launches = 0, graph_launches = 0, alloc_failures = 0, sync_ns_sum = 0;
  std::array<uint64_t, kSyncBuckets> hist{};
};

struct GpuMonitor::ContainerSeries {
  std::string container, pod, ns;
  int64_t device_bytes = 0;
  uint64_t quota = 0;
};

struct GpuMonitor::MetricsData {
  bool active = false;
  size_t attached = 0, missing = 0, processes = 0;
  std::vector<Series> procs;
  std::vector<ContainerSeries> containers;
  std::array<uint64_t, kMemKinds> allocs{}, frees{};
  std::array<int64_t, kMemKinds> live{};
  std::array<uint64_t, 3> events{};
  ProbeStats stats;
  uint64_t leak_total = 0, anomaly_total = 0, quota_total = 0;
  int64_t leak_now = 0, anomaly_now = 0, quota_now = 0;
};

struct GpuMonitor::CollectorLink {
  std::mutex mu;
  const GpuMonitor* monitor = nullptr;  // null once the monitor is gone
};

absl::Status GpuMonitor::validate(const GpuMonitorOptions& o) {
  if (o.interval_ms == 0) return absl::InvalidArgumentError("gpu.interval_ms must be at least 1");
  if (!std::isfinite(o.anomaly_factor) || o.anomaly_factor < 1.0)
    return absl::InvalidArgumentError(
        fmt::format("gpu.anomaly_factor {} must be a number of at least 1", o.anomaly_factor));
  if (o.baseline_windows == 0)
    return absl::InvalidArgumentError("gpu.baseline_windows must be at least 1");
  if (o.webhook_timeout_ms == 0)
    return absl::InvalidArgumentError("gpu.webhook_timeout_ms must be at least 1");
  for (size_t i = 0; i < o.quotas.size(); ++i)
    if (o.quotas[i].match.empty())
      return absl::InvalidArgumentError(fmt::format("gpu.quotas[{}].match is empty", i));
  if (!o.webhook_url.empty()) {
    auto u = parseWebhookUrl(o.webhook_url);
    if (!u.ok()) return absl::InvalidArgumentError(fmt::format("gpu.webhook_url: {}", std::string(u.status().message())));
  }
  return absl::OkStatus();
}

GpuMonitor::GpuMonitor(GpuSource& source, ProcessResolver& resolver, GpuMonitorOptions options,
                       common::MetricsRegistry* registry)
    : source_(source),
      resolver_(resolver),
      options_(std::move(options)),
      log_limiter_(options_.log_interval_ms * kNsPerMs),
      metrics_(std::make_unique<MetricsData>()),
      link_(std::make_shared<CollectorLink>()) {
  if (!options_.webhook_url.empty()) {
    auto w = WebhookSender::create(options_.webhook_url, options_.webhook_timeout_ms);
    if (w.ok()) {
      webhook_ = *std::move(w);
    } else {
      webhook_error_ = std::string(w.status().message());
      spdlog::error("gpu: the webhook is off: {}", webhook_error_);
    }
  }
  view_.probes = source_.report();
  metrics_->active = view_.probes.active;
  metrics_->attached = view_.probes.attached.size();
  metrics_->missing = view_.probes.missing.size();
  link_->monitor = this;
  if (registry != nullptr) {
    registry->addCollector([link = link_](std::string& out) {
      std::lock_guard lock(link->mu);
      if (link->monitor != nullptr) out += link->monitor->renderMetrics();
    });
  }
}

GpuMonitor::~GpuMonitor() {
  {
    std::lock_guard lock(link_->mu);
    link_->monitor = nullptr;
  }
  stop();
}

void GpuMonitor::start() {
  std::lock_guard lock(thread_mu_);
  if (thread_.joinable()) return;
  {
    std::lock_guard w(wake_mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] { run(); });
}

void GpuMonitor::stop() {
  std::lock_guard lock(thread_mu_);
  {
    std::lock_guard w(wake_mu_);
    stop_ = true;
  }
  wake_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GpuMonitor::run() {
  std::unique_lock lock(wake_mu_);
  while (!stop_) {
    lock.unlock();
    tick(common::monotonicNs());
    lock.lock();
    wake_cv_.wait_for(lock, std::chrono::milliseconds(options_.interval_ms), [this] { return stop_; });
  }
}

void GpuMonitor::foldForgotten(const ProcStats& p) {
  for (int k = 0; k < kMemKinds; ++k) {
    forgotten_allocs_[k] += p.alloc_count[k];
    forgotten_frees_[k] += p.free_count[k];
  }
  if (p.deviceBytes() > 0) cgroup_released_[p.cgroup_id] += p.deviceBytes();
}

void GpuMonitor::detected(const char* detector, const std::string& subject, uint64_t now_ns,
                          const ProcessView* proc, const ContainerView* container,
                          int64_t device_bytes, const std::string& detail) {
  const ContainerInfo* info = proc ? &proc->container : container ? &container->container : nullptr;
  const std::string label = proc ? proc->container.label() : container ? container->label : "";
  uint64_t suppressed = 0;
  if (log_limiter_.allow(std::string(detector) + ":" + subject, now_ns, &suppressed)) {
    const std::string who =
        container ? fmt::format("container {} (cgroup {})", printable(label), container->cgroup_id)
                  : fmt::format("pid {} ({}) in {}", proc->tgid, printable(proc->comm),
                                printable(label));
    const std::string more =
        suppressed ? fmt::format(" ({} similar lines suppressed)", suppressed) : std::string();
    if (std::string_view(detector) == "leak")
      spdlog::warn("gpu: leak suspected: {}: {}{}", who, detail, more);
    else if (std::string_view(detector) == "anomaly")
      spdlog::warn("gpu: launch->sync anomaly: {}: {}{}", who, detail, more);
    else
      spdlog::warn("gpu: over quota: {}: {}{}", who, detail, more);
  }
  if (!webhook_) return;
  std::string body = "{\"detector\":";
  body += jsonString(detector);
  fmt::format_to(std::back_inserter(body), ",\"pid\":{},\"comm\":{}", proc ? proc->tgid : 0,
                 jsonString(proc ? proc->comm : ""));
  body += ",\"container\":" + jsonString(label);
  body += ",\"container_id\":" + jsonString(info ? info->container_id : "");
  body += ",\"pod\":" + jsonString(info ? info->pod_name : "");
  body += ",\"namespace\":" + jsonString(info ? info->pod_namespace : "");
  fmt::format_to(std::back_inserter(body), ",\"cgroup_id\":{},\"device_bytes\":{}",
                 proc ? proc->cgroup_id : container ? container->cgroup_id : 0, device_bytes);
  if (container) fmt::format_to(std::back_inserter(body), ",\"quota_bytes\":{}", container->quota_bytes);
  body += ",\"detail\":" + jsonString(detail) + "}";
  webhook_->send(std::move(body));
}

void GpuMonitor::cleared(const char* detector, const std::string& subject, uint64_t now_ns,
                         const std::string& what) {
  uint64_t suppressed = 0;
  if (log_limiter_.allow(std::string(detector) + "-cleared:" + subject, now_ns, &suppressed))
    spdlog::info("gpu: {} cleared: {}{}", detector, what,
                 suppressed ? fmt::format(" ({} similar lines suppressed)", suppressed) : "");
}

void GpuMonitor::handleEvents(uint64_t now_ns, GpuView& view) {
  std::vector<GpuEvent> events = source_.drainEvents(kEventsPerTick);
  for (GpuEvent& e : events) {
    ++events_total_;
    if (e.type > 0 && e.type < static_cast<int>(events_by_type_.size())) ++events_by_type_[e.type];
    uint64_t suppressed = 0;
    if (e.type == IG_GPU_EV_ALLOC_FAILED &&
        log_limiter_.allow(fmt::format("alloc_failed:{}", e.tgid), now_ns, &suppressed)) {
      spdlog::warn("gpu: {} of {} bytes failed in pid {} ({}): CUresult {}{}", fnName(e.fn),
                   e.bytes, e.tgid, printable(e.comm), e.result,
                   suppressed ? fmt::format(" ({} similar lines suppressed)", suppressed) : "");
    } else if (e.type == IG_GPU_EV_LARGE_ALLOC &&
               log_limiter_.allow(fmt::format("large_alloc:{}", e.tgid), now_ns, &suppressed)) {
      spdlog::info("gpu: {} of {} in pid {} ({}){}", fnName(e.fn), formatBytes(static_cast<int64_t>(e.bytes)),
                   e.tgid, printable(e.comm),
                   suppressed ? fmt::format(" ({} similar lines suppressed)", suppressed) : "");
    }
    recent_events_.push_back(std::move(e));
    if (recent_events_.size() > GpuView::kRecentEvents) recent_events_.pop_front();
  }
  view.recent_events.assign(recent_events_.begin(), recent_events_.end());
  view.events_total = events_total_;
}

void GpuMonitor::tick(uint64_t now_ns) {
  std::lock_guard tick_lock(tick_mu_);
  GpuSnapshot snap = source_.snapshot();
  GpuView v;
  v.taken_ns = now_ns;
  v.probes = source_.report();
  v.stats = snap.stats;

  std::unordered_map<uint64_t, ContainerInfo> containers;  // this tick's resolutions
  auto containerOf = [&](uint64_t cgroup_id, uint32_t hint) -> const ContainerInfo& {
    auto it = containers.find(cgroup_id);
    if (it == containers.end())
      it = containers.emplace(cgroup_id, resolver_.containerOf(cgroup_id, hint)).first;
    return it->second;
  };

  const AnomalyOptions anomaly_options{options_.anomaly_factor, options_.anomaly_min_syncs,
                                       options_.baseline_windows};
  const uint64_t min_age_ns = options_.leak_min_age_ms * kNsPerMs;
  // Old live allocations of a process, oldest first (the evidence of a leak), at most
  // leak_list_max of them kept in `*listed`; true when there is at least one.
  auto oldAllocs = [&](uint32_t tgid, std::vector<AllocView>* listed) {
    listed->clear();
    bool any = false;
    const size_t want = std::max<size_t>(options_.leak_list_max, 1);
    for (const LiveAlloc& a : source_.liveAllocs(tgid, want)) {
      const uint64_t age = now_ns > a.ts_ns ? now_ns - a.ts_ns : 0;
      if (age < min_age_ns) continue;  // oldest first: none after it is old enough either
      any = true;
      if (listed->size() < options_.leak_list_max)
        listed->push_back({a.ptr, a.bytes, age / kNsPerMs, a.kind});
    }
    return any;
  };

  struct Pending {
    const char* detector;
    bool entered;
    uint32_t tgid;
    uint64_t cgroup_id;
  };
  std::vector<Pending> pending;
  std::unordered_map<uint32_t, const ProcStats*> stats_of;
  std::unordered_set<uint32_t> seen;

  for (const ProcStats& p : snap.procs) {
    if (!resolver_.alive(p.tgid)) {
      source_.forget(p.tgid);
      foldForgotten(p);
      procs_.erase(p.tgid);
      continue;
    }
    seen.insert(p.tgid);
    stats_of[p.tgid] = &p;
    auto& slot = procs_[p.tgid];
    if (slot && slot->has_prev && slot->prev.first_ns != p.first_ns) {
      foldForgotten(slot->prev);  // the tgid was reused by a new process
      slot.reset();
    }
    if (!slot)
      slot = std::make_unique<ProcState>(options_.leak_window_ms * kNsPerMs, anomaly_options);
    ProcState& st = *slot;

    ProcessView pv;
    pv.tgid = p.tgid;
    pv.comm = p.comm;
    pv.cgroup_id = p.cgroup_id;
    pv.container = containerOf(p.cgroup_id, p.tgid);
    pv.device_bytes = p.deviceBytes();
    pv.host_bytes = p.live_bytes[IG_GPU_MEM_HOST];
    pv.launches_total = p.launches;
    pv.alloc_failures_total = p.alloc_failures;
    if (st.has_prev && now_ns > st.prev_ns) {
      const double dt_s = static_cast<double>(now_ns - st.prev_ns) / 1e9;
      pv.device_bytes_per_s = static_cast<double>(pv.device_bytes - st.prev.deviceBytes()) / dt_s;
      pv.launches_per_s = static_cast<double>(deltaOf(p.launches, st.prev.launches)) / dt_s;
      pv.graph_launches_per_s =
          static_cast<double>(deltaOf(p.graph_launches, st.prev.graph_launches)) / dt_s;
      const auto hist = deltaOf(p.sync_hist, st.prev.sync_hist);
      pv.sync_p50_ns = syncQuantileNs(hist, 0.5);
      pv.sync_p99_ns = syncQuantileNs(hist, 0.99);
      const uint64_t d_sum = deltaOf(p.sync_ns_sum, st.prev.sync_ns_sum);
      const uint64_t d_timed = deltaOf(p.timed_syncs, st.prev.timed_syncs);
      if (d_timed > 0) pv.sync_mean_ns = static_cast<double>(d_sum) / static_cast<double>(d_timed);
      const Transition t = st.anomaly.update(d_sum, d_timed);
      if (t != Transition::kNone) pending.push_back({"anomaly", t == Transition::kEntered, p.tgid, 0});
    }
    // The allocation map is walked at most once per leak_check_interval_ms per process.
    auto mayCheck = [&] {
      if (st.checked && now_ns < st.checked_ns + options_.leak_check_interval_ms * kNsPerMs)
        return false;
      st.checked = true;
      st.checked_ns = now_ns;
      return true;
    };
    const Transition lt = st.leak.update(now_ns, pv.device_bytes, [&] {
      return mayCheck() && oldAllocs(p.tgid, &st.leak_allocs);
    });
    if (lt != Transition::kNone) pending.push_back({"leak", lt == Transition::kEntered, p.tgid, 0});
    if (!st.leak.suspect())
      st.leak_allocs.clear();
    else if (lt == Transition::kNone && mayCheck())
      oldAllocs(p.tgid, &st.leak_allocs);  // refreshed while the suspicion lasts
    pv.leak_suspect = st.leak.suspect();
    pv.leak_allocs = st.leak_allocs;
    pv.anomaly = st.anomaly.anomalous();
    pv.baseline_ns = st.anomaly.baselineNs();
    st.prev = p;
    st.prev_ns = now_ns;
    st.has_prev = true;
    v.processes.push_back(std::move(pv));
  }
  // Processes gone from the snapshot without our forget (or forgotten above): keep their counts.
  for (auto it = procs_.begin(); it != procs_.end();) {
    if (seen.count(it->first) == 0) {
      if (it->second && it->second->has_prev) foldForgotten(it->second->prev);
      it = procs_.erase(it);
    } else {
      ++it;
    }
  }

  // Containers (cgroups).
  std::unordered_map<uint64_t, size_t> procs_in;
  std::unordered_map<uint64_t, uint32_t> hint_of;
  for (const ProcessView& pv : v.processes) {
    ++procs_in[pv.cgroup_id];
    hint_of.emplace(pv.cgroup_id, pv.tgid);
  }
  std::unordered_set<uint64_t> cg_seen;
  for (const CgroupStats& c : snap.cgroups) {
    cg_seen.insert(c.cgroup_id);
    auto hint = hint_of.find(c.cgroup_id);
    ContainerView cv;
    cv.cgroup_id = c.cgroup_id;
    cv.container = containerOf(c.cgroup_id, hint == hint_of.end() ? 0 : hint->second);
    cv.label = cv.container.label();
    cv.device_bytes = c.deviceBytes();
    if (auto r = cgroup_released_.find(c.cgroup_id); r != cgroup_released_.end())
      cv.device_bytes = std::max<int64_t>(cv.device_bytes - r->second, 0);
    cv.quota_bytes = quotaFor(cv.container, options_.quotas, options_.default_quota_bytes);
    auto pi = procs_in.find(c.cgroup_id);
    cv.processes = pi == procs_in.end() ? 0 : pi->second;
    auto& slot = cgroups_[c.cgroup_id];
    if (!slot) slot = std::make_unique<CgroupState>();
    CgroupState& st = *slot;
    if (st.has_prev && now_ns > st.prev_ns)
      cv.launches_per_s = static_cast<double>(deltaOf(c.launches, st.prev.launches)) /
                          (static_cast<double>(now_ns - st.prev_ns) / 1e9);
    const Transition t = st.quota.update(cv.device_bytes, cv.quota_bytes);
    if (t != Transition::kNone) pending.push_back({"over_quota", t == Transition::kEntered, 0, c.cgroup_id});
    cv.over_quota = st.quota.over();
    st.prev = c;
    st.prev_ns = now_ns;
    st.has_prev = true;
    // A cgroup whose processes all exited and hold nothing: not shown (the map keeps it).
    if (cv.processes > 0 || cv.device_bytes > 0 || cv.over_quota) v.containers.push_back(std::move(cv));
  }
  for (auto it = cgroups_.begin(); it != cgroups_.end();)
    it = cg_seen.count(it->first) ? std::next(it) : cgroups_.erase(it);
  for (auto it = cgroup_released_.begin(); it != cgroup_released_.end();)
    it = cg_seen.count(it->first) ? std::next(it) : cgroup_released_.erase(it);

  std::unordered_set<uint64_t> over;
  for (const ContainerView& cv : v.containers)
    if (cv.over_quota) over.insert(cv.cgroup_id);
  for (ProcessView& pv : v.processes) pv.over_quota = over.count(pv.cgroup_id) > 0;

  std::sort(v.processes.begin(), v.processes.end(), [](const ProcessView& a, const ProcessView& b) {
    return a.device_bytes != b.device_bytes ? a.device_bytes > b.device_bytes : a.tgid < b.tgid;
  });
  std::sort(v.containers.begin(), v.containers.end(),
            [](const ContainerView& a, const ContainerView& b) {
              return a.device_bytes != b.device_bytes ? a.device_bytes > b.device_bytes
                                                      : a.cgroup_id < b.cgroup_id;
            });

  // Transitions: counters, log lines, webhooks.
  auto procView = [&](uint32_t tgid) -> const ProcessView* {
    for (const ProcessView& pv : v.processes)
      if (pv.tgid == tgid) return &pv;
    return nullptr;
  };
  for (const Pending& t : pending) {
    const std::string_view det = t.detector;
    if (det == "over_quota") {
      const ContainerView* cv = nullptr;
      for (const ContainerView& c : v.containers)
        if (c.cgroup_id == t.cgroup_id) cv = &c;
      const std::string subject = fmt::format("cgroup:{}", t.cgroup_id);
      if (cv == nullptr) {  // cleared, and no longer shown: nothing left in it
        cleared(t.detector, subject, now_ns,
                fmt::format("cgroup {}: no device memory left", t.cgroup_id));
        continue;
      }
      if (!t.entered) {
        cleared(t.detector, subject, now_ns,
                fmt::format("container {}: {} <= quota {}", printable(cv->label), formatBytes(cv->device_bytes),
                            formatBytes(static_cast<int64_t>(cv->quota_bytes))));
        continue;
      }
      ++quota_total_;
      const ProcessView* largest = nullptr;  // processes are sorted: the first of the cgroup
      for (const ProcessView& pv : v.processes)
        if (pv.cgroup_id == t.cgroup_id) {
          largest = &pv;
          break;
        }
      const std::string detail = fmt::format(
          "device memory {} ({} bytes) > quota {} ({} bytes), {} processes", formatBytes(cv->device_bytes),
          cv->device_bytes, formatBytes(static_cast<int64_t>(cv->quota_bytes)), cv->quota_bytes,
          cv->processes);
      if (largest != nullptr) {
        ProcessView who = *largest;  // the container's figures, the largest process's identity
        detected(t.detector, subject, now_ns, &who, cv, cv->device_bytes, detail);
      } else {
        detected(t.detector, subject, now_ns, nullptr, cv, cv->device_bytes, detail);
      }
      continue;
    }
    const ProcessView* pv = procView(t.tgid);
    if (pv == nullptr) continue;
    const std::string subject = fmt::format("pid:{}", t.tgid);
    const ProcState& st = *procs_.at(t.tgid);
    if (det == "leak") {
      if (!t.entered) {
        cleared(t.detector, subject, now_ns,
                fmt::format("pid {} ({}): device memory fell to {}", pv->tgid, printable(pv->comm),
                            formatBytes(pv->device_bytes)));
        continue;
      }
      ++leak_total_;
      std::string detail = fmt::format(
          "device memory grew from {} to {} without a decrease over {:.0f} s; {}{} live "
          "allocations older than {} s",
          formatBytes(st.leak.windowStartBytes()), formatBytes(pv->device_bytes),
          static_cast<double>(st.leak.windowSpanNs()) / 1e9,
          pv->leak_allocs.size() >= options_.leak_list_max ? "at least " : "",
          pv->leak_allocs.size(), options_.leak_min_age_ms / 1000);
      if (!pv->leak_allocs.empty()) {
        const AllocView& a = pv->leak_allocs.front();
        detail += fmt::format(", the oldest {} bytes ({}) {} s old", a.bytes, memKindName(a.kind),
                              a.age_ms / 1000);
      }
      detected(t.detector, subject, now_ns, pv, nullptr, pv->device_bytes, detail);
    } else {
      if (!t.entered) {
        cleared(t.detector, subject, now_ns,
                fmt::format("pid {} ({}): launch->sync mean {} (baseline {})", pv->tgid, printable(pv->comm),
                            ms(st.anomaly.lastMeanNs()), ms(st.anomaly.baselineNs())));
        continue;
      }
      ++anomaly_total_;
      detected(t.detector, subject, now_ns, pv, nullptr, pv->device_bytes,
               fmt::format("launch->sync mean {} over the last interval > {} x baseline {}",
                           ms(st.anomaly.lastMeanNs()), options_.anomaly_factor,
                           ms(st.anomaly.baselineNs())));
    }
  }

  handleEvents(now_ns, v);
  v.leak_detections_total = leak_total_;
  v.anomaly_detections_total = anomaly_total_;
  v.over_quota_detections_total = quota_total_;

  // Metrics.
  auto m = std::make_unique<MetricsData>();
  m->active = v.probes.active;
  m->attached = v.probes.attached.size();
  m->missing = v.probes.missing.size();
  m->processes = v.processes.size();
  m->stats = v.stats;
  m->allocs = forgotten_allocs_;
  m->frees = forgotten_frees_;
  m->events = events_by_type_;
  m->leak_total = leak_total_;
  m->anomaly_total = anomaly_total_;
  m->quota_total = quota_total_;
  Series other;
  other.pid = "other";
  bool have_other = false;
  for (size_t i = 0; i < v.processes.size(); ++i) {
    const ProcessView& pv = v.processes[i];
    const ProcStats& p = *stats_of.at(pv.tgid);
    for (int k = 0; k < kMemKinds; ++k) {
      m->allocs[k] += p.alloc_count[k];
      m->frees[k] += p.free_count[k];
      m->live[k] += p.live_bytes[k];
    }
    m->leak_now += pv.leak_suspect;
    m->anomaly_now += pv.anomaly;
    Series* s = &other;
    if (i < options_.max_series) {
      m->procs.emplace_back();
      s = &m->procs.back();
      s->pid = std::to_string(pv.tgid);
      s->comm = validUtf8(pv.comm);  // Prometheus label values are UTF-8
      s->container = validUtf8(pv.container.label());
    } else {
      have_other = true;
    }
    s->device_bytes += pv.device_bytes;
    s->launches += p.launches;
    s->graph_launches += p.graph_launches;
    s->alloc_failures += p.alloc_failures;
    s->sync_ns_sum += p.sync_ns_sum;
    for (int b = 0; b < kSyncBuckets; ++b) s->hist[b] += p.sync_hist[b];
  }
  if (have_other) m->procs.push_back(std::move(other));
  ContainerSeries other_c;
  other_c.container = "other";
  bool have_other_c = false;
  for (size_t i = 0; i < v.containers.size(); ++i) {
    const ContainerView& cv = v.containers[i];
    m->quota_now += cv.over_quota;
    if (i < options_.max_series) {
      m->containers.push_back({validUtf8(cv.label), validUtf8(cv.container.pod_name),
                               validUtf8(cv.container.pod_namespace), cv.device_bytes,
                               cv.quota_bytes});
    } else {
      have_other_c = true;
      other_c.device_bytes += cv.device_bytes;
    }
  }
  if (have_other_c) m->containers.push_back(std::move(other_c));

  std::unordered_map<uint32_t, ProcessHealth> health;
  health.reserve(v.processes.size());
  for (const ProcessView& pv : v.processes)
    health[pv.tgid] = ProcessHealth{true, pv.over_quota, pv.anomaly, pv.leak_suspect};
  last_tick_ns_ = now_ns;
  {
    std::lock_guard lock(mu_);
    view_ = v;
    health_ = std::move(health);
    metrics_ = std::move(m);
  }
  std::function<void(const GpuView&)> listener;
  {
    std::lock_guard lock(listener_mu_);
    listener = listener_;
  }
  if (listener) listener(v);
}

GpuView GpuMonitor::view() const {
  std::lock_guard lock(mu_);
  return view_;
}

ProcessHealth GpuMonitor::healthOf(uint32_t tgid) const {
  std::lock_guard lock(mu_);
  auto it = health_.find(tgid);
  return it == health_.end() ? ProcessHealth{} : it->second;
}

void GpuMonitor::setListener(std::function<void(const GpuView&)> after_tick) {
  std::lock_guard lock(listener_mu_);
  listener_ = std::move(after_tick);
}

uint64_t GpuMonitor::webhookSent() const { return webhook_ ? webhook_->sent() : 0; }
uint64_t GpuMonitor::webhookFailed() const { return webhook_ ? webhook_->failed() : 0; }
uint64_t GpuMonitor::webhookDropped() const { return webhook_ ? webhook_->dropped() : 0; }
bool GpuMonitor::waitWebhookIdle(uint64_t timeout_ms) const {
  return webhook_ ? webhook_->waitIdle(std::chrono::milliseconds(timeout_ms)) : true;
}

std::string GpuMonitor::renderMetrics() const {
  std::string out;
  std::lock_guard lock(mu_);
  const MetricsData& m = *metrics_;
  family(out, "infergate_gpu_probes_active", "gauge",
         "1 when at least one CUDA driver probe is attached");
  sample(out, "infergate_gpu_probes_active", {}, m.active ? 1 : 0);
  family(out, "infergate_gpu_probe_symbols", "gauge",
         "CUDA driver symbols probed (attached) or not found in the library (missing)");
  sample(out, "infergate_gpu_probe_symbols", {{"state", "attached"}}, m.attached);
  sample(out, "infergate_gpu_probe_symbols", {{"state", "missing"}}, m.missing);
  family(out, "infergate_gpu_processes", "gauge", "Processes the probes currently track");
  sample(out, "infergate_gpu_processes", {}, m.processes);

  family(out, "infergate_gpu_process_device_bytes", "gauge",
         "Live device memory of a process (the largest max_series; the rest under pid=\"other\")");
  for (const Series& s : m.procs)
    sample(out, "infergate_gpu_process_device_bytes",
           {{"pid", s.pid}, {"comm", s.comm}, {"container", s.container}}, s.device_bytes);
  family(out, "infergate_gpu_process_launches_total", "counter",
         "cuLaunchKernel and cuLaunchKernelEx calls of a process");
  for (const Series& s : m.procs)
    sample(out, "infergate_gpu_process_launches_total",
           {{"pid", s.pid}, {"comm", s.comm}, {"container", s.container}}, s.launches);
  family(out, "infergate_gpu_process_graph_launches_total", "counter",
         "cuGraphLaunch calls of a process");
  for (const Series& s : m.procs)
    sample(out, "infergate_gpu_process_graph_launches_total",
           {{"pid", s.pid}, {"comm", s.comm}, {"container", s.container}}, s.graph_launches);
  family(out, "infergate_gpu_process_alloc_failures_total", "counter",
         "Device and host allocations of a process that returned an error");
  for (const Series& s : m.procs)
    sample(out, "infergate_gpu_process_alloc_failures_total",
           {{"pid", s.pid}, {"comm", s.comm}, {"container", s.container}}, s.alloc_failures);
  family(out, "infergate_gpu_process_sync_seconds", "histogram",
         "Host-side time from the first pending launch to the synchronisation's return");
  for (const Series& s : m.procs) {
    uint64_t cum = 0;
    for (int b = 0; b + 1 < kSyncBuckets; ++b) {
      cum += s.hist[b];
      const double le = static_cast<double>((uint64_t{2} << b) - 1) / 1e9;
      sample(out, "infergate_gpu_process_sync_seconds_bucket",
             {{"pid", s.pid}, {"comm", s.comm}, {"container", s.container}}, cum,
             fmt::format("le=\"{}\"", le));
    }
    cum += s.hist[kSyncBuckets - 1];
    sample(out, "infergate_gpu_process_sync_seconds_bucket",
           {{"pid", s.pid}, {"comm", s.comm}, {"container", s.container}}, cum, "le=\"+Inf\"");
    sample(out, "infergate_gpu_process_sync_seconds_sum",
           {{"pid", s.pid}, {"comm", s.comm}, {"container", s.container}},
           static_cast<double>(s.sync_ns_sum) / 1e9);
    sample(out, "infergate_gpu_process_sync_seconds_count",
           {{"pid", s.pid}, {"comm", s.comm}, {"container", s.container}}, cum);
  }

  family(out, "infergate_gpu_container_device_bytes", "gauge",
         "Live device memory of a cgroup (container), the largest max_series; the rest under "
         "container=\"other\"");
  for (const ContainerSeries& c : m.containers)
    sample(out, "infergate_gpu_container_device_bytes",
           {{"container", c.container}, {"pod", c.pod}, {"namespace", c.ns}}, c.device_bytes);
  family(out, "infergate_gpu_container_quota_bytes", "gauge",
         "The device memory quota of a cgroup (container) that has one");
  for (const ContainerSeries& c : m.containers)
    if (c.quota > 0)
      sample(out, "infergate_gpu_container_quota_bytes",
             {{"container", c.container}, {"pod", c.pod}, {"namespace", c.ns}}, c.quota);

  family(out, "infergate_gpu_allocations_total", "counter",
         "Successful allocations by memory kind, over every process seen (exited ones included)");
  for (int k = 0; k < kMemKinds; ++k)
    sample(out, "infergate_gpu_allocations_total", {{"kind", memKindName(k)}}, m.allocs[k]);
  family(out, "infergate_gpu_frees_total", "counter",
         "Successful frees of tracked allocations by memory kind, over every process seen");
  for (int k = 0; k < kMemKinds; ++k)
    sample(out, "infergate_gpu_frees_total", {{"kind", memKindName(k)}}, m.frees[k]);
  family(out, "infergate_gpu_live_bytes", "gauge",
         "Live allocated bytes by memory kind over the processes tracked");
  for (int k = 0; k < kMemKinds; ++k)
    sample(out, "infergate_gpu_live_bytes", {{"kind", memKindName(k)}}, m.live[k]);
  family(out, "infergate_gpu_events_total", "counter",
         "Rare events from the probes' ring buffer");
  sample(out, "infergate_gpu_events_total", {{"type", "alloc_failed"}}, m.events[IG_GPU_EV_ALLOC_FAILED]);
  sample(out, "infergate_gpu_events_total", {{"type", "large_alloc"}}, m.events[IG_GPU_EV_LARGE_ALLOC]);
  family(out, "infergate_gpu_probe_drops_total", "counter",
         "What the probes could not record, by reason (a bounded map or the ring buffer full)");
  const std::pair<const char*, uint64_t> drops[] = {
      {"proc_map_full", m.stats.proc_map_full},     {"cgroup_map_full", m.stats.cgroup_map_full},
      {"alloc_map_full", m.stats.alloc_map_full},   {"call_map_full", m.stats.call_map_full},
      {"pending_map_full", m.stats.pending_map_full}, {"ringbuf_full", m.stats.ringbuf_full}};
  for (const auto& [reason, n] : drops)
    sample(out, "infergate_gpu_probe_drops_total", {{"reason", reason}}, n);
  family(out, "infergate_gpu_probe_returns_unmatched_total", "counter",
         "Return probes with no kept entry (attached in the middle of a call)");
  sample(out, "infergate_gpu_probe_returns_unmatched_total", {}, m.stats.returns_unmatched);
  family(out, "infergate_gpu_probe_calls_total", "counter", "Probe hits per driver function");
  for (int f = 0; f < IG_GPU_FN_MAX; ++f)
    sample(out, "infergate_gpu_probe_calls_total", {{"fn", fnName(f)}}, m.stats.calls[f]);

  family(out, "infergate_gpu_leak_detections_total", "counter",
         "Processes that became leak candidates");
  sample(out, "infergate_gpu_leak_detections_total", {}, m.leak_total);
  family(out, "infergate_gpu_anomaly_detections_total", "counter",
         "Processes whose launch->sync time went above factor x their baseline");
  sample(out, "infergate_gpu_anomaly_detections_total", {}, m.anomaly_total);
  family(out, "infergate_gpu_over_quota_detections_total", "counter",
         "Containers whose device memory went above their quota");
  sample(out, "infergate_gpu_over_quota_detections_total", {}, m.quota_total);
  family(out, "infergate_gpu_leak_suspects", "gauge", "Processes now leak candidates");
  sample(out, "infergate_gpu_leak_suspects", {}, m.leak_now);
  family(out, "infergate_gpu_anomalous_processes", "gauge",
         "Processes now in a launch->sync anomaly");
  sample(out, "infergate_gpu_anomalous_processes", {}, m.anomaly_now);
  family(out, "infergate_gpu_over_quota_containers", "gauge", "Containers now over their quota");
  sample(out, "infergate_gpu_over_quota_containers", {}, m.quota_now);

  family(out, "infergate_gpu_webhook_sent_total", "counter", "Detector webhooks answered 2xx");
  sample(out, "infergate_gpu_webhook_sent_total", {}, webhookSent());
  family(out, "infergate_gpu_webhook_failed_total", "counter",
         "Detector webhooks that failed (connection, timeout or a non-2xx answer)");
  sample(out, "infergate_gpu_webhook_failed_total", {}, webhookFailed());
  family(out, "infergate_gpu_webhook_dropped_total", "counter",
         "Detector webhooks dropped because the queue was full");
  sample(out, "infergate_gpu_webhook_dropped_total", {}, webhookDropped());
  return out;
}

}  // namespace infergate::gpu
