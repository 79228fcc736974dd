/* SPDX-License-Identifier: Apache-2.0 */
/* The contract between the XDP ingress program (ingress.bpf.c) and its userspace readers
 * (xdp_filter.cc, the afxdp reactor, tests). Every struct that crosses the BPF boundary is
 * defined here once: fixed-width fields, explicit padding. The C++ side checks sizes and
 * offsets with static_asserts at the bottom of this file.
 *
 * Byte order: addresses and ports in map keys and in ig_flow_key are in network byte order,
 * exactly as they appear in the packet. Everything else is host order.
 */
#ifndef INFERGATE_XDP_INGRESS_SHARED_H
#define INFERGATE_XDP_INGRESS_SHARED_H

#include <linux/types.h>

#include "common/siphash.h"
#include "dataplane/tcp/syncookie.h"

#define IG_MAX_PORTS 8
#define IG_MAX_METHODS 8
#define IG_MAX_PREFIXES 16
#define IG_PREFIX_WORDS 4 /* a path prefix holds at most 32 bytes */
#define IG_PREFIX_MAX_LEN (IG_PREFIX_WORDS * 8)
#define IG_NUM_CLASSES 4  /* 0 = highest priority; = common::kPriorityClasses (checked below) */
#define IG_CLASS_NONE 0xff

/* ig_config.priority_header: whose x-infergate-priority header sets the class. */
#define IG_PRIO_HDR_OFF 0
#define IG_PRIO_HDR_TRUSTED 1 /* sources whose ig_cidrs entry has trusted = 1 */
#define IG_PRIO_HDR_ALL 2
#define IG_NUM_ACTIONS 5  /* XDP_ABORTED, XDP_DROP, XDP_PASS, XDP_TX, XDP_REDIRECT */
#define IG_TAG_MAGIC 0x49474d31u /* "IGM1" */

/* Why a packet got its verdict. Every verdict has exactly one reason. */
enum ig_reason {
	IG_R_NONE = 0,
	/* passed to the kernel untouched (not ours, or nothing provable in one frame) */
	IG_R_NOT_IP,          /* ARP, LLDP, QinQ, ... */
	IG_R_NOT_TCP,         /* ICMP, ICMPv6/ND, UDP, ... */
	IG_R_NOT_SERVICE,     /* TCP to a port that is not a service port */
	IG_R_IPV6_EXT,        /* IPv6 extension header: not parsed, left to the kernel */
	IG_R_IP_FRAGMENT,     /* IPv4 fragment: no complete TCP header to judge */
	IG_R_SEGMENT,         /* service segment that starts nothing (ACK, continuation, FIN) */
	IG_R_SYN,             /* connection request admitted */
	IG_R_REQUEST,         /* request start admitted (tag verdict says admit/limit/overload) */
	/* dropped (or answered with a RST when the segment started a request) */
	IG_R_TRUNCATED,       /* frame ends inside a header */
	IG_R_BAD_IP_HEADER,   /* version, IHL or length inconsistent */
	IG_R_BAD_TCP_HEADER,  /* data offset inconsistent */
	IG_R_BAD_TCP_FLAGS,   /* SYN+FIN, SYN+RST, FIN+RST, no ACK on a non-SYN, ... */
	IG_R_BAD_REQUEST_LINE,/* not METHOD SP target SP HTTP/1.x CRLF */
	IG_R_BAD_METHOD,      /* method token not configured */
	IG_R_BAD_PATH,        /* target not under a configured path prefix */
	IG_R_BAD_VERSION,     /* not HTTP/1.0 or HTTP/1.1 */
	IG_R_BAD_H2_PREFACE,  /* "PRI ..." that is not the exact HTTP/2 preface */
	IG_R_BAD_H2_FRAME,    /* frame header after the preface breaks RFC 9113 rules */
	IG_R_REJECTED_FLOW,   /* later segment of a flow already reset */
	IG_R_SYN_RATE_LIMITED,/* source over its connection rate */
	IG_R_SYN_OVERLOAD,    /* class not admitted at the current overload level */
	/* SYN cookies (afxdp mode, cookie mode on) and RST rate limit */
	IG_R_SYN_COOKIE_SENT,    /* SYN answered by the program with a cookie SYN-ACK (tx) */
	IG_R_COOKIE_ACK_DEFERRED,/* pure ACK completing a cookie handshake: dropped, the first
	                          * data segment carries the same proof (deferred accept) */
	IG_R_COOKIE_VALID,       /* data segment whose ack is a valid cookie: admitted to the
	                          * stack flagged IG_TF_COOKIE */
	IG_R_COOKIE_NO_MATCH,    /* segment without data of a flow the program does not track,
	                          * checked in cookie mode: not one of our cookies; passed (it
	                          * may belong to an established connection) */
	IG_R_RST_RATE_LIMITED,   /* a RST the program would send, over the RST rate: dropped */
	IG_R_NO_TAG_ROOM,        /* afxdp, tags in a prefix: no headroom for the tag in front of a
	                          * frame redirected to the socket (bpf_xdp_adjust_head refused):
	                          * dropped, never handed to the stack untagged */
	IG_R_MAX
};

