// The XDP ingress program's per-frame logic (xdp/ingress.bpf.c, ig_xdp_ingress) over
// userspace tables. The classifier calls are xdp/classifier.h's, unchanged; what the program
// does with maps around them (flows, buckets, CIDR rules, the overload level, cookies) is
// written again here, step for step in the program's order, with the differences of dpdk mode
// noted where they are (no cookie mode; the stack in place of the AF_XDP socket).

#include "dataplane/ingress_filter/ingress_filter.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/secret.h"
#include "dataplane/tcp/frame_tag.h"
#include "xdp/classifier.h"

namespace infergate::dataplane::ingress_filter {
namespace {

constexpr uint32_t kBucketWays = 4;
constexpr uint32_t kMaxSlots = 1u << 24;
constexpr size_t kMaxCidrs = 1024;  // ig_cidrs max_entries

static_assert(tcp::kTagRejected == IG_TF_REJECTED && tcp::kTagRequestStart == IG_TF_REQUEST_START,
              "frame_tag.h flags are the program's");
static_assert(tcp::kVerdictRateLimited == IG_TV_RATE_LIMITED &&
                  tcp::kVerdictOverload == IG_TV_OVERLOAD,
              "frame_tag.h verdicts are the program's");

// ig_take (ingress.bpf.c): refills and takes one token; tokens in units of 1e-9.
bool take(__u64* tokens, __u64* last, uint64_t now, uint64_t rate, uint64_t burst) {
  const uint64_t unit = 1000000000ULL;
  uint64_t cap = burst * unit, elapsed = now - *last, t = *tokens;
  if (*last == 0) {
    t = cap;  // a new source starts with a full bucket
  } else {
    if (elapsed > 100 * unit) elapsed = 100 * unit;
    t += elapsed * rate;
    if (t > cap) t = cap;
  }
  *last = now;
  if (t < unit) {
    *tokens = t;
    return false;
  }
  *tokens = t - unit;
  return true;
}

bool admitted(uint8_t cls, uint32_t level) {
  return static_cast<uint32_t>(cls) + level < IG_NUM_CLASSES;
}

// ig_src16: the source as 16 bytes, IPv4 mapped into ::ffff:0:0/96 (network order words).
void src16(const ig_parse& p, uint32_t a[4]) {
  if (p.key.family == 4) {
    a[0] = 0;
    a[1] = 0;
    a[2] = ig_bswap32(0x0000ffff);
    a[3] = p.key.saddr[0];
  } else {
    std::memcpy(a, p.key.saddr, 16);
  }
}

bool keySet(const ig_sipkey& k) { return (k.k0 | k.k1) != 0; }

uint32_t roundUpPow2(uint32_t v) {
  uint32_t s = 1;
  while (s < v) s <<= 1;
  return s;
}

}  // namespace

IngressCounters& IngressCounters::operator+=(const IngressCounters& o) {
  for (int a = 0; a < IG_NUM_ACTIONS; ++a)
    for (int r = 0; r < IG_R_MAX; ++r) {
      packets[a][r] += o.packets[a][r];
      bytes[a][r] += o.bytes[a][r];
    }
  for (int c = 0; c < IG_NUM_CLASSES; ++c)
    for (int v = 0; v < IG_TV_MAX; ++v) requests[c][v] += o.requests[c][v];
  return *this;
}

struct FilteringDevice::Rules {
  ig_config config{};
  std::vector<CidrSlot> cidrs;  // longest prefix first
};

absl::StatusOr<std::shared_ptr<const FilteringDevice::Rules>> FilteringDevice::prepareRules(
    const ig_config& c, const std::vector<CidrRule>& cidrs) {
  if (c.nports == 0 || c.nports > IG_MAX_PORTS || c.nmethods > IG_MAX_METHODS ||
      c.nprefixes > IG_MAX_PREFIXES)
    return absl::InvalidArgumentError(
        "dpdk ingress filter: the ig_config has no service port or too many ports, methods or "
        "prefixes (build it with xdp::buildConfig from the xdp: options)");
  if (c.flow_mask >= kMaxSlots || ((c.flow_mask + 1) & c.flow_mask) != 0)
    return absl::InvalidArgumentError("dpdk ingress filter: xdp.flow_entries gives flow_mask " +
                                      std::to_string(c.flow_mask) +
                                      " (expected 2^n - 1, below 2^24)");
  if (cidrs.size() > kMaxCidrs)
    return absl::InvalidArgumentError("dpdk ingress filter: " + std::to_string(cidrs.size()) +
                                      " CIDR entries (at most 1024)");
  for (const CidrRule& r : cidrs)
    if (r.cidr.prefix > 128)
      return absl::InvalidArgumentError("dpdk ingress filter: CIDR " + r.cidr.toString() +
                                        " has a prefix longer than 128 bits");
  auto rules = std::make_shared<Rules>();
  rules->config = c;
  rules->cidrs.reserve(cidrs.size());
  for (const CidrRule& r : cidrs) {
    CidrSlot s{};
    uint8_t mask[16] = {};
    for (uint32_t b = 0; b < r.cidr.prefix; ++b)
      mask[b / 8] |= static_cast<uint8_t>(0x80 >> (b % 8));
    uint8_t addr[16];
    for (int i = 0; i < 16; ++i) addr[i] = r.cidr.addr[i] & mask[i];
    std::memcpy(s.addr, addr, 16);
    std::memcpy(s.mask, mask, 16);
    s.val.cls = r.cls;
    s.val.exempt = r.exempt;
    s.val.trusted = r.trusted;
    // the prefix length rides in pad, for the sort (longest first = the LPM answer)
    s.val.pad = static_cast<uint8_t>(r.cidr.prefix > 127 ? 128 : r.cidr.prefix);
    rules->cidrs.push_back(s);
  }
  std::stable_sort(rules->cidrs.begin(), rules->cidrs.end(),
                   [](const CidrSlot& a, const CidrSlot& b) { return a.val.pad > b.val.pad; });
  return std::shared_ptr<const Rules>(std::move(rules));
}

absl::StatusOr<std::unique_ptr<FilteringDevice>> FilteringDevice::create(
    PacketDevice& inner, const FilterOptions& o, const common::Clock& clock) {
  absl::StatusOr<std::shared_ptr<const Rules>> rules = prepareRules(o.config, o.cidrs);
  if (!rules.ok()) return rules.status();
  if (o.bucket_entries < kBucketWays || o.bucket_entries > kMaxSlots)
    return absl::InvalidArgumentError("dpdk ingress filter: xdp.bucket_entries " +
                                      std::to_string(o.bucket_entries) + " (expected " +
                                      std::to_string(kBucketWays) + "..2^24)");
  if (absl::Status s = L2Responder::check(o.l2); !s.ok()) return s;
  if (o.initial_overload_level >= IG_NUM_CLASSES)
    return absl::InvalidArgumentError("dpdk ingress filter: overload level " +
                                      std::to_string(o.initial_overload_level) +
                                      " (expected 0..3)");
  return std::unique_ptr<FilteringDevice>(new FilteringDevice(inner, o, std::move(*rules), clock));
}

FilteringDevice::FilteringDevice(PacketDevice& inner, const FilterOptions& o,
                                 std::shared_ptr<const Rules> rules, const common::Clock& clock)
    : inner_(inner),
      clock_(clock),
      cfg_(rules->config),
      rules_(std::move(rules)),
      l2_(inner, o.l2) {
  flow_secret_ = keySet(o.flow_secret) ? o.flow_secret : common::randomSipKey();
  bucket_secret_ = common::randomSipKey();
  overload_level_.store(o.initial_overload_level, std::memory_order_relaxed);
  flows_.assign(static_cast<size_t>(cfg_.flow_mask) + 1, ig_flow_val{});
  const uint32_t slots = roundUpPow2(o.bucket_entries);
  buckets_.assign(slots, BucketSlot{});
  bucket_set_mask_ = slots / kBucketWays - 1;
  drops_.resize(kMaxBurst);
}

absl::Status FilteringDevice::setRules(std::shared_ptr<const Rules> rules) {
  if (rules == nullptr) return absl::InvalidArgumentError("dpdk ingress filter: no rules");
  if (rules->config.flow_mask != cfg_.flow_mask)
    return absl::FailedPreconditionError(
        "dpdk ingress filter: xdp.flow_entries cannot change without a restart (the flow table "
        "is sized at start-up)");
  cfg_ = rules->config;
  rules_ = std::move(rules);  // the previous rules are freed here if no other reactor holds them
  rules_generation_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

FilteringDevice::~FilteringDevice() = default;

IngressCounters FilteringDevice::counters() const {
  IngressCounters c;
  for (int a = 0; a < IG_NUM_ACTIONS; ++a)
    for (int r = 0; r < IG_R_MAX; ++r) {
      c.packets[a][r] = packets_[a][r].load(std::memory_order_relaxed);
      c.bytes[a][r] = bytes_[a][r].load(std::memory_order_relaxed);
    }
  for (int k = 0; k < IG_NUM_CLASSES; ++k)
    for (int v = 0; v < IG_TV_MAX; ++v)
      c.requests[k][v] = requests_[k][v].load(std::memory_order_relaxed);
  return c;
}

void FilteringDevice::cidrLookup(const ig_parse& p, uint8_t* cls, uint8_t* exempt,
                                 uint8_t* trusted) const {
  uint32_t a[4];
  src16(p, a);
  uint64_t w[2];
  std::memcpy(w, a, 16);
  for (const CidrSlot& s : rules_->cidrs) {
    if ((w[0] & s.mask[0]) == s.addr[0] && (w[1] & s.mask[1]) == s.addr[1]) {
      *cls = s.val.cls;
      *exempt = s.val.exempt;
      *trusted = s.val.trusted;
      return;
    }
  }
}

ig_bucket* FilteringDevice::bucketFor(const uint32_t key[4]) {
  __u64 w[2];
  std::memcpy(w, key, 16);
  const uint64_t h = ig_siphash13(&bucket_secret_, w, 2);
  BucketSlot* set = &buckets_[static_cast<size_t>(h & bucket_set_mask_) * kBucketWays];
  BucketSlot* victim = nullptr;
  uint64_t oldest = UINT64_MAX;
  for (uint32_t i = 0; i < kBucketWays; ++i) {
    BucketSlot& s = set[i];
    if (s.used && std::memcmp(s.key, key, 16) == 0) return &s.b;
    const uint64_t last = s.used ? std::max(s.b.syn_last_ns, s.b.req_last_ns) : 0;
    if (!s.used || last < oldest) {
      oldest = s.used ? last : 0;
      victim = &s;
      if (!s.used) break;
    }
  }
  // A new source (or the least recently used one of a full set evicted, as in the LRU map):
  // a fresh bucket, which ig_take fills on first use.
  std::memcpy(victim->key, key, 16);
  victim->used = 1;
  victim->b = ig_bucket{};
  return &victim->b;
}

// ig_rate_ok: 1 when the source may go on (a SYN, or a request start).
bool FilteringDevice::rateOk(const ig_parse& p, uint64_t now, bool syn) {
  const uint64_t rate = syn ? cfg_.syn_rate : cfg_.req_rate;
  const uint64_t burst = syn ? cfg_.syn_burst : cfg_.req_burst;
  if (rate == 0) return true;
  uint32_t a[4];  // ig_src_key: the source cut to the configured prefix
  if (p.key.family == 4) {
    a[0] = 0;
    a[1] = 0;
    a[2] = ig_bswap32(0x0000ffff);
    a[3] = p.key.saddr[0] & cfg_.src_mask4;
  } else {
    for (int i = 0; i < 4; ++i) a[i] = p.key.saddr[i] & cfg_.src_mask6[i];
  }
  ig_bucket* b = bucketFor(a);
  if (syn) return take(&b->syn_tokens, &b->syn_last_ns, now, rate, burst);
  return take(&b->req_tokens, &b->req_last_ns, now, rate, burst);
}

ig_flow_val* FilteringDevice::flowSlot(const ig_parse& p, uint32_t* check) {
  const uint64_t h = ig_flow_hash(&flow_secret_, &p.key);
  *check = ig_flow_check(h);
  return &flows_[static_cast<uint32_t>(h) & cfg_.flow_mask];
}

// ig_cookie_valid_sub: the segment's ack - 1 is one of our cookies for its seq - 1.
bool FilteringDevice::cookieValid(const ig_parse& p) const {
  const uint32_t cookie = p.ack_seq - 1;
  if (!keySet(cookie_keys_.key[(cookie >> 8) & 1])) return false;
  ig_cookie_opts o;
  return ig_cookie_check(&cookie_keys_, p.key.saddr, p.key.daddr, p.key.sport, p.key.dport,
                         p.key.family == 6, p.seq - 1, cookie, &o) != 0;
}

FilteringDevice::Verdict FilteringDevice::judge(const Frame& fr, uint64_t now, uint32_t level,
                                                uint64_t* meta, uint8_t* action, uint8_t* reason) {
  const uint8_t* data = fr.data;
  const uint8_t* end = fr.data + fr.len;
  ig_parse p{};
  ig_tag tag{};
  bool have_tag = false;
  *meta = 0;

  if (ig_parse_l2l4(data, end, &cfg_, &p)) {
    ig_flow_val* fv = nullptr;
    uint32_t check = 0;
    int known_first = 0;
    bool proven = false;
    if (p.reason == IG_R_SYN) {
      uint8_t cls = IG_CLASS_NONE, exempt = 0, trusted = 0;
      if (cfg_.cidr_classes) cidrLookup(p, &cls, &exempt, &trusted);
      if (cls >= IG_NUM_CLASSES) cls = cfg_.default_cls;
      if (!admitted(cls, level)) {
        p.action = XDP_DROP;
        p.reason = IG_R_SYN_OVERLOAD;
      } else if (cfg_.syn_rate && !exempt && !rateOk(p, now, true)) {
        // (no cookie mode here: the stack answers SYNs, with its own cookies under pressure)
        p.action = XDP_DROP;
        p.reason = IG_R_SYN_RATE_LIMITED;
      } else if (cfg_.track_flows) {
        fv = flowSlot(p, &check);
        const uint32_t st = fv->check;
        // never rewrite a slot holding this flow, a REJECTED one only once its time passed
        if ((st & ~3u) != check ||
            (st == (check | IG_FLOW_REJECTED) && !(now - fv->tag.rx_ns < cfg_.reject_ttl_ns))) {
          fv->first_seq = p.seq + 1;
          fv->check = check | IG_FLOW_SYN_SEEN;
        }
      }
    } else if (p.pl_len) {
      // Segments without data (ACK, FIN, RST) start nothing: passed without a flow lookup.
      // (The program's cookie mode, which looks at them too, does not exist here.)
      bool rejected_flow = false;
      if (cfg_.track_flows) {
        fv = flowSlot(p, &check);
        const uint32_t st = fv->check;
        if ((st & ~3u) == check) {
          if (st == (check | IG_FLOW_REJECTED)) {
            if (p.seq - fv->first_seq < IG_REJECT_WINDOW &&
                now - fv->tag.rx_ns < cfg_.reject_ttl_ns) {
              p.action = XDP_DROP;
              p.reason = IG_R_REJECTED_FLOW;
              rejected_flow = true;
            }
          } else if (st == (check | IG_FLOW_SYN_SEEN) && fv->first_seq == p.seq) {
            known_first = 1;
          } else if (st == (check | IG_FLOW_TAGGED) && (fv->tag.flags & IG_TF_PROVEN)) {
            proven = true;
            p.tag_flags |= IG_TF_PROVEN;
          }
        }
      }
      if (!rejected_flow) {
        if (cfg_.prove_handshake && known_first && cfg_.req_rate && cookieValid(p)) {
          proven = true;  // the stack's ISNs are cookies: its first data segment proves it
          p.tag_flags |= IG_TF_PROVEN;
        }
        uint8_t src_cls = IG_CLASS_NONE, src_exempt = 0, src_trusted = 0;
        bool src_done = false;
        // = ig_classify_payload(), with the program's source-rule lookups between the stages
        if (ig_classify_start(data, end, &cfg_, &p, known_first)) {
          ig_scan_target(data, end, &cfg_, &p);
          if (p.reason == IG_R_REQUEST && cfg_.cidr_rules &&
              (cfg_.cidr_classes || (p.hdr_len && p.cls == IG_CLASS_NONE))) {
            cidrLookup(p, &src_cls, &src_exempt, &src_trusted);
            src_done = true;
          }
          if (p.reason == IG_R_REQUEST && p.hdr_len && p.cls == IG_CLASS_NONE &&
              src_cls >= IG_NUM_CLASSES &&
              (cfg_.priority_header == IG_PRIO_HDR_ALL ||
               (cfg_.priority_header == IG_PRIO_HDR_TRUSTED && src_trusted)))
            p.cls = ig_find_priority(data, end, p.hdr_off, p.hdr_len);
        }
        if (p.reason == IG_R_REQUEST) {
          uint8_t verdict = IG_TV_ADMIT;
          if (cfg_.cidr_classes && !src_done) cidrLookup(p, &src_cls, &src_exempt, &src_trusted);
          uint8_t cls = src_cls;
          tag.rx_ns = now;
          if (cls >= IG_NUM_CLASSES) cls = p.cls;
          if (cls >= IG_NUM_CLASSES) cls = cfg_.default_cls;
          if (cls >= IG_NUM_CLASSES) cls = IG_NUM_CLASSES - 1;
          if (!admitted(cls, level))
            verdict = IG_TV_OVERLOAD;
          else if (cfg_.req_rate && !src_exempt && (!cfg_.prove_handshake || proven) &&
                   !rateOk(p, now, false))
            verdict = IG_TV_RATE_LIMITED;
          tag.cls = cls;
          tag.reason = IG_R_REQUEST;
          tag.verdict = verdict;
          tag.flags = p.tag_flags;
          tag.magic = IG_TAG_MAGIC;
          have_tag = true;
          countClass(cls, verdict);
          if (fv) {
            fv->tag = tag;
            fv->check = check | IG_FLOW_TAGGED;
          }
        } else if (p.action != XDP_PASS && !known_first && !cfg_.reject_mid_stream &&
                   p.reason >= IG_R_BAD_REQUEST_LINE && p.reason <= IG_R_BAD_H2_FRAME) {
          // one frame cannot prove that mid-stream bytes start a request
          p.action = XDP_PASS;
          p.reason = IG_R_SEGMENT;
        } else if (p.action != XDP_PASS && fv) {
          // drops the retransmissions and followers of this segment, for reject_ttl_ns
          fv->tag.rx_ns = now;
          fv->first_seq = p.seq;
          fv->check = check | IG_FLOW_REJECTED;
        }
      }
    }
  }

  const uint64_t len = fr.len;
  *action = p.action;
  *reason = p.reason;
  if (p.action == XDP_TX) {
    // A rejected request start: to the stack, the original frame flagged IG_TF_REJECTED, as
    // afxdp mode redirects it to the socket; the stack sends the RST and frees the connection.
    *meta = tcp::makeMeta(IG_CLASS_NONE, IG_TV_ADMIT, p.tag_flags | IG_TF_REJECTED, p.reason);
    *action = XDP_REDIRECT;
    count(XDP_REDIRECT, p.reason, len);
    return Verdict::kStack;
  }
  if (p.action != XDP_PASS) {
    count(p.action, p.reason, len);
    return Verdict::kDrop;
  }
  if (!p.service) {
    switch (p.reason) {
      case IG_R_NOT_SERVICE:  // TCP to another port: the stack answers it as a host would
        count(XDP_PASS, p.reason, len);
        return Verdict::kStack;
      case IG_R_NOT_IP:
      case IG_R_NOT_TCP:
        return Verdict::kL2;  // the caller counts (answered or dropped)
      default:
        // IP fragments and IPv6 extension headers the program leaves to the kernel: there is
        // none here to reassemble them, and the stack parses neither.
        *action = XDP_DROP;
        count(XDP_DROP, p.reason, len);
        return Verdict::kDrop;
    }
  }
  if (!have_tag) {
    tag.cls = IG_CLASS_NONE;
    tag.reason = p.reason;
    tag.verdict = IG_TV_ADMIT;
    tag.flags = p.tag_flags;
  }
  *meta = tcp::makeMeta(tag.cls, tag.verdict, tag.flags, tag.reason);
  *action = XDP_REDIRECT;
  count(XDP_REDIRECT, p.reason, len);
  return Verdict::kStack;
}

size_t FilteringDevice::rxBurst(Frame* frames, size_t max) {
  if (max > kMaxBurst) max = kMaxBurst;
  const size_t n = inner_.rxBurst(frames, max);
  if (n == 0) return 0;
  const uint64_t now = clock_.nowNs();  // one clock read per burst
  const uint32_t level = overload_level_.load(std::memory_order_relaxed);
  size_t out = 0, nd = 0;
  for (size_t i = 0; i < n; ++i) {
    Frame f = frames[i];
    uint64_t meta = 0;
    uint8_t action = 0, reason = 0;
    switch (judge(f, now, level, &meta, &action, &reason)) {
      case Verdict::kStack:
        f.meta = meta | (f.meta & kMetaRxChecksumMask);  // the NIC's word, never the tag's
        frames[out++] = f;
        break;
      case Verdict::kDrop:
        drops_[nd++] = f;
        break;
      case Verdict::kL2: {
        const bool answered = l2_.handle(f.data, f.len) == L2Responder::Result::kAnswered;
        count(answered ? XDP_TX : XDP_DROP, reason, f.len);
        drops_[nd++] = f;  // the answer is a frame of its own
        break;
      }
    }
  }
  if (nd) inner_.rxRelease(drops_.data(), nd);
  l2_.flush();
  return out;
}

}  // namespace infergate::dataplane::ingress_filter
