#pragma once
// What this kernel and this interface give infergate, found by loading the thing each feature
// is (a few-instruction BPF program, an AF_XDP bind, a uprobe event), never by asking a feature
// list: `bpftool feature probe` lists bpf_xdp_adjust_meta on kernels whose verifier refuses it.
//
// probeHost() runs every probe once and returns a report: one HostFeature per feature, with what
// the probe saw, what infergate does without it, and the fix. The start-up path logs it once
// (summary()), exports it (registerHostMetrics: infergate_host_feature{feature} 0/1) and picks
// the configuration from it (XdpFilter: the tag placement); `infergate doctor` prints it whole.
//
// Side effects: none that outlive a call. Interface probes attach an XDP_PASS program only with
// XDP_FLAGS_UPDATE_IF_NOEXIST (a program already there is never replaced: the probe reports it)
// and detach it again; AF_XDP probes bind a 16-frame UMEM socket to the queue and close it (a
// queue another socket holds reports "in use"). Needs CAP_BPF/CAP_NET_ADMIN (root): without, the
// BPF features read "unknown" with the capability to grant.
// Threading: any thread; probeXdpHelper() results are cached per process (thread-safe).

#include <cstdint>
#include <string>
#include <vector>

#include "common/metrics.h"

namespace infergate::xdp {

enum class Support { kYes, kNo, kUnknown };
const char* supportName(Support s);  // "yes", "no", "unknown"

struct HostFeature {
  std::string name;  // stable key: "xdp_adjust_meta", "xsk_zero_copy", ... (docs/HOSTS.md)
  Support support = Support::kUnknown;
  std::string detail;   // what the probe saw ("accepted", the verifier's last line, an errno)
  std::string without;  // what infergate does when the feature is missing
  std::string fix;      // how to get it (kernel, driver, sysctl, capability, boot flag)
};

struct HostProbeOptions {
  std::string interface;  // empty: kernel-wide probes only
  uint32_t queue = 0;     // AF_XDP probes bind here
  bool attach = true;     // with an interface: try native and generic XDP attachment
  bool xsk = true;        // with an interface: try AF_XDP binds
};

struct HostReport {
  std::string kernel;     // uname -r
  std::string interface;  // as probed ("" when none)
  std::string driver;     // the interface's driver (ethtool), "" when unknown
  std::vector<HostFeature> features;

  const HostFeature* find(const std::string& name) const;
  bool has(const std::string& name) const;  // support == kYes
  // One line for the start-up log: "kernel 6.18.44; yes: a, b; no: c (why); unknown: d".
  std::string summary() const;
};

HostReport probeHost(const HostProbeOptions& options);

// The result of loading (and running once under BPF_PROG_TEST_RUN) an XDP program that calls
// one helper: accepted by the verifier, and whether the call succeeded at run time.
struct HelperProbe {
  bool loaded = false;
  bool call_ok = false;     // the helper returned 0 under BPF_PROG_TEST_RUN
  bool permission = false;  // the load was refused for privilege (EPERM): nothing learned
  std::string detail;       // "accepted" or the verifier's last line / errno
};
// `helper` is the BPF helper id (BPF_FUNC_xdp_adjust_meta, ...), called with (ctx, -16).
// Test hook: INFERGATE_PROBE_REFUSE=xdp_adjust_meta[,xdp_adjust_head,...] reports those refused
// (the detail says "simulated"), to run the fallback where the host has the better path.
HelperProbe probeXdpHelper(int helper);

// The verifier's reason in its log: the last line that is not the statistics it appends
// ("processed N insns ...", "verification time ...", "stack depth ..."); "" for an empty log.
std::string verifierReason(const char* log);

// Exports each feature of `report` as infergate_host_feature{feature="..."} (1 yes, 0 no;
// unknown ones are left out) on `registry`. The report is copied.
void registerHostMetrics(common::MetricsRegistry& registry, const HostReport& report);

}  // namespace infergate::xdp