/* Verdict carried in the tag for userspace: what to answer to a request start. */
enum ig_tag_verdict {
	IG_TV_ADMIT = 0,
	IG_TV_RATE_LIMITED = 1, /* answer 429 without doing any work */
	IG_TV_OVERLOAD = 2,     /* answer 503 without doing any work */
	IG_TV_MAX
};

enum ig_tag_flags {
	IG_TF_REQUEST_START = 1, /* this segment starts an HTTP request (or the h2 preface) */
	IG_TF_HTTP2 = 2,
	IG_TF_FIRST_SEGMENT = 4, /* the first data segment of the connection */
	IG_TF_REJECTED = 8,      /* afxdp: the program rejected this request start; the frame is
	                          * redirected to the socket (not answered with XDP_TX) so that
	                          * userspace's TCP stack resets and frees the connection itself */
	IG_TF_COOKIE = 16,       /* afxdp: the segment's ack - 1 is a valid SYN cookie for its
	                          * seq - 1 (dataplane/tcp/syncookie.h) and the program holds no
	                          * record of the SYN reaching the stack: create the connection
	                          * (after re-validating) straight into ESTABLISHED */
	IG_TF_PROVEN = 32,       /* the connection's handshake is proven (afxdp: its first data
	                          * segment acked one of our cookies); request starts on it are
	                          * charged to the source's bucket */
};

/* Where a frame redirected to an AF_XDP socket carries its struct ig_tag (ig_config.tag_mode,
 * load time; XdpFilter picks the best the kernel accepts, docs/HOSTS.md):
 *  - IG_TAG_META: in the XDP metadata area in front of the frame (bpf_xdp_adjust_meta); the
 *    frame's bytes are untouched. Some kernels refuse the helper, some drivers give no
 *    metadata room;
 *  - IG_TAG_PREFIX: as the frame's first 16 bytes (bpf_xdp_adjust_head), written only once the
 *    redirect is decided, so no prefixed frame ever reaches the kernel's stack; userspace
 *    strips it. A frame whose prefix cannot be written is dropped (IG_R_NO_TAG_ROOM). */
enum ig_tag_mode {
	IG_TAG_NONE = 0,
	IG_TAG_META = 1,
	IG_TAG_PREFIX = 2,
};

/* The priority tag. Written into XDP metadata or a prefix in front of the frame (AF_XDP,
 * enum ig_tag_mode) and into the flow map (for kernel sockets in xdp-filter mode). */
struct ig_tag {
	__u64 rx_ns;   /* bpf_ktime_get_ns() when the program saw the segment (CLOCK_MONOTONIC);
	                * 0 in the metadata of a segment that starts no request (the clock
	                * read is skipped there: nothing reads it) */
	__u8 cls;      /* 0..IG_NUM_CLASSES-1 */
	__u8 reason;   /* enum ig_reason */
	__u8 verdict;  /* enum ig_tag_verdict */
	__u8 flags;    /* enum ig_tag_flags */
	__u32 magic;   /* IG_TAG_MAGIC */
};

/* One connection, as the client sent it: s* = client, d* = gateway. IPv4 addresses occupy
 * word 0 of the arrays, the other words are zero. */
struct ig_flow_key {
	__u32 saddr[4];
	__u32 daddr[4];
	__u16 sport;
	__u16 dport;
	__u8 family; /* 4 or 6 */
	__u8 pad[3];
};

