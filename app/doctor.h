#pragma once
// `infergate doctor` (docs/HOSTS.md): what this host gives infergate, probed by loading
// (xdp/host_probe.h), which modes and options will work here, and the fix for each missing
// thing; with -c, whether that configuration's mode will start. And the start-up probe every
// `infergate run` logs once and exports as infergate_host_feature{feature}.

#include <cstdio>
#include <string>

#include "common/metrics.h"
#include "config/config.h"

namespace infergate::app {

struct DoctorOptions {
  std::string config;     // -c: a configuration file ("" = none)
  std::string interface;  // --interface (default: the config's xdp.interface)
  uint32_t queue = 0;
  bool attach = true;        // --no-attach: skip attaching a test XDP program
  std::string cuda_library;  // --cuda-library (default: the config's gpu.library, else the
                             // standard places): whose entry points the GPU probes would trap
};

// Prints the report to `out`; 0 when the configured mode (or, without -c, socket mode) can run
// here, 1 when it cannot, 2 for a bad configuration.
int runDoctor(const DoctorOptions& options, std::FILE* out);

// At start-up: the kernel-wide probes, logged once at info, exported on `registry`.
void probeHostAtStartup(const config::Config& c, common::MetricsRegistry& registry);

}  // namespace infergate::app
