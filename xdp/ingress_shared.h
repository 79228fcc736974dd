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

#define IG_MAX_PORTS 8
#define IG_MAX_METHODS 8
#define IG_MAX_PREFIXES 16
#define IG_PREFIX_WORDS 4 /* a path prefix holds at most 32 bytes */
#define IG_PREFIX_MAX_LEN (IG_PREFIX_WORDS * 8)
#define IG_NUM_CLASSES 4  /* 0 = highest priority */
#define IG_CLASS_NONE 0xff
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
};

/* The priority tag. Written into XDP metadata (in front of the frame, for AF_XDP) and into
 * the flow map (for kernel sockets in xdp-filter mode). */
struct ig_tag {
	__u64 rx_ns;   /* bpf_ktime_get_ns() when the program saw the segment (CLOCK_MONOTONIC) */
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
	IG_FLOW_REJECTED = 3, /* reset by us: drop whatever data comes */
};

/* One slot of ig_flows, a direct-mapped array (not a hash map: nothing is allocated and no
 * bucket chain is walked per packet). A connection's slot is ig_flow_hash(key) & flow_mask;
 * check = ig_flow_check(hash) | state tells whether the slot holds this connection (0: empty).
 * first_seq and check form one 8-byte word, read and written at once. Two connections that
 * share a slot overwrite each other: the later one wins, the earlier one loses its
 * first-segment rule, rejected state or tag (a tag only has to live from the request start
 * to userspace's lookup, microseconds later). */
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

/* The flow hash, computed the same way by the program and by userspace (lookupFlowTag). */
IG_SHARED_INLINE __u64 ig_flow_hash(const struct ig_flow_key *k)
{
	__u64 a = ((__u64)k->saddr[0] << 32) | k->daddr[0];
	__u64 b = ((__u64)k->sport << 16) | k->dport | ((__u64)k->family << 32);
	__u64 h;
	if (k->family == 6) {
		a ^= (((__u64)k->saddr[1] << 32) | k->daddr[1]) * 0xff51afd7ed558ccdULL;
		a ^= (((__u64)k->saddr[2] << 32) | k->daddr[2]) * 0xc4ceb9fe1a85ec53ULL;
		a ^= (((__u64)k->saddr[3] << 32) | k->daddr[3]) * 0x94d049bb133111ebULL;
	}
	h = a * 0x9e3779b97f4a7c15ULL ^ b * 0xc2b2ae3d27d4eb4fULL;
	h ^= h >> 31;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 29;
	return h;
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
	__u8 pad[2];
};

/* Per-source token buckets (LRU hash keyed by the 16-byte address, IPv4 mapped). Tokens are
 * kept in units of 1e-9 token, so that refill is elapsed_ns * rate_per_sec. */
struct ig_bucket {
	__u64 syn_tokens;
	__u64 syn_last_ns;
	__u64 req_tokens;
	__u64 req_last_ns;
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

/* Load-time configuration (the program's read-only data: the verifier prunes what is off). */
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
	__u8 priority_header; /* look for x-infergate-priority in the first segment */
	__u8 write_meta;      /* write struct ig_tag into XDP metadata */
	__u8 track_flows;     /* flow map: first segment, rejected flows, tags */
	__u8 cidr_rules;      /* look up source CIDR rules */
	__u8 redirect_xsk;    /* afxdp: redirect admitted service segments to the XSKMAP */
	__u8 tx_redirect;     /* send RSTs with bpf_redirect(ingress ifindex) instead of XDP_TX:
	                       * a veth's XDP_TX does not wake a peer that runs no XDP program */
	__u32 flow_mask;      /* ig_flows has flow_mask + 1 slots (a power of two) */
	__u8 reject_mid_stream; /* 0: a malformed request start that is not the connection's first
	                         * data segment is passed as a continuation (it may be body bytes
	                         * of a keep-alive request; userspace validates) instead of reset */
	__u8 pad[3];
};

#if defined(__cplusplus) && !defined(__bpf__)
#include <cstddef>
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
static_assert(sizeof(struct ig_config) == 80 + 72 * IG_MAX_PREFIXES + 64, "ig_config layout");
#endif

#endif /* INFERGATE_XDP_INGRESS_SHARED_H */