enum ig_flow_state {
	IG_FLOW_SYN_SEEN = 1, /* first_seq is the sequence number of the first data byte */
	IG_FLOW_TAGGED = 2,   /* tag holds the latest request start */
	IG_FLOW_REJECTED = 3, /* reset by us: first_seq is the rejected segment's seq, tag.rx_ns
	                       * the time; data in [first_seq, first_seq + IG_REJECT_WINDOW) is
	                       * dropped until reject_ttl_ns has passed */
};

/* Bytes after a rejected first segment whose retransmissions and followers are dropped. A later
 * incarnation of the 4-tuple (a fresh random ISN) almost never falls into it. */
#define IG_REJECT_WINDOW (1u << 20)

/* One slot of ig_flows, a direct-mapped array (not a hash map: nothing is allocated and no
 * bucket chain is walked per packet). A connection's slot is ig_flow_hash(secret, key) & flow_mask;
 * check = ig_flow_check(hash) | state tells whether the slot holds this connection (0: empty).
 * first_seq and check form one 8-byte word, read and written at once. Two connections that
 * share a slot overwrite each other: the later one wins, the earlier one loses its
 * first-segment rule, rejected state or tag (a tag only has to live from the request start
 * to userspace's lookup, microseconds later). The hash is keyed (a secret from getrandom), so
 * an attacker cannot choose flows that collide with a victim's.
 *
 * A SYN never rewrites a slot that holds the same flow (a spoofed SYN with a victim's 4-tuple
 * would otherwise move first_seq, and a spoofed "first" segment would get the victim's flow
 * rejected); a REJECTED slot stops counting after reject_ttl_ns. */
struct ig_flow_val {
	__u32 first_seq;
	__u32 check;
	struct ig_tag tag;
};

#if defined(__bpf__) || defined(__BPF__)
#define IG_SHARED_INLINE static __always_inline
#else
#define IG_SHARED_INLINE static inline
#endif

/* The flow hash, computed the same way by the program and by userspace (lookupFlowTag):
 * SipHash-1-3 keyed with a 128-bit secret from getrandom() (XdpFilter sets it at load time in
 * the program's read-only data), so nobody who lacks the key can choose colliding flows. */
IG_SHARED_INLINE __u64 ig_flow_hash(const struct ig_sipkey *secret, const struct ig_flow_key *k)
{
	__u64 w[5];
	__u64 tail = (__u64)k->sport | ((__u64)k->dport << 16) | ((__u64)k->family << 32);
	w[0] = (__u64)k->saddr[0] | ((__u64)k->daddr[0] << 32);
	if (k->family != 6) {
		w[1] = tail;
		return ig_siphash13(secret, w, 2);
	}
	w[1] = (__u64)k->saddr[1] | ((__u64)k->daddr[1] << 32);
	w[2] = (__u64)k->saddr[2] | ((__u64)k->daddr[2] << 32);
	w[3] = (__u64)k->saddr[3] | ((__u64)k->daddr[3] << 32);
	w[4] = tail;
	return ig_siphash13(secret, w, 5);
}

/* The slot's check for hash h, without the state bits (never 0). */
IG_SHARED_INLINE __u32 ig_flow_check(__u64 h)
{
	return ((__u32)(h >> 32) | 4u) & ~3u;
}

/* Source CIDR rules (LPM trie). IPv4 is stored as an IPv4-mapped IPv6 address
 * (::ffff:a.b.c.d, prefixlen + 96). */
struct ig_cidr_key {
	__u32 prefixlen;
	__u8 addr[16];
};

struct ig_cidr_val {
	__u8 cls;    /* IG_CLASS_NONE: no class from this rule */
	__u8 exempt; /* 1: never rate-limited */
	__u8 trusted; /* 1: a trusted source: its x-infergate-priority header counts
	               * (priority_header == IG_PRIO_HDR_TRUSTED) */
	__u8 pad;
};

/* Per-source token buckets (LRU hash keyed by the 16-byte address, IPv4 mapped). Tokens are
 * kept in units of 1e-9 token, so that refill is elapsed_ns * rate_per_sec. */
struct ig_bucket {
	__u64 syn_tokens;
	__u64 syn_last_ns;
	__u64 req_tokens;
	__u64 req_last_ns;
};

/* Cookie mode (struct ig_runtime.cookie_mode). */
enum ig_cookie_mode {
	IG_COOKIE_OFF = 0, /* SYNs go to the stack */
	IG_COOKIE_ON = 1,  /* afxdp: the program answers service SYNs with cookie SYN-ACKs */
};

