#pragma once
// dpdk mode's ingress filter: what the XDP ingress program (xdp/ingress.bpf.c) does in the
// other modes, done in userspace on each received burst, as a PacketDevice decorator in front
// of the TCP stack. There is no kernel and no XDP behind a DPDK port, so the same rules run
// here: the host build of xdp/classifier.h (the very functions the program runs) plus the
// state the program keeps in maps, kept per reactor:
//   - flows: ig_flows' direct-mapped array (struct ig_flow_val, ig_flow_hash keyed with a
//     per-device secret): first data segment after a SYN, rejected flows, latest tags;
//     flow_mask + 1 slots of 24 bytes (ig_config.flow_mask; 65536 slots = 1.5 MiB);
//   - per-source token buckets: ig_buckets' LRU hash, here a keyed, 4-way set-associative
//     table of bucket_entries slots (48 bytes each), the least recently used way of a full
//     set evicted; no allocation after create();
//   - source CIDR rules: ig_cidrs' LPM trie, here the entries sorted longest prefix first
//     and scanned (at most 1024; looked up only where the program looks them up: SYNs when
//     cidr_classes, request starts when a class or the priority header can count);
//   - the overload level (ig_state), set from any thread with setOverloadLevel();
//   - the SYN cookie keys (ig_cookie), for prove_handshake, set with setCookieKeys().
// Every flow of a connection reaches the same reactor (RSS), so per-reactor flow state is
// exact. A source's connections can spread over reactors: its SYN and request buckets are
// per reactor, so with N reactors a source may get up to N times its rate (divide
// syn_rate / req_rate by the queue count to keep the global figure).
//
// Verdicts, as the program gives them in afxdp mode with a socket bound (the stack takes the
// place of the AF_XDP socket):
//   - service segments the program passes: to the stack with the tag packed into Frame::meta
//     exactly as XskDevice packs the program's metadata (dataplane/tcp/frame_tag.h), counted
//     (XDP_REDIRECT, reason);
//   - a rejected request start (the program's XDP_TX with a RST): to the stack, the original
//     frame tagged IG_TF_REJECTED, counted (XDP_REDIRECT, reason): the stack sends the RST
//     from its own sequence space and frees the connection (what afxdp mode does). With
//     send_rst off the classifier drops it instead;
//   - drops: released to the wrapped device at once (one rxRelease per burst), counted
//     (XDP_DROP, reason);
//   - what the program passes to the kernel: TCP to another port goes to the stack (meta 0,
//     counted (XDP_PASS, not_service)); ARP and ICMP/ICMPv6 are offered to the L2Responder
//     (answered: (XDP_TX, not_ip / not_tcp), otherwise (XDP_DROP, same reason)); IP fragments
//     and IPv6 extension headers the program passes are dropped ((XDP_DROP, reason)): there
//     is no kernel to reassemble them and the stack parses neither.
// SYN cookies answered by the program (afxdp's cookie mode) do not exist here: the stack
// answers every SYN (with its own cookies under pressure); ig_config.syn_cookies is ignored.
//
// Checksum offload passes through: the wrapped device's rx checksum bits in Frame::meta
// (packet_io.h, kMetaRx*ChecksumGood) are kept beside the tag, and txChecksumOffload() is the
// wrapped device's.
//
// Ownership: the wrapped device is referenced, not owned; it and the clock must outlive the
// filter. Frames keep the wrapped device's ownership rules (packet_io.h): rxRelease, txAlloc,
// txBurst and txFlush are forwarded unchanged.
// Threading: the reactor thread (PacketDevice rules, setRules), except setOverloadLevel(),
// prepareRules() and counters()/l2Counters(), which any thread may call (relaxed atomics,
// written only by the reactor thread: a scrape may see a burst half counted).
//
// Configuration reload (the XDP program's in-place rule reload, done here): prepareRules()
// validates and builds the new rules on the reloading thread; setRules() on the reactor thread
// (AfXdpReactor::post) puts them in force between two frames, so each frame is judged by the
// old rules or the new ones. Flows, buckets, counters, the overload level, the cookie keys and
// the L2 answers stay; the flow table's size (ig_config.flow_mask) cannot change.

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/cidr.h"
#include "common/clock.h"
#include "dataplane/ingress_filter/l2_responder.h"
#include "dataplane/packet_io.h"
#include "xdp/ingress_shared.h"

