// infergate: the command-line interface.
//   infergate run [-c FILE]        serve (the embedded default config without -c); SIGHUP reloads
//   infergate check-config -c FILE validate a config and exit
//   infergate print-config         print the embedded default config
//   infergate gpu [--once]         the GPU watch of a running gateway (docs/GPU.md)
//   infergate top [--once]         live view of a running gateway's /metrics (docs/OPERATIONS.md)
//   infergate doctor [-c FILE] [--interface IF]  what this host gives, what will run (docs/HOSTS.md)
//   infergate --version

#include <malloc.h>
#include <signal.h>

#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "app/doctor.h"
#include "app/gpu_watch.h"
#include "app/modes/mode.h"
#include "app/reload.h"
#include "app/server.h"
#include "app/top.h"
#include "common/logging.h"
#include "config/config.h"
#include "spdlog/spdlog.h"

namespace {

using infergate::config::Config;

absl::StatusOr<Config> loadConfig(const std::string& path) {
  if (path.empty()) {
    return infergate::config::loadConfigString(infergate::config::defaultConfigYaml(),
                                               "<embedded default>");
  }
  return infergate::config::loadConfigFile(path);
}

// Large tensors: glibc hands the top of a heap back to the kernel once more than
// M_TRIM_THRESHOLD is free there (128 KiB, raised only by the dynamic mmap threshold), so each
// request's body, slot and response buffers (256 KiB .. 32 MiB) came back as fresh pages:
// ~55 page faults (and page zeroing) per 256 KiB echo, 13 % of an afxdp reactor's time. Keep up
// to 128 MiB free per arena and serve buffers up to 32 MiB (glibc's largest mmap threshold)
// from the heaps; set before any thread starts, as both turn the dynamic threshold off.
void tuneMalloc() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 128 << 20);
}