/* What changes at run time (the single entry of ig_state), written by XdpFilter. */
struct ig_runtime {
	__u32 overload_level; /* 0 = admit every class; n = admit classes < IG_NUM_CLASSES - n */
	__u32 cookie_mode;    /* enum ig_cookie_mode */
	__u64 cookie_check_until_ns; /* with cookie_mode off: keep validating cookie ACKs until
	                              * this CLOCK_MONOTONIC time (handshakes still in flight) */
	__u32 rules_slot;     /* the entry of ig_rules in force (0 or 1): a reload writes the other
	                       * entry, then flips this word (one aligned 4-byte store), so a packet
	                       * reads either the old rules or the new ones, never a mix */
	__u32 pad;
};

/* A global RST budget, one bucket per CPU (ig_rst_bucket); units as in ig_bucket. */
struct ig_rst_bucket {
	__u64 tokens;
	__u64 last_ns;
};

/* Per-CPU counters, indexed by action * IG_R_MAX + reason. */
struct ig_counter {
	__u64 packets;
	__u64 bytes;
};

/* A path prefix rule: the target starts with prefix when (word[i] & mask[i]) == word[i]
 * for the first IG_PREFIX_WORDS little-endian 8-byte words of the target. */
struct ig_prefix {
	__u64 word[IG_PREFIX_WORDS];
	__u64 mask[IG_PREFIX_WORDS];
	__u8 len;
	__u8 allow; /* 1: a request under this prefix is valid */
	__u8 cls;   /* IG_CLASS_NONE: no class from this rule */
	__u8 pad[5];
};

/* The program's configuration. Two copies of the same struct:
 *  - the rules, in the two-entry ig_rules map (the entry ig_runtime.rules_slot names): what a
 *    configuration reload changes in place, with no new program and no privilege (ports,
 *    methods, path prefixes and classes, rate limits, priority header, RSTs, flows, fragments,
 *    source prefixes). The classifier (classifier.h) reads these;
 *  - the load-time part, in the program's read-only data (ig_cfg): only the fields marked
 *    "load time" below, the rest zero (XdpFilter's loadTimePart()); the verifier prunes the
 *    code they switch off (the afxdp paths, SYN cookies). Changing them needs a new program.
 * Hosts (the DPDK mode's FilteringDevice, tests) use one struct with every field. */
struct ig_config {
	__u16 ports[IG_MAX_PORTS]; /* network byte order */
	__u64 method_key[IG_MAX_METHODS]; /* method token, little-endian packed, <= 8 bytes */
	struct ig_prefix prefix[IG_MAX_PREFIXES];
	__u32 nports;
	__u32 nmethods;
	__u32 nprefixes;
	__u32 h2_max_frame; /* SETTINGS_MAX_FRAME_SIZE the gateway advertises */
	__u64 syn_rate;     /* per second per source; 0 = off */
	__u64 syn_burst;
	__u64 req_rate;     /* request starts per second per source; 0 = off */
	__u64 req_burst;
	__u8 default_cls;
	__u8 send_rst;        /* answer rejected request starts with a RST (XDP_TX) */
	__u8 priority_header; /* look for x-infergate-priority in the first segment:
	                       * IG_PRIO_HDR_OFF, _TRUSTED (sources marked trusted in ig_cidrs), _ALL */
	__u8 tag_mode;        /* load time: enum ig_tag_mode (IG_TAG_PREFIX only with redirect_xsk) */
	__u8 track_flows;     /* flow map: first segment, rejected flows, tags */
	__u8 cidr_rules;      /* look up source CIDR rules */
	__u8 redirect_xsk;    /* load time, afxdp: redirect admitted service segments to the XSKMAP */
	__u8 tx_redirect;     /* load time: send RSTs with bpf_redirect(ingress ifindex) instead of XDP_TX:
	                       * a veth's XDP_TX does not wake a peer that runs no XDP program */
	__u32 flow_mask;      /* load time: ig_flows has flow_mask + 1 slots (a power of two) */
	__u8 reject_mid_stream; /* 0: a malformed request start that is not the connection's first
	                         * data segment is passed as a continuation (it may be body bytes
	                         * of a keep-alive request; userspace validates) instead of reset */
	__u8 syn_cookies;     /* load time, afxdp: the cookie code is there (cookie_mode says when it runs) */
	__u8 prove_handshake; /* load time, afxdp: charge request starts only to flows whose first data
	                       * segment acked one of our cookies (the stack's ISNs are cookies) */
	__u8 frag_policy;     /* enum ig_frag_policy */
	__u64 rst_rate;       /* RSTs per second per CPU; 0 = unlimited */
	__u64 rst_burst;
	__u64 reject_ttl_ns;  /* how long a REJECTED flow slot drops data */
	__u32 src_mask4;      /* per-source buckets key IPv4 sources by this prefix (network order) */
	__u32 src_mask6[4];   /* ... and IPv6 sources by this one (network order, default /64) */
	__u16 synack_mss;     /* load time: MSS in our cookie SYN-ACKs over IPv4 (IPv6: 20 less) */
	__u8 synack_wscale;   /* load time: our window scale in cookie SYN-ACKs (the stack's rcv_wscale) */
	__u8 cidr_classes;    /* some ig_cidrs entry may carry a class or an exemption (xdp.cidr_rules
	                       * set); 0: the entries only say who is trusted, so SYNs are not looked
	                       * up and a request start only when a priority header could count */
	__u8 pad2[4];
};

