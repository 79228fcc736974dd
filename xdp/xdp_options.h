#pragma once
// What the XDP ingress program is loaded with. The app fills it from config::XdpConfig plus
// the service ports of its listeners (fromConfig); knobs not yet in the config file keep the
// defaults below.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"

namespace infergate::xdp {

enum class AttachMode { kNative, kGeneric };

// How a RST leaves: XDP_TX, or XDP_REDIRECT to the interface it came in on. kAuto redirects on
// a veth in native mode, where XDP_TX frames reach a peer without an XDP program only when
// something else wakes the peer (see XdpFilter::attach), and uses XDP_TX elsewhere.
enum class RstTx { kAuto, kTx, kRedirect };

// Priority classes: 0 is the highest. The overload level n admits classes < 4 - n.
inline constexpr int kNumClasses = 4;
const char* className(int cls);  // "high", "normal", "low", "background"

struct PathClassRule {
  std::string prefix;  // at most 32 bytes, e.g. "/v2/models/bert"
  int cls = 1;
};

struct CidrRule {
  std::string cidr;    // "10.0.0.0/8", "2001:db8::/32", "192.0.2.7" (host)
  int cls = -1;        // -1: no class from this rule
  bool exempt = false; // never rate-limited
};

struct XdpOptions {
  std::string interface;
  AttachMode attach = AttachMode::kNative;
  std::vector<uint16_t> service_ports;             // at most 8
  std::vector<std::string> methods = {"GET", "POST"};  // at most 8, each at most 8 bytes
  std::vector<std::string> path_prefixes = {"/v2/", "/v1/models/", "/metrics"};  // empty: any
  std::vector<PathClassRule> path_classes;         // prefixes + path_classes <= 16
  std::vector<CidrRule> cidr_rules;                // at most 1024
  uint32_t http2_max_frame_size = 16384;
  uint64_t syn_rate_per_sec = 0;                   // per source; 0 = off
  uint64_t syn_burst = 0;                          // 0 = same as the rate
  uint64_t request_rate_per_sec = 0;               // request starts per source; 0 = off
  uint64_t request_burst = 0;
  int default_class = 1;
  bool priority_header = true;                     // honour x-infergate-priority: <0..3>
  bool send_rst = true;                            // answer rejected request starts with a RST
  bool track_flows = true;                         // flow map: first segment, rejects, tags
  bool write_metadata = false;                     // tag in XDP metadata (afxdp path)
  // afxdp: admitted service-port segments go to the AF_XDP socket of their rx queue (the
  // XSKMAP, XdpFilter::xskMapFd()); with no socket on that queue they are passed (XDP_PASS).
  bool redirect_xsk = false;
  // A malformed request start that is not the connection's first data segment (a keep-alive
  // request, or body bytes that happen to look like one) is reset (true) or passed as a
  // continuation for userspace to judge (false). afxdp mode sets false: a binary upload whose
  // segment begins with "ABC " must not be reset. Known first segments are always judged.
  bool reject_mid_stream = true;
  RstTx rst_tx = RstTx::kAuto;
  uint32_t flow_entries = 65536;                   // slots of the flow table, rounded up to 2^n
  uint32_t bucket_entries = 65536;
  int overload_level = 0;
  std::string pin_path;                            // bpffs dir for the maps; empty = no pinning

  static absl::StatusOr<XdpOptions> fromConfig(const config::XdpConfig& c,
                                               std::vector<uint16_t> service_ports);
};

}  // namespace infergate::xdp
