#pragma once
// What the XDP ingress program is loaded with: the one definition of the XDP options. The
// config file's `xdp:` section is read straight into this struct (config/config.cc), so the
// defaults below are the config file's defaults; `priority.from_client` and
// `priority.trusted_sources` fill priority_from / trusted_sources; the app adds the service
// ports of its listeners, and the afxdp mode its own knobs (redirect_xsk, tags, ...).
//
// Header-only (enums, names, the struct): config/ includes it in builds without libbpf too.
// xdp/ owns it and includes neither config/ nor backends/.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/priority.h"

namespace infergate::xdp {

enum class AttachMode { kNative, kGeneric };

// How a RST leaves: XDP_TX, or XDP_REDIRECT to the interface it came in on. kAuto redirects on
// a veth in native mode, where XDP_TX frames reach a peer without an XDP program only when
// something else wakes the peer (see XdpFilter::attach), and uses XDP_TX elsewhere.
enum class RstTx { kAuto, kTx, kRedirect };

// IPv4 fragments and IPv6 extension headers to a service port (enum ig_frag_policy): neither
// the program nor userspace's stack reassembles or parses them, so they would carry a request
// past every check. kDrop drops first fragments / extension-header packets that target a
// service port and IPv4 fragments at offset 8 (RFC 1858); later fragments carry no port and
// are passed (the kernel cannot reassemble them without the first). kDropAll also drops every
// later TCP fragment; kPass passes everything (networks that fragment TCP).
enum class FragPolicy { kDrop, kDropAll, kPass };

// afxdp: SYN cookies answered by the program. kAuto: loaded, off until userspace turns cookie
// mode on (XdpFilter::setCookieMode, when the stack's backlog is under pressure); kAlways: on
// from the start; kOff: never (the program passes every SYN to the stack).
enum class SynCookies { kAuto, kAlways, kOff };

// Priority classes (common/priority.h): 0 is the highest. The overload level n admits
// classes < kNumClasses - n.
inline constexpr int kNumClasses = common::kPriorityClasses;
// "high", "normal", "low", "background"; "none" out of range.
inline const char* className(int cls) {
  static constexpr const char* kNames[] = {"high", "normal", "low", "background"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == kNumClasses, "className table");
  return cls >= 0 && cls < kNumClasses ? kNames[cls] : "none";
}

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
  // Whose header counts (config priority.from_client): kTrusted, the sources in
  // trusted_sources (marked in the CIDR map); kAll, everyone; kOff, no one.
  enum class PriorityFrom { kTrusted, kAll, kOff };
  PriorityFrom priority_from = PriorityFrom::kTrusted;
  // CIDRs (config priority.trusted_sources); with cidr_rules at most 1024 entries.
  std::vector<std::string> trusted_sources = {"127.0.0.0/8", "::1/128"};
  bool send_rst = true;                            // answer rejected request starts with a RST
  bool track_flows = true;                         // flow map: first segment, rejects, tags
  // Where frames redirected to an AF_XDP socket carry the program's tag (enum ig_tag_mode,
  // docs/HOSTS.md; config xdp.tags). kAuto: metadata where this kernel's verifier accepts
  // bpf_xdp_adjust_meta (probed by loading, xdp/host_probe.h), else a 16-byte prefix (with
  // redirect_xsk; without it, nothing). kMetadata / kPrefix force one (an error when the
  // kernel refuses it); kOff writes none (xdp-filter mode reads tags from the flow map).
  // XdpFilter::tagPlacement() says what was loaded.
  enum class TagPlacement { kOff, kAuto, kMetadata, kPrefix };
  TagPlacement tags = TagPlacement::kOff;
  // afxdp: admitted service-port segments go to the AF_XDP socket of their rx queue (the
  // XSKMAP, XdpFilter::xskMapFd()); with no socket on that queue they are passed (XDP_PASS).
  bool redirect_xsk = false;
  // A malformed request start that is not the connection's first data segment (a keep-alive
  // request, or body bytes that happen to look like one) is reset (true) or passed as a
  // continuation for userspace to judge (false, the default: a binary upload whose segment
  // begins with "ABC " must not be reset). Known first segments are always judged.
  bool reject_mid_stream = false;
  RstTx rst_tx = RstTx::kAuto;
  FragPolicy fragments = FragPolicy::kDrop;
  // RSTs the program sends (rejected request starts), per second per CPU; 0 = unlimited. Over
  // the budget the segment is dropped (reason rst_rate_limited).
  uint64_t rst_rate_per_sec = 20000;
  uint64_t rst_burst = 0;                          // 0 = same as the rate
  uint32_t reject_ttl_ms = 2000;                   // a rejected flow's data is dropped this long
  // Per-source token buckets key a source by its prefix: IPv4 /32, IPv6 /64 (one host often
  // owns a whole /64; per-address buckets would not limit it).
  int source_prefix_v4 = 32;
  int source_prefix_v6 = 64;
  // afxdp only (redirect_xsk): cookie SYN-ACKs. synack_mss: our MSS over IPv4 (IPv6: 20 less);
  // 0 = the interface MTU - 40 at attach (1460 when unknown). synack_wscale: our window scale,
  // which must be the one the TCP stack uses (its rcv_wscale for TcpOptions::rcv_buf).
  SynCookies syn_cookies = SynCookies::kAuto;
  uint16_t synack_mss = 0;
  uint8_t synack_wscale = 3;
  // afxdp only: how each reactor waits for frames (docs/CONFIGURATION.md, docs/AFXDP.md).
  // busy_poll: spin on a non-blocking recvfrom (which runs the driver's NAPI) instead of
  // sleeping in poll(2); the socket gets SO_BUSY_POLL = busy_poll_usecs, SO_BUSY_POLL_BUDGET =
  // busy_poll_budget and, with prefer_busy_poll, SO_PREFER_BUSY_POLL.
  bool busy_poll = false;
  bool prefer_busy_poll = true;
  uint32_t busy_poll_usecs = 20;
  uint32_t busy_poll_budget = 64;
  uint32_t flow_entries = 65536;                   // slots of the flow table, rounded up to 2^n
  uint32_t bucket_entries = 65536;
  int overload_level = 0;
  std::string pin_path;                            // bpffs dir for the maps; empty = no pinning
  // Restart without a drop (docs/OPERATIONS.md "Restart without drops"; needs pin_path): the
  // program stays attached and its maps pinned when infergate stops, and the next infergate
  // takes them over: the same program is kept (same program id) and the new configuration's
  // rules are written into its rule maps, as a reload does; other load-time options or another
  // build replace the program atomically over the same maps. Never detached by infergate (ip
  // link set dev IF xdp off, and rm -r pin_path, remove it).
  bool keep_attached = false;
};

