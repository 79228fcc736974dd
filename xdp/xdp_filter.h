#pragma once
// The control plane of the XDP ingress program (ingress.bpf.c): load it with XdpOptions,
// attach it to one interface, read its counters, change the overload level, look up flow
// tags, detach it.
//
// Ownership: XdpFilter owns the loaded program, its maps and the attachment. Destroying it
// detaches the program (only if the interface still runs ours) and unpins its maps.
// Threading: attach/detach from one thread (start-up, shutdown). readCounters(),
// setOverloadLevel() and lookupFlowTag() are safe to call from any thread concurrently with
// each other (they are single map syscalls), e.g. from the admin thread at scrape time.
// None of them is meant for a per-packet path: each is a bpf() system call.

#include <netinet/in.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/cidr.h"
#include "common/metrics.h"
#include "xdp/ingress_shared.h"
#include "xdp/xdp_options.h"

struct ig_ingress;  // the bpftool skeleton

namespace infergate::xdp {

// Counters summed over CPUs.
struct XdpCounters {
  // packets[action][reason], action = XDP_ABORTED..XDP_REDIRECT, reason = enum ig_reason.
  std::array<std::array<uint64_t, IG_R_MAX>, IG_NUM_ACTIONS> packets{};
  std::array<std::array<uint64_t, IG_R_MAX>, IG_NUM_ACTIONS> bytes{};
  // requests[class][tag verdict]: request starts seen, per class and admit/limit/overload.
  std::array<std::array<uint64_t, IG_TV_MAX>, IG_NUM_CLASSES> requests{};

  uint64_t total(int action) const;
  // Packets with this reason, over every action (e.g. IG_R_SYN_COOKIE_SENT).
  uint64_t byReason(int reason) const;
};

// The SYN cookie counters (afxdp mode), read from XdpCounters.
struct CookieCounters {
  uint64_t syn_cookies_sent = 0;   // SYNs answered with a cookie SYN-ACK (IG_R_SYN_COOKIE_SENT)
  uint64_t acks_deferred = 0;      // pure ACKs completing a cookie handshake, dropped
  uint64_t cookies_valid = 0;      // first data segments with a valid cookie, to the stack
  uint64_t acks_no_match = 0;      // ACKs of untracked flows in cookie mode that were no cookie
  uint64_t rst_rate_limited = 0;   // RSTs the program did not send (over the RST budget)

  static CookieCounters from(const XdpCounters& c);
};

const char* reasonName(int reason);      // "bad_request_line", ...
const char* actionName(int action);      // "drop", "pass", "tx", "redirect", "aborted"
const char* tagVerdictName(int verdict); // "admit", "rate_limited", "overload"

// The priority tag of a connection (xdp-filter mode): what the program saw at the latest
// request start on it.
struct Tag {
  int cls = 1;
  int verdict = IG_TV_ADMIT;   // enum ig_tag_verdict
  uint32_t flags = 0;          // enum ig_tag_flags
  uint64_t rx_ns = 0;          // CLOCK_MONOTONIC
};

// A connection as the gateway's socket sees it: peer = the client, local = the gateway.
struct FlowTuple {
  int family = AF_INET;               // AF_INET or AF_INET6
  std::array<uint8_t, 16> peer_addr{}; // IPv4 in the first 4 bytes, network order
  std::array<uint8_t, 16> local_addr{};
  uint16_t peer_port = 0;             // host order
  uint16_t local_port = 0;

  static FlowTuple fromSockaddrs(const sockaddr* peer, const sockaddr* local);
};

class XdpFilter {
 public:
  // Loads the program with `opts`, fills its maps and attaches it to opts.interface (native,
  // or generic when asked). An infergate program already on the interface is replaced
  // atomically; another program is left alone and reported. Errors name the interface, the
  // mode and the missing capability or setting.
  static absl::StatusOr<std::unique_ptr<XdpFilter>> attach(const XdpOptions& opts);
  // The same, running `before_attach` between loading and attaching (afxdp: the AF_XDP
  // sockets go into the XSKMAP before the program redirects anything). Its error aborts.
  static absl::StatusOr<std::unique_ptr<XdpFilter>> attach(
      const XdpOptions& opts, const std::function<absl::Status(XdpFilter&)>& before_attach);

  // Loads without attaching (tests, benchmarks): the program fd can be run with
  // BPF_PROG_TEST_RUN.
  static absl::StatusOr<std::unique_ptr<XdpFilter>> load(const XdpOptions& opts);

  ~XdpFilter();
  XdpFilter(const XdpFilter&) = delete;
  XdpFilter& operator=(const XdpFilter&) = delete;