int runServer(const std::string& path, uint64_t drain_ms) {
  tuneMalloc();
  // With -c, the text is kept: SIGHUP and POST /admin/reload diff the new file against it.
  absl::StatusOr<std::string> text =
      path.empty() ? absl::StatusOr<std::string>(std::string()) : infergate::app::readConfigText(path);
  absl::StatusOr<Config> cfg =
      !text.ok() ? absl::StatusOr<Config>(text.status())
      : path.empty() ? loadConfig(path)
                     : infergate::config::loadConfigString(*text, path);
  if (!cfg.ok()) {
    std::fprintf(stderr, "infergate: %s\n", std::string(cfg.status().message()).c_str());
    return 2;
  }
  if (absl::Status st = infergate::common::setupLogging(cfg->logging.level); !st.ok()) {
    std::fprintf(stderr, "infergate: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  spdlog::info("infergate {} starting: config {}, mode {}", INFERGATE_VERSION, cfg->source,
               infergate::config::modeName(cfg->mode));
  // Block the stop signals (and SIGHUP, reload) in every thread; the main thread waits for
  // them with sigwait.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  infergate::app::Server server(std::move(*cfg));
  if (!path.empty()) server.setReloadSource(path, std::move(*text));
  if (absl::Status st = server.start(); !st.ok()) {
    spdlog::critical("cannot start: {}", std::string(st.message()));
    return 1;
  }
  int sig = 0;
  while (sigwait(&set, &sig) == 0 && sig == SIGHUP) {
    spdlog::info("received SIGHUP: reloading the configuration");
    server.reload();  // logs and counts its result
  }
  spdlog::info("received {}: draining (up to {} ms)", sig == SIGTERM ? "SIGTERM" : "SIGINT",
               drain_ms);
  server.stop(drain_ms);
  spdlog::info("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"infergate: an inference ingress gateway (KServe v2 / Open Inference Protocol)",
               "infergate"};
  app.set_version_flag("--version", std::string("infergate ") + INFERGATE_VERSION);
  app.require_subcommand(1);

  std::string run_config;
  uint64_t drain_ms = 5000;
  CLI::App* run = app.add_subcommand("run", "Serve requests (the embedded default config without -c)");
  run->add_option("-c,--config", run_config, "YAML configuration file")->check(CLI::ExistingFile);
  run->add_option("--drain-ms", drain_ms, "On SIGTERM/SIGINT, time allowed for in-flight requests")
      ->capture_default_str();

  std::string check_config;
  CLI::App* check = app.add_subcommand("check-config", "Validate a configuration file and exit");
  check->add_option("-c,--config", check_config, "YAML configuration file")->required();

  CLI::App* print = app.add_subcommand("print-config", "Print the embedded default configuration");

  std::string pin_path = "/sys/fs/bpf/infergate";
  CLI::App* stats = app.add_subcommand(
      "stats", "Print the XDP program's counters from the maps a running gateway pinned (xdp.pin_path)");
  stats->add_option("--pin-path", pin_path, "bpffs directory of the pinned maps")->capture_default_str();

  std::string gpu_admin = "127.0.0.1:8002";
  bool gpu_once = false, gpu_json = false;
  uint64_t gpu_interval_ms = 1000;
  CLI::App* gpu = app.add_subcommand(
      "gpu", "Show the GPU processes a running gateway watches (its /admin/gpu), refreshed like top");
  gpu->add_option("--admin", gpu_admin, "host:port of the gateway's admin listener")->capture_default_str();
  gpu->add_flag("--once", gpu_once, "Print one view and exit");
  gpu->add_flag("--json", gpu_json, "The view as JSON (with --once for scripts)");
  gpu->add_option("--interval-ms", gpu_interval_ms, "Refresh period")
      ->check(CLI::Range(100, 3600000))
      ->capture_default_str();

  infergate::app::top::TopOptions top_opts;
  std::string top_sort = "rate";
  CLI::App* top = app.add_subcommand(
      "top", "Live view of a running gateway from its /metrics: rates, latency, queues, XDP drops");
  top->add_option("--admin", top_opts.admin, "host:port of the gateway's admin listener")
      ->capture_default_str();
  top->add_flag("--once", top_opts.once, "Print one frame (rates over one interval) and exit");
  top->add_option("--interval-ms", top_opts.interval_ms, "Refresh period")
      ->check(CLI::Range(100, 3600000))
      ->capture_default_str();
  top->add_option("--sort", top_sort, "Model rows sorted by rate, p99, p50, errors or name")
      ->check(CLI::IsMember({"rate", "p99", "p50", "errors", "name"}))
      ->capture_default_str();

  infergate::app::DoctorOptions doctor_opts;
  bool doctor_no_attach = false;
  CLI::App* doctor = app.add_subcommand(
      "doctor", "Probe what this kernel and interface give, which modes will work, and the fixes");
  doctor->add_option("-c,--config", doctor_opts.config, "YAML configuration file: will its mode run?")
      ->check(CLI::ExistingFile);
  doctor->add_option("--interface", doctor_opts.interface,
                     "Interface to probe (XDP attach, AF_XDP binds); default: the config's xdp.interface");
  doctor->add_option("--queue", doctor_opts.queue, "rx queue the AF_XDP probes bind to")
      ->capture_default_str();
  doctor->add_option("--cuda-library", doctor_opts.cuda_library,
                     "CUDA driver library whose probed entry points to check (default: gpu.library, "
                     "else the standard places)");
  doctor->add_flag("--no-attach", doctor_no_attach,
                   "Do not attach a test XDP program to the interface");

  CLI11_PARSE(app, argc, argv);

  if (*doctor) {
    doctor_opts.attach = !doctor_no_attach;
    spdlog::set_level(spdlog::level::off);  // libbpf's notes; the report says it all
    return infergate::app::runDoctor(doctor_opts, stdout);
  }

  if (*gpu) return infergate::app::runGpuView(gpu_admin, gpu_once, gpu_interval_ms, gpu_json);
  if (*top) {
    infergate::app::top::parseSortKey(top_sort, top_opts.sort);
    return infergate::app::top::runTop(top_opts);
  }

  if (*run) return runServer(run_config, drain_ms);
  if (*check) {
    absl::StatusOr<Config> cfg = infergate::config::loadConfigFile(check_config);
    if (!cfg.ok()) {
      std::fprintf(stderr, "infergate: %s\n", std::string(cfg.status().message()).c_str());
      return 2;
    }
    std::printf("%s: OK (mode %s, %zu listener(s), %zu model(s))\n", check_config.c_str(),
                std::string(infergate::config::modeName(cfg->mode)).c_str(), cfg->listeners.size(),
                cfg->models.size());
    return 0;
  }
  if (*stats) {
    if (absl::Status st = infergate::app::printXdpStats(pin_path, stdout); !st.ok()) {
      std::fprintf(stderr, "infergate: %s\n", std::string(st.message()).c_str());
      return 1;
    }
    return 0;
  }
  if (*print) {
    std::fputs(std::string(infergate::config::defaultConfigYaml()).c_str(), stdout);
    return 0;
  }
  return 0;
}
