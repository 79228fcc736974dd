#include "app/doctor.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <string>
#include <vector>

#include <unistd.h>

#include "gpu/process_info.h"
#include "gpu/prologue.h"
#ifdef INFERGATE_HAVE_XDP
#include "xdp/host_probe.h"
#endif

namespace infergate::app {

#ifdef INFERGATE_HAVE_XDP
namespace {

using xdp::HostReport;
using xdp::Support;

struct ModeVerdict {
  std::string mode;
  bool works = false;
  std::string how;  // what it will use, or what it lacks
};

// Which modes run on this host, from the report.
std::vector<ModeVerdict> modeVerdicts(const HostReport& r, bool have_interface) {
  std::vector<ModeVerdict> v;
  v.push_back({"socket", true, "kernel sockets: nothing to probe"});
  const bool bpf = r.has("bpf");
  const bool native = r.has("xdp_native"), generic = r.has("xdp_generic");
  {
    ModeVerdict m{"xdp-filter", false, ""};
    if (!bpf) {
      m.how = "cannot load BPF programs (see bpf)";
    } else if (!have_interface) {
      m.works = true;
      m.how = "BPF loads; name --interface to probe attaching";
    } else if (native || generic) {
      m.works = true;
      m.how = native ? "native XDP on " + r.interface
                     : "generic XDP on " + r.interface + " (set xdp.attach: generic)";
      if (!r.has("xdp_adjust_tail")) m.how += "; no RSTs from the program (xdp.send_rst: false)";
    } else {
      m.how = "the program cannot be attached to " + r.interface + " (see xdp_native, xdp_generic)";
    }
    v.push_back(m);
  }
  {
    ModeVerdict m{"afxdp", false, ""};
    const bool meta = r.has("xdp_adjust_meta"), head = r.has("xdp_adjust_head");
    const std::string tags = meta   ? "tags in XDP metadata"
                             : head ? "tags as a 16-byte frame prefix (bpf_xdp_adjust_meta refused)"
                                    : "";
    if (!bpf) {
      m.how = "cannot load BPF programs (see bpf)";
    } else if (!r.has("xskmap")) {
      m.how = "no XSKMAP (see xskmap)";
    } else if (tags.empty()) {
      m.how = "neither metadata nor a prefix can carry the program's tags";
    } else if (!have_interface) {
      m.works = true;
      m.how = tags + "; name --interface to probe AF_XDP binds";
    } else if (!r.has("xsk_copy")) {
      const xdp::HostFeature* f = r.find("xsk_copy");
      m.how = "no AF_XDP socket binds on " + r.interface + (f ? " (" + f->detail + ")" : "");
    } else if (!(native || generic)) {
      m.how = "the program cannot be attached to " + r.interface;
    } else {
      m.works = true;
      m.how = fmt::format("{} mode, {}{}{}", r.has("xsk_zero_copy") ? "zero-copy" : "copy", tags,
                          r.has("xsk_need_wakeup") ? ", need_wakeup" : ", no need_wakeup",
                          r.has("xsk_busy_poll") ? ", busy polling available" : "");
    }
    v.push_back(m);
  }
  return v;
}

}  // namespace

// The GPU probes' cost on this host's CUDA driver: which probed entry points start with an
// instruction the kernel's uprobes emulate (one trap) or must single-step (two traps).
struct CudaPrologues {
  std::string library;  // "" when none was found
  std::string why;      // where it came from, or why none
  std::vector<gpu::Prologue> prologues;
  std::string error;
};
CudaPrologues cudaPrologues(const std::string& configured) {
  CudaPrologues c;
  if (!configured.empty()) {
    c.library = configured;
    c.why = "as given";
  } else {
    for (const std::string& p : gpu::standardCudaLibraryPlaces()) {
      if (access(p.c_str(), R_OK) == 0) {
        c.library = p;
        c.why = "found at a standard place";
        break;
      }
    }
    if (c.library.empty()) c.why = "no libcuda.so.1 at the standard places (no CUDA driver here)";
  }
  if (!c.library.empty()) {
    absl::StatusOr<std::vector<gpu::Prologue>> p = gpu::probedPrologues(c.library);
    if (p.ok())
      c.prologues = std::move(*p);
    else
      c.error = std::string(p.status().message());
  }
  return c;
}

int runDoctor(const DoctorOptions& o, std::FILE* out) {
  std::string configured_mode;
  std::string interface = o.interface;
  std::string cuda_library = o.cuda_library;
  if (!o.config.empty()) {
    absl::StatusOr<config::Config> c = config::loadConfigFile(o.config);
    if (!c.ok()) {
      std::fprintf(stderr, "infergate: %s\n", std::string(c.status().message()).c_str());
      return 2;
    }
    configured_mode = std::string(config::modeName(c->mode));
    if (interface.empty()) interface = c->xdp.interface;
    if (cuda_library.empty()) cuda_library = c->gpu.library;
  }
  xdp::HostProbeOptions po;
  po.interface = interface;
  po.queue = o.queue;
  po.attach = o.attach;
  HostReport r = xdp::probeHost(po);
  {
    const CudaPrologues cp = cudaPrologues(cuda_library);
    xdp::HostFeature f;
    f.name = "cuda_prologues";
    f.without =
        "each probed CUDA driver call pays a second uprobe trap: about 5.5 us a launch "
        "instead of 0.6 us on our VM (docs/BENCHMARKS.md, GPU probe costs); gpu.enabled "
        "still works";
    f.fix =
        "a driver build whose entry points start with push/nop/call/jmp (frame pointers); "
        "or keep the GPU watch for hosts where the cost is acceptable";
    size_t stepped = 0;
    std::string names;
    for (const gpu::Prologue& p : cp.prologues) {
      if (p.emulated) continue;
      ++stepped;
      names += (names.empty() ? "" : ", ") + p.function;
    }
    if (cp.library.empty() || !cp.error.empty()) {
      f.support = Support::kUnknown;
      f.detail = cp.library.empty() ? cp.why : cp.library + ": " + cp.error;
    } else if (cp.prologues.empty()) {
      f.support = Support::kUnknown;
      f.detail = cp.library + " defines none of the probed functions";
    } else {
      f.support = stepped == 0 ? Support::kYes : Support::kNo;
      f.detail = stepped == 0 ? fmt::format(
                                    "{}: all {} probed entry points start with an emulated "
                                    "instruction (one trap)",
                                    cp.library, cp.prologues.size())
                              : fmt::format(
                                    "{}: {} of {} probed entry points are single-stepped "
                                    "(two traps): {}",
                                    cp.library, stepped, cp.prologues.size(), names);
    }
    r.features.push_back(f);
  }

  std::fprintf(out, "infergate doctor: kernel %s", r.kernel.c_str());
  if (!r.interface.empty())
    std::fprintf(out, ", interface %s (%s)", r.interface.c_str(),
                 r.driver.empty() ? "driver unknown" : r.driver.c_str());
  std::fprintf(out, "\n\nWhat this host gives (each probed by loading or binding it):\n");
  for (const xdp::HostFeature& f : r.features) {
    std::fprintf(out, "  %-18s %-8s %s\n", f.name.c_str(), xdp::supportName(f.support),
                 f.detail.c_str());
    if (f.support != Support::kYes) {
      std::fprintf(out, "  %-18s %-8s without it: %s\n", "", "", f.without.c_str());
      std::fprintf(out, "  %-18s %-8s fix: %s\n", "", "", f.fix.c_str());
    }
  }
  std::fprintf(out, "\nModes on this host:\n");
  bool configured_works = configured_mode.empty();
  for (const ModeVerdict& m : modeVerdicts(r, !r.interface.empty())) {
    std::fprintf(out, "  %-11s %-12s %s\n", m.mode.c_str(), m.works ? "will work" : "will not",
                 m.how.c_str());
    if (m.mode == configured_mode) configured_works = m.works;
  }
  std::fprintf(out, "  %-11s %-12s %s\n", "dpdk", "see DPDK.md",
               "a DPDK-bound NIC (or net_af_packet for tests); not probed here");
  if (configured_mode == "dpdk") configured_works = true;
  if (configured_mode.empty()) configured_works = true;
  std::fprintf(out,
               "\nWhat each fallback costs, measured: docs/HOSTS.md and docs/BENCHMARKS.md "
               "(bench/xdp/tag_placement_bench, bench/tag_placement.sh measure it here).\n");
  if (!o.config.empty())
    std::fprintf(out, "\n%s: mode %s %s on this host\n", o.config.c_str(), configured_mode.c_str(),
                 configured_works ? "will work" : "will NOT work");
  return configured_works ? 0 : 1;
}

void probeHostAtStartup(const config::Config& c, common::MetricsRegistry& registry) {
  // Kernel-wide probes only: the interface's own (attach, AF_XDP binds) are what the mode's
  // start-up does next, and it says what it got (infergate doctor probes them beforehand).
  xdp::HostProbeOptions po;
  const HostReport r = xdp::probeHost(po);
  spdlog::info("host: {}", r.summary());
  (void)c;
  xdp::registerHostMetrics(registry, r);
}

#else  // a build without the XDP program: no BPF probes

int runDoctor(const DoctorOptions&, std::FILE* out) {
  std::fprintf(out,
               "infergate doctor: this build has no XDP support (libbpf, clang and bpftool were "
               "not found at configure time): only socket mode runs; scripts/install-deps.sh "
               "installs them\n");
  return 0;
}

void probeHostAtStartup(const config::Config&, common::MetricsRegistry&) {}

#endif

}  // namespace infergate::app