struct ig_parse;

namespace infergate::dataplane::ingress_filter {

// One ig_cidrs entry (= xdp::CidrEntry, which xdp::cidrEntries(XdpOptions) builds).
struct CidrRule {
  common::Cidr cidr;
  uint8_t cls = IG_CLASS_NONE;  // IG_CLASS_NONE: no class from this rule
  uint8_t exempt = 0;           // never rate-limited
  uint8_t trusted = 0;          // its x-infergate-priority header counts (IG_PRIO_HDR_TRUSTED)
};

struct FilterOptions {
  // The program's load-time configuration: xdp::buildConfig(XdpOptions) fills it (ig_xdp).
  // tag_mode, redirect_xsk, tx_redirect, rst_rate and syn_cookies do not apply here (the
  // tag always travels in Frame::meta; the stack sends the RSTs).
  ig_config config{};
  std::vector<CidrRule> cidrs;      // xdp::cidrEntries(XdpOptions); at most 1024
  uint32_t bucket_entries = 65536;  // XdpOptions::bucket_entries; rounded up to 2^n, >= 4
  ig_sipkey flow_secret{};          // all zero: a fresh key from getrandom (tests set one)
  uint32_t initial_overload_level = 0;
  // ARP / ICMP answers; disabled (no address) by default: everything not TCP is dropped.
  L2Options l2;
};

// The program's counters, per (action, reason) and per (class, tag verdict): the same shape
// and member names as xdp::XdpCounters (xdp/xdp_filter.h), so the app copies the three arrays
// and renders them with xdp::renderPrometheus (infergate_xdp_packets_total{verdict,reason},
// ..._bytes_total, infergate_xdp_requests_total{class,verdict}).
struct IngressCounters {
  std::array<std::array<uint64_t, IG_R_MAX>, IG_NUM_ACTIONS> packets{};
  std::array<std::array<uint64_t, IG_R_MAX>, IG_NUM_ACTIONS> bytes{};
  std::array<std::array<uint64_t, IG_TV_MAX>, IG_NUM_CLASSES> requests{};
  IngressCounters& operator+=(const IngressCounters& o);  // summing reactors
};

class FilteringDevice final : public PacketDevice {
 public:
  // Most frames judged per rxBurst(): a larger `max` is served in bursts of this size.
  static constexpr size_t kMaxBurst = 256;

  // Errors name the option at fault (flow_mask, bucket_entries, too many CIDR rules, an L2
  // address). Allocates every table here; nothing after.
  static absl::StatusOr<std::unique_ptr<FilteringDevice>> create(PacketDevice& inner,
                                                                 const FilterOptions& options,
                                                                 const common::Clock& clock);
  ~FilteringDevice() override;
  FilteringDevice(const FilteringDevice&) = delete;
  FilteringDevice& operator=(const FilteringDevice&) = delete;

  // The rules part of FilterOptions (its ig_config and CIDR rules), validated and prepared
  // (CIDR entries masked, longest prefix first). Immutable; shared by the reactors.
  struct Rules;
  // Any thread. The errors create() gives for the same config and CIDR rules.
  static absl::StatusOr<std::shared_ptr<const Rules>> prepareRules(
      const ig_config& config, const std::vector<CidrRule>& cidrs);
  // Reactor thread: `rules` are in force from the next frame judged. FAILED_PRECONDITION
  // (nothing changed) when their flow_mask is not this filter's (xdp.flow_entries).
  absl::Status setRules(std::shared_ptr<const Rules> rules);
  // setRules calls that took effect (tests, logs). Any thread.
  uint64_t rulesGeneration() const { return rules_generation_.load(std::memory_order_relaxed); }

  // Receives up to min(max, kMaxBurst) frames from the wrapped device, judges each, releases
  // the dropped ones and answers ARP / ICMP; returns the frames for the stack, in arrival
  // order, Frame::meta set. May return 0 while the wrapped device had frames (all dropped or
  // answered): a poll-mode caller just polls again.
  size_t rxBurst(Frame* frames, size_t max) override;
  void rxRelease(const Frame* frames, size_t n) override { inner_.rxRelease(frames, n); }
  uint32_t rxHoldBudget() const override { return inner_.rxHoldBudget(); }
  bool txAlloc(Frame* frame) override { return inner_.txAlloc(frame); }
  void txBurst(Frame* frames, size_t n) override { inner_.txBurst(frames, n); }
  void txFlush() override { inner_.txFlush(); }
  uint32_t mtu() const override { return inner_.mtu(); }
  bool txChecksumOffload() const override { return inner_.txChecksumOffload(); }