enum ig_frag_policy {
	IG_FRAG_DROP = 0,     /* drop IPv4 first fragments and IPv6 packets with extension headers
	                       * that carry TCP to a service port, and IPv4 TCP fragments at offset
	                       * 8 (RFC 1858); pass later fragments (no ports: the kernel cannot
	                       * reassemble them without the first) */
	IG_FRAG_DROP_ALL = 1, /* also drop every later TCP fragment */
	IG_FRAG_PASS = 2,     /* pass them all to the kernel (networks that fragment TCP) */
};

#if defined(__cplusplus) && !defined(__bpf__)
#include <cstddef>

#include "common/priority.h"
static_assert(IG_NUM_CLASSES == infergate::common::kPriorityClasses,
              "the program's class count is common/priority.h's");
static_assert(sizeof(struct ig_tag) == 16, "ig_tag layout");
static_assert(offsetof(struct ig_tag, cls) == 8 && offsetof(struct ig_tag, magic) == 12,
              "ig_tag layout");
static_assert(sizeof(struct ig_flow_key) == 40, "ig_flow_key layout");
static_assert(offsetof(struct ig_flow_key, sport) == 32 && offsetof(struct ig_flow_key, family) == 36,
              "ig_flow_key layout");
static_assert(sizeof(struct ig_flow_val) == 24 && offsetof(struct ig_flow_val, check) == 4 &&
              offsetof(struct ig_flow_val, tag) == 8,
              "ig_flow_val layout");
static_assert(sizeof(struct ig_cidr_key) == 20, "ig_cidr_key layout");
static_assert(sizeof(struct ig_cidr_val) == 4, "ig_cidr_val layout");
static_assert(sizeof(struct ig_bucket) == 32, "ig_bucket layout");
static_assert(sizeof(struct ig_counter) == 16, "ig_counter layout");
static_assert(sizeof(struct ig_prefix) == 72, "ig_prefix layout");
static_assert(offsetof(struct ig_config, method_key) == 16, "ig_config layout");
static_assert(offsetof(struct ig_config, prefix) == 80, "ig_config layout");
static_assert(offsetof(struct ig_config, nports) == 80 + 72 * IG_MAX_PREFIXES, "ig_config layout");
static_assert(offsetof(struct ig_config, rst_rate) == 80 + 72 * IG_MAX_PREFIXES + 64,
              "ig_config layout");
static_assert(sizeof(struct ig_config) == 80 + 72 * IG_MAX_PREFIXES + 64 + 56, "ig_config layout");
static_assert(sizeof(struct ig_runtime) == 24 && offsetof(struct ig_runtime, cookie_mode) == 4 &&
              offsetof(struct ig_runtime, cookie_check_until_ns) == 8 &&
              offsetof(struct ig_runtime, rules_slot) == 16,
              "ig_runtime layout");
static_assert(sizeof(struct ig_rst_bucket) == 16, "ig_rst_bucket layout");
static_assert(sizeof(struct ig_cookie_keys) == 40, "ig_cookie_keys layout");
#endif

#endif /* INFERGATE_XDP_INGRESS_SHARED_H */