  // Detaches (if still ours) and unpins. Idempotent. With XdpOptions::keep_attached the
  // program stays attached and the maps pinned, for the next process (logged).
  void detach();

  // Configuration reload: the rules of `next` (everything in struct ig_config but its
  // load-time part, and the CIDR map) take effect in place, without a new program or a detach:
  // new and changed CIDR prefixes first, then the rules go into the ig_rules entry not in
  // force and ig_state.rules_slot switches to it (one 4-byte store: each packet is judged by
  // the old rules or the new ones), then the prefixes that went away are deleted. Map writes
  // on descriptors this filter holds: no capability needed, so it works after the privilege
  // drop. The load-time options (interface, attach mode, pins, map sizes, service ports, RST
  // transmit, the afxdp knobs) must be unchanged (FailedPrecondition naming the key). From one
  // control thread (reloads are serialized); concurrent with readCounters/setOverloadLevel/
  // lookupFlowTag.
  absl::Status reconfigure(const XdpOptions& next);
  // Two switches at least this far apart: the entry a switch takes out of force is rewritten
  // by the next one, after every program run that read it has finished.
  static constexpr uint64_t kRulesGraceNs = 1'000'000;
  // The ig_rules entry in force, and its contents (tests, `infergate` logs).
  uint32_t rulesSlot() const;
  absl::StatusOr<ig_config> rulesInForce() const;

  // keep_attached: attach() found the program a previous infergate left on the interface
  // with the same code and load-time options, over the pinned maps it reused, and kept it (no
  // re-attach); this configuration's rules were written into its rule maps, as a reload does.
  bool adopted() const { return adopted_; }
  // The id of the program attached on the interface by (or for) this filter; 0 when none.
  uint32_t attachedProgramId() const;

  XdpCounters readCounters() const;

  // Adds a collector that renders infergate_xdp_packets_total{action,reason},
  // infergate_xdp_bytes_total{action,reason} and infergate_xdp_requests_total{class,verdict}
  // at scrape time. The registry must not outlive this filter.
  void registerMetrics(common::MetricsRegistry& registry);

  // 0 admits every class; n admits classes < kNumClasses - n (SYNs of the others are
  // dropped, their request starts tagged "overload").
  absl::Status setOverloadLevel(int level);

  std::optional<Tag> lookupFlowTag(const FlowTuple& flow) const;

  // afxdp, SYN cookies (docs/XDP.md, "SYN cookies"). setCookieKeys() writes the keys the TCP
  // stack uses (the same struct ig_cookie_keys, dataplane/tcp/syncookie.h) into the program's
  // ig_cookie map; call it before attach (inside before_attach) and after every rotation. A key
  // left all zero never validates and never signs (the program treats it as unset).
  absl::Status setCookieKeys(const ig_cookie_keys& keys);
  // Cookie mode on: the program answers service SYNs with cookie SYN-ACKs itself. Off: SYNs go
  // to the stack again; ACKs of cookie handshakes already sent are still validated for
  // `drain_ns` (their first data segments still get IG_TF_COOKIE). FailedPrecondition when the
  // program was loaded without cookies (not afxdp, or XdpOptions::syn_cookies = kOff).
  static constexpr uint64_t kCookieDrainNs = 120'000'000'000;  // 2 minutes
  absl::Status setCookieMode(bool on, uint64_t drain_ns = kCookieDrainNs);
  bool cookieMode() const;
  // The secret of the flow hash (tests; never log it).
  const ig_sipkey& flowSecret() const { return flow_secret_; }

  // afxdp: the XSKMAP (ig_xsks, key = rx queue index, at most kMaxXskQueues entries) the
  // program redirects to when XdpOptions::redirect_xsk is on. The AF_XDP device inserts its
  // socket (dataplane/xsk, XskOptions::xskmap_fd); removeXsk() takes a queue out again, after
  // which that queue's service segments are passed to the kernel.
  static constexpr uint32_t kMaxXskQueues = 64;
  int xskMapFd() const;
  absl::Status removeXsk(uint32_t queue);

  // The tag placement loaded (enum ig_tag_mode: IG_TAG_NONE, _META, _PREFIX; XdpOptions::tags
  // resolved against this kernel) and why it was chosen ("bpf_xdp_adjust_meta accepted", the
  // verifier's refusal, ...). The AF_XDP device must read tags the same way (XskOptions::tags).
  int tagMode() const { return tag_mode_; }
  const std::string& tagReason() const { return tag_reason_; }