  // 0 admits every class; n admits classes < IG_NUM_CLASSES - n (SYNs of the others are
  // dropped, their request starts tagged "overload"). Any thread; seen from the next burst.
  void setOverloadLevel(uint32_t level) { overload_level_.store(level, std::memory_order_relaxed); }
  // The SYN cookie keys of the stack's jar (dataplane/tcp/syncookie.h), for prove_handshake:
  // a request start is charged to its source only when its flow's first data segment acked
  // one of our cookies. Reactor thread; call again after every rotation. Unset keys prove
  // nothing (as in the program).
  void setCookieKeys(const ig_cookie_keys& keys) { cookie_keys_ = keys; }

  IngressCounters counters() const;                             // any thread
  L2Counters l2Counters() const { return l2_.counters(); }      // any thread
  const ig_sipkey& flowSecret() const { return flow_secret_; }  // tests; never log it

 private:
  FilteringDevice(PacketDevice& inner, const FilterOptions& options,
                  std::shared_ptr<const Rules> rules, const common::Clock& clock);

  enum class Verdict { kStack, kDrop, kL2 };
  // Judges one frame: sets `meta` and `action` / `reason` for the counters.
  Verdict judge(const Frame& f, uint64_t now, uint32_t level, uint64_t* meta, uint8_t* action,
                uint8_t* reason);

  // Token bucket of a source (ig_buckets).
  struct BucketSlot {
    uint32_t key[4];
    uint32_t used;
    uint32_t pad;
    ig_bucket b;
  };
  static_assert(sizeof(BucketSlot) == 56);
  bool rateOk(const ig_parse& p, uint64_t now, bool syn);
  ig_bucket* bucketFor(const uint32_t key[4]);

  struct CidrSlot {
    uint64_t addr[2];  // network order bytes as loaded
    uint64_t mask[2];
    ig_cidr_val val;
  };
  // ig_cidr_lookup: leaves the outputs alone when no rule matches.
  void cidrLookup(const ig_parse& p, uint8_t* cls, uint8_t* exempt, uint8_t* trusted) const;

  ig_flow_val* flowSlot(const ig_parse& p, uint32_t* check);
  bool cookieValid(const ig_parse& p) const;

  void count(uint8_t action, uint8_t reason, uint64_t bytes) {
    auto& pk = packets_[action][reason];
    auto& by = bytes_[action][reason];
    pk.store(pk.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    by.store(by.load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
  }
  void countClass(uint8_t cls, uint8_t verdict) {
    auto& c = requests_[cls][verdict];
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  PacketDevice& inner_;
  const common::Clock& clock_;
  ig_config cfg_;                       // rules_->config, copied for the per-frame reads
  std::shared_ptr<const Rules> rules_;  // the CIDR entries read by cidrLookup
  std::atomic<uint64_t> rules_generation_{0};
  ig_sipkey flow_secret_{};
  ig_sipkey bucket_secret_{};
  ig_cookie_keys cookie_keys_{};
  std::atomic<uint32_t> overload_level_{0};
  std::vector<ig_flow_val> flows_;   // cfg_.flow_mask + 1 slots
  std::vector<BucketSlot> buckets_;  // sets of kBucketWays
  uint32_t bucket_set_mask_ = 0;
  L2Responder l2_;
  std::vector<Frame> drops_;  // kMaxBurst: released at the end of the burst
  std::array<std::array<std::atomic<uint64_t>, IG_R_MAX>, IG_NUM_ACTIONS> packets_{};
  std::array<std::array<std::atomic<uint64_t>, IG_R_MAX>, IG_NUM_ACTIONS> bytes_{};
  std::array<std::array<std::atomic<uint64_t>, IG_TV_MAX>, IG_NUM_CLASSES> requests_{};
};

}  // namespace infergate::dataplane::ingress_filter
