#pragma once
// The GPU watch of `infergate run` (docs/GPU.md): the CUDA driver probes (gpu/gpu_probes.h)
// when they can attach, the monitor and its detectors (gpu/gpu_monitor.h), its metrics and
// the /admin/gpu view, and the loop into admission: after every monitor tick, each model's
// endpoints are mapped to the GPU processes serving them (a local endpoint's port to the
// process listening on it; an in-process model to infergate itself), endpoints whose process is
// over its memory quota or in a latency anomaly are marked degraded in their pool, and a model
// whose every known GPU process is unhealthy gets gpu.overload_level as its external overload
// level (Batcher::setExternalOverload: the NIC sheds the lowest classes in the XDP modes, the
// batcher refuses the levels they map to in every mode).
//
// Threading: start() and the destructor from the main thread; the health loop runs on the
// monitor's thread; adminResponse() on the admin reactor's.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/model.h"
#include "common/metrics.h"
#include "config/config.h"
#include "frontend/http.h"
#include "gpu/gpu_monitor.h"
#include "gpu/gpu_source.h"
#include "gpu/process_info.h"

namespace infergate::app {

class GpuWatch {
 public:
  // config.gpu.enabled must be true. Probes that cannot attach (no libcuda.so.1, no BPF
  // privilege, a build without libbpf) are logged with the reason and the watch runs with the
  // probes off (its view and infergate_gpu_probes_active say so); with gpu.required it is the
  // start-up error instead. `models` and `registry` must outlive the watch.
  static absl::StatusOr<std::unique_ptr<GpuWatch>> start(const config::GpuConfig& config,
                                                         const backends::ModelRegistry& models,
                                                         common::MetricsRegistry& registry);
  ~GpuWatch();  // stops the monitor, detaches the probes, lowers every external level it raised

  bool probesActive() const { return source_->report().active; }
  // GET /admin/gpu: the `infergate gpu` table (text/plain); ?format=json: the same as JSON.
  frontend::HttpResponse adminResponse(const frontend::HttpRequest& request) const;

  // One health pass over a view (the monitor's listener; tests call it with a made-up view).
  void applyHealth(const gpu::GpuView& view);

  // Where an endpoint's GPU process is looked for: "host:port" with a local host (loopback, an
  // address of this machine, its host name or "localhost") gives the port; else 0.
  static uint16_t localPortOf(const std::string& endpoint, const std::vector<std::string>& local_hosts);

 private:
  GpuWatch(const config::GpuConfig& config, const backends::ModelRegistry& models);

  config::GpuConfig config_;
  const backends::ModelRegistry& models_;
  gpu::ProcessInfo info_;
  std::unique_ptr<gpu::GpuSource> source_;
  std::unique_ptr<gpu::GpuMonitor> monitor_;
  std::vector<std::string> local_hosts_;
  // Monitor thread only: what was last applied, so only changes are logged and set.
  std::map<std::string, bool> degraded_;  // "model\nendpoint" -> marked
  std::map<const backends::Model*, int> levels_;
};

// Prints a running gateway's /admin/gpu (`infergate gpu`): once, or refreshed every
// `interval_ms` on a cleared terminal until interrupted. `admin` is host:port.
int runGpuView(const std::string& admin, bool once, uint64_t interval_ms, bool json);

}  // namespace infergate::app