  int programFd() const;
  int passProgramFd() const;  // the bare XDP_PASS baseline in the same object (benchmarks)
  int ifindex() const { return ifindex_; }
  const XdpOptions& options() const { return opts_; }
  ig_ingress* skeleton() { return skel_; }  // tests: direct map access

 private:
  explicit XdpFilter(XdpOptions opts) : opts_(std::move(opts)) {}
  absl::Status loadProgram();
  // Opens and loads a skeleton for `o` over maps_ when they are set (every map but the CIDR
  // trie and the read-only data), writes the runtime state and fills its CIDR map.
  absl::StatusOr<ig_ingress*> loadSkeleton(const XdpOptions& o);
  absl::Status attachProgram();
  absl::Status pinMaps();
  // keep_attached: the pinned maps of a previous process (maps_) and the flow secret of the
  // infergate program attached to the interface, when there are both.
  void reusePinned();
  absl::Status writeRuntime();  // runtime_ -> ig_state; holds runtime_mu_
  // The rules of `o` into cidrs_fd_ / rules_fd_ and the switch (reconfigure()).
  absl::Status applyRules(const XdpOptions& o);

  // The maps every program of this filter shares, as descriptors of our own (dup'd from the
  // first skeleton, or the pins of a previous process): the runtime calls use these, so a
  // reconfigure can swap the skeleton under them.
  struct MapFds {
    int counters = -1, class_counters = -1, flows = -1, buckets = -1, state = -1, cookie = -1,
        xsks = -1, rst_tokens = -1;
  };
  MapFds maps_;
  bool have_secret_ = false;
  bool adopted_ = false;
  int attached_prog_fd_ = -1;  // the program on the interface (ours, or adopted); owned
  int cidrs_fd_ = -1;          // the CIDR map of the program in force (loaded or adopted); owned
  int rules_fd_ = -1;          // its ig_rules map; owned
  uint64_t last_switch_ns_ = 0;  // applyRules' last rules_slot switch; under runtime_mu_

  mutable std::mutex runtime_mu_;  // runtime_ (setOverloadLevel, setCookieMode, applyRules)
  ig_runtime runtime_{};
  ig_sipkey flow_secret_{};
  XdpOptions opts_;
  ig_ingress* skel_ = nullptr;
  int ifindex_ = 0;
  uint32_t attach_flags_ = 0;
  uint32_t flow_mask_ = 0;
  int tag_mode_ = IG_TAG_NONE;
  std::string tag_reason_;
  bool tx_redirect_ = false;  // the interface is a veth (RstTx::kAuto sends RSTs by redirect)
  bool attached_ = false;
  bool pinned_ = false;
};

// xdp-filter mode: the defence against a SYN flood is the kernel's own SYN cookies. Reads
// `path` (net.ipv4.tcp_syncookies of the calling process's network namespace) and returns a
// warning naming the sysctl when it is 0 (off) or unreadable; nullopt when cookies are on.
std::optional<std::string> kernelSynCookiesWarning(
    const std::string& path = "/proc/sys/net/ipv4/tcp_syncookies");

// Renders counters in Prometheus text format (what registerMetrics appends).
std::string renderPrometheus(const XdpCounters& c);

// Prints the counters of a running gateway from its pinned maps (`infergate stats`).
absl::Status printPinnedStats(const std::string& pin_path, std::FILE* out);

// Fills an ig_config (the rules and the load-time part) from options (exposed for host tests
// and benchmarks).
absl::Status buildConfig(const XdpOptions& opts, ig_config* out);
// The fields of `c` the program reads from its read-only data (marked "load time" in
// ingress_shared.h), the rest zero: what the program is loaded with.
ig_config loadTimePart(const ig_config& c);
// buildConfig's checks alone: OK when attach() would accept `opts` (start-up checks the
// options before it sets anything else up). The message names the config key at fault.
absl::Status checkOptions(const XdpOptions& opts);

// The ig_cidrs LPM trie entries for opts.cidr_rules and, when the priority header counts only
// from trusted sources, opts.trusted_sources: one entry per distinct prefix, with the class
// and exemption of the longest class rule covering it and trust when a trusted source
// covers it (so the longest match an address finds says everything both lists say about it).
struct CidrEntry {
  common::Cidr cidr;
  uint8_t cls = IG_CLASS_NONE;
  uint8_t exempt = 0;
  uint8_t trusted = 0;
};
inline constexpr size_t kMaxCidrEntries = 1024;  // ig_cidrs max_entries
absl::StatusOr<std::vector<CidrEntry>> cidrEntries(const XdpOptions& opts);

}  // namespace infergate::xdp