// The names the config file uses for the enums above, each written once: parseX(name) is
// nullopt for an unknown name, xName(value) the name (config/config.cc, logs, docs/XDP.md).
template <typename E>
struct NamedValue {
  std::string_view name;
  E value;
};
inline constexpr NamedValue<AttachMode> kAttachModeNames[] = {{"native", AttachMode::kNative},
                                                              {"generic", AttachMode::kGeneric}};
inline constexpr NamedValue<FragPolicy> kFragPolicyNames[] = {{"drop", FragPolicy::kDrop},
                                                              {"drop_all", FragPolicy::kDropAll},
                                                              {"pass", FragPolicy::kPass}};
inline constexpr NamedValue<SynCookies> kSynCookiesNames[] = {{"auto", SynCookies::kAuto},
                                                              {"always", SynCookies::kAlways},
                                                              {"off", SynCookies::kOff}};
inline constexpr NamedValue<XdpOptions::TagPlacement> kTagPlacementNames[] = {
    {"auto", XdpOptions::TagPlacement::kAuto},
    {"metadata", XdpOptions::TagPlacement::kMetadata},
    {"prefix", XdpOptions::TagPlacement::kPrefix}};
inline constexpr NamedValue<XdpOptions::PriorityFrom> kPriorityFromNames[] = {
    {"trusted", XdpOptions::PriorityFrom::kTrusted},
    {"all", XdpOptions::PriorityFrom::kAll},
    {"off", XdpOptions::PriorityFrom::kOff}};

template <typename E, size_t N>
std::optional<E> parseNamed(const NamedValue<E> (&table)[N], std::string_view name) {
  for (const NamedValue<E>& v : table) {
    if (v.name == name) return v.value;
  }
  return std::nullopt;
}
template <typename E, size_t N>
std::string_view nameOf(const NamedValue<E> (&table)[N], E value) {
  for (const NamedValue<E>& v : table) {
    if (v.value == value) return v.name;
  }
  return "unknown";
}

inline std::string_view attachModeName(AttachMode m) { return nameOf(kAttachModeNames, m); }
inline std::string_view fragPolicyName(FragPolicy p) { return nameOf(kFragPolicyNames, p); }
inline std::string_view synCookiesName(SynCookies s) { return nameOf(kSynCookiesNames, s); }
inline std::string_view tagPlacementName(XdpOptions::TagPlacement t) {
  return t == XdpOptions::TagPlacement::kOff ? "off" : nameOf(kTagPlacementNames, t);
}

}  // namespace infergate::xdp
