/* SPDX-License-Identifier: Apache-2.0 */
/* The ingress classifier: pure functions over one frame (data, data_end), compiled both into
 * the XDP program (ingress.bpf.c) and into host C++ (unit tests, benchmarks, the DPDK mode).
 * It holds no state: everything that needs memory across packets (flows, token buckets,
 * CIDR classes, the overload level) is the BPF program's business, around these functions.
 *
 * XDP sees one frame, not a stream: this code only rejects what one segment proves bad.
 *
 * Usage:
 *   struct ig_parse p;
 *   if (ig_parse_l2l4(data, end, cfg, &p))           // a service TCP segment with more to look at
 *     if (!(p.tcp_flags & IG_TCP_SYN) && p.pl_len)
 *       ig_classify_payload(data, end, cfg, &p, known_first);
 *   // p.action (XDP_*), p.reason (enum ig_reason), p.cls, p.tag_flags
 *   if (p.action == XDP_TX) new_len = ig_build_rst(data, end, &p);  // then shrink the frame
 */
#ifndef INFERGATE_XDP_CLASSIFIER_H
#define INFERGATE_XDP_CLASSIFIER_H

#include <linux/bpf.h> /* enum xdp_action */

#include "common/checksum.h"
#include "ingress_shared.h"

#if defined(__bpf__) || defined(__BPF__)
#include <bpf/bpf_helpers.h>
#define IG_INLINE static __always_inline
/* the rules: an ig_rules map entry (ingress.bpf.c), read per packet */
#define IG_CFG const struct ig_config
#define IG_UNROLL _Pragma("unroll")
/* hides what clang knows about v, so a mask meant for the verifier is not optimised away */
#define IG_BARRIER_VAR(v) asm volatile("" : "+r"(v))
#else
#include <string.h>
#define IG_INLINE static inline __attribute__((always_inline))
#define IG_CFG const struct ig_config
#define IG_UNROLL
#define IG_BARRIER_VAR(v) ((void)0)
#endif

#define IG_ETH_P_IP 0x0800
#define IG_ETH_P_IPV6 0x86DD
#define IG_ETH_P_8021Q 0x8100
#define IG_ETH_P_8021AD 0x88A8
#define IG_TCP_FIN 0x01
#define IG_TCP_SYN 0x02
#define IG_TCP_RST 0x04
#define IG_TCP_PSH 0x08
#define IG_TCP_ACK 0x10

#define IG_MAX_TARGET_WORDS 128 /* a request target longer than 1 KiB is not judged */
#define IG_MAX_HDR_STEPS 96     /* words or lines looked at for x-infergate-priority */
#define IG_MAX_H2_FRAMES 4      /* frame headers checked after the HTTP/2 preface */

/* What the classifier found. Offsets are from the start of the frame. */
struct ig_parse {
	struct ig_flow_key key;
	__u32 seq;
	__u32 ack_seq;
	__u16 l3_off;
	__u16 l4_off;
	__u16 pl_off;
	__u16 pl_len;   /* TCP payload length according to the IP header */
	__u16 vlan_tci; /* network order */
	__u16 vlan_proto; /* network order */
	__u8 vlan;
	__u8 tcp_flags;
	__u8 action;    /* enum xdp_action */
	__u8 reason;    /* enum ig_reason */
	__u8 cls;       /* class from a path rule or the priority header; IG_CLASS_NONE if none */
	__u8 tag_flags; /* enum ig_tag_flags */
	__u8 service;   /* 1 once the frame is known to be TCP to a service port */
	__u8 pad;
	/* stage hand-over (see ig_classify_payload) */
	__u16 t_off;    /* request target: offset and bytes left in the segment from there */
	__u16 t_len;
	__u16 hdr_off;  /* header block after the request line, and its length in the segment */
	__u16 hdr_len;
};

IG_INLINE __u16 ig_bswap16(__u16 v) { return (__u16)((v << 8) | (v >> 8)); }
IG_INLINE __u32 ig_bswap32(__u32 v) { return __builtin_bswap32(v); }

/* ig_loadN / ig_storeN: N-bit packet words in memory order, at any alignment: a plain access
 * in BPF (the verifier checks the bounds), memcpy on the host. */
#if defined(__bpf__) || defined(__BPF__)
#define IG_LOAD_STORE(bits)                                                             \
	IG_INLINE __u##bits ig_load##bits(const __u8 *q) { return *(const __u##bits *)q; } \
	IG_INLINE void ig_store##bits(__u8 *q, __u##bits v) { *(__u##bits *)q = v; }
#else
#define IG_LOAD_STORE(bits)                                                             \
	IG_INLINE __u##bits ig_load##bits(const __u8 *q)                                \
	{                                                                               \
		__u##bits v;                                                            \
		memcpy(&v, q, sizeof(v));                                               \
		return v;                                                               \
	}                                                                               \
	IG_INLINE void ig_store##bits(__u8 *q, __u##bits v) { memcpy(q, &v, sizeof(v)); }
#endif
IG_LOAD_STORE(16)
IG_LOAD_STORE(32)
IG_LOAD_STORE(64)
#undef IG_LOAD_STORE

/* SWAR helpers (little-endian words). */
#define IG_ONES 0x0101010101010101ULL
#define IG_HIGHS 0x8080808080808080ULL
/* non-zero iff some byte of x is zero; the lowest flagged byte is exact */
IG_INLINE __u64 ig_zero_bytes(__u64 x) { return (x - IG_ONES) & ~x & IG_HIGHS; }
/* byte index (0..7) of the lowest flagged byte of a non-zero flag word */
/* the same without branches (one verifier path): m & -m isolates the lowest flag 0x80 << 8k,
 * the multiply moves byte (7 - k) of the constant, which holds k, into the top byte */
IG_INLINE __u32 ig_first_flag_bf(__u64 m)
{
	return (__u32)(((((m & (0 - m)) >> 7) * 0x0001020304050607ULL) >> 56) & 7);
}
IG_INLINE __u32 ig_first_flag(__u64 m)
{
	__u32 n = 0;
	if (!(m & 0xffffffffULL)) {
		n += 4;
		m >>= 32;
	}
	if (!(m & 0xffffULL)) {
		n += 2;
		m >>= 16;
	}
	if (!(m & 0xffULL))
		n += 1;
	return n;
}

IG_INLINE int ig_set(struct ig_parse *p, __u8 action, __u8 reason)
{
	p->action = action;
	p->reason = reason;
	return 0;
}

IG_INLINE int ig_is_service(IG_CFG *cfg, __u16 dport_net)
{
	int hit = 0;
	__u32 i;
IG_UNROLL
	for (i = 0; i < IG_MAX_PORTS; i++)
		if (i < cfg->nports && cfg->ports[i] == dport_net)
			hit = 1;
	return hit;
}

#define IG_MAX_EXT_HDRS 4 /* IPv6 extension headers walked to find the TCP port */

/* IPv6 with extension headers (nh != TCP at the fixed header): walks up to IG_MAX_EXT_HDRS of
 * hop-by-hop, routing, destination options, fragment and AH to the TCP ports. What targets a
 * service port is dropped unless cfg->frag_policy is IG_FRAG_PASS: neither the program nor
 * userspace's stack parses extension headers, so they would carry a request past the checks. */
IG_INLINE int ig_check_ipv6_ext(const __u8 *l3, const __u8 *end, IG_CFG *cfg, __u8 nh, __u32 plen,
				struct ig_parse *p)
{
	__u32 off = 40, n, len;
	const __u8 *h;

IG_UNROLL
	for (n = 0; n < IG_MAX_EXT_HDRS; n++) {
		if (nh == 6)
			break;
		if (off > 0x3ff || off + 8 > 40 + plen)
			return ig_set(p, XDP_PASS, IG_R_IPV6_EXT);
		h = l3 + (off & 0x3ff);
		if (h + 8 > end)
			return ig_set(p, XDP_PASS, IG_R_IPV6_EXT);
		if (nh == 0 || nh == 43 || nh == 60) {
			len = ((__u32)h[1] + 1) * 8;
		} else if (nh == 51) {
			len = ((__u32)h[1] + 2) * 4;
		} else if (nh == 44) {
			/* a later fragment carries no ports */
			if (ig_bswap16(ig_load16(h + 2)) & 0xfff8) {
				if (cfg->frag_policy == IG_FRAG_DROP_ALL)
					return ig_set(p, XDP_DROP, IG_R_IPV6_EXT);
				return ig_set(p, XDP_PASS, IG_R_IPV6_EXT);
			}
			len = 8;
		} else {
			return ig_set(p, XDP_PASS, IG_R_IPV6_EXT); /* ESP, no next header, ... */
		}
		nh = h[0];
		off += len;
	}
	if (nh != 6) /* a chain longer than we walk: the port is out of sight */
		return ig_set(p, XDP_DROP, IG_R_IPV6_EXT);
	if (off > 0x3ff || off + 4 > 40 + plen)
		return ig_set(p, XDP_DROP, IG_R_IPV6_EXT); /* no room for the ports */
	h = l3 + (off & 0x3ff);
	if (h + 4 > end)
		return ig_set(p, XDP_DROP, IG_R_IPV6_EXT);
	if (ig_is_service(cfg, ig_load16(h + 2)))
		return ig_set(p, XDP_DROP, IG_R_IPV6_EXT);
	return ig_set(p, XDP_PASS, IG_R_IPV6_EXT);
}

/* Parses Ethernet (one VLAN tag), IPv4 (options) or IPv6, and TCP. Returns 1 for a TCP segment
 * to a service port whose flags are sane (p->action = XDP_PASS, p->reason = IG_R_SEGMENT or
 * IG_R_SYN, p->service = 1); 0 when the verdict is final. */
IG_INLINE int ig_parse_l2l4(const __u8 *data, const __u8 *end, IG_CFG *cfg, struct ig_parse *p)
{
	const __u8 *l3, *l4;
	__u16 proto;
	__u32 l3_off = 14, l4_off, l4_len, doff, i;
	__u8 flags;

	p->cls = IG_CLASS_NONE;
	if (data + 14 > end)
		return ig_set(p, XDP_DROP, IG_R_TRUNCATED);
	proto = ig_load16(data + 12);
	l3 = data + 14;
	if (proto == ig_bswap16(IG_ETH_P_8021Q) || proto == ig_bswap16(IG_ETH_P_8021AD)) {
		if (data + 18 > end)
			return ig_set(p, XDP_DROP, IG_R_TRUNCATED);
		p->vlan = 1;
		p->vlan_proto = proto;
		p->vlan_tci = ig_load16(data + 14);
		proto = ig_load16(data + 16);
		l3 = data + 18;
		l3_off = 18;
	}
	p->l3_off = (__u16)l3_off;

	if (proto == ig_bswap16(IG_ETH_P_IP)) {
		__u32 ihl, tot;
		__u16 frag;
		if (l3 + 20 > end)
			return ig_set(p, XDP_DROP, IG_R_TRUNCATED);
		ihl = (__u32)(l3[0] & 0x0f) * 4;
		if ((l3[0] >> 4) != 4 || ihl < 20)
			return ig_set(p, XDP_DROP, IG_R_BAD_IP_HEADER);
		tot = ig_bswap16(ig_load16(l3 + 2));
		if (tot < ihl)
			return ig_set(p, XDP_DROP, IG_R_BAD_IP_HEADER);
		if (tot > 0xff00) /* keeps packet pointer arithmetic in the verifier's range */
			return ig_set(p, XDP_DROP, IG_R_TRUNCATED);
		if (l3 + ihl > end || l3 + tot > end)
			return ig_set(p, XDP_DROP, IG_R_TRUNCATED);
		if (l3[9] != 6)
			return ig_set(p, XDP_PASS, IG_R_NOT_TCP);
		frag = ig_bswap16(ig_load16(l3 + 6));
		if (frag & 0x3fff) {
			/* The first fragment holds the ports; later ones hold none. Neither the
			 * program nor userspace's stack reassembles, so a fragmented request would
			 * pass the checks: see enum ig_frag_policy. */
			if (cfg->frag_policy == IG_FRAG_PASS)
				return ig_set(p, XDP_PASS, IG_R_IP_FRAGMENT);
			if ((frag & 0x1fff) == 0) {
				if (tot < ihl + 4 || l3 + ihl + 4 > end)
					return ig_set(p, XDP_DROP, IG_R_IP_FRAGMENT); /* no ports: tiny */
				if (ig_is_service(cfg, ig_load16(l3 + ihl + 2)))
					return ig_set(p, XDP_DROP, IG_R_IP_FRAGMENT);
				return ig_set(p, XDP_PASS, IG_R_IP_FRAGMENT);
			}
			if ((frag & 0x1fff) == 1 || cfg->frag_policy == IG_FRAG_DROP_ALL)
				return ig_set(p, XDP_DROP, IG_R_IP_FRAGMENT); /* RFC 1858 overlap */
			return ig_set(p, XDP_PASS, IG_R_IP_FRAGMENT);
		}
		p->key.family = 4;
		p->key.saddr[0] = ig_load32(l3 + 12);
		p->key.daddr[0] = ig_load32(l3 + 16);
		l4 = l3 + ihl;
		l4_off = l3_off + ihl;
		l4_len = tot - ihl;
	} else if (proto == ig_bswap16(IG_ETH_P_IPV6)) {
		__u8 nh;
		__u32 plen;
		if (l3 + 40 > end)
			return ig_set(p, XDP_DROP, IG_R_TRUNCATED);
		if ((l3[0] >> 4) != 6)
			return ig_set(p, XDP_DROP, IG_R_BAD_IP_HEADER);
		plen = ig_bswap16(ig_load16(l3 + 4));
		if (plen > 0xff00 || l3 + 40 + plen > end)
			return ig_set(p, XDP_DROP, IG_R_TRUNCATED);
		nh = l3[6];
		if (nh != 6) {
			/* hop-by-hop, routing, fragment, ESP, AH, destination, mobility, HIP, shim6,
			 * experimental: not parsed here, the kernel decides */
			if (nh == 0 || nh == 43 || nh == 44 || nh == 50 || nh == 51 || nh == 60 ||
			    nh == 135 || nh == 139 || nh == 140 || nh == 253 || nh == 254) {
				if (cfg->frag_policy == IG_FRAG_PASS)
					return ig_set(p, XDP_PASS, IG_R_IPV6_EXT);
				return ig_check_ipv6_ext(l3, end, cfg, nh, plen, p);
			}
			return ig_set(p, XDP_PASS, IG_R_NOT_TCP);
		}
		p->key.family = 6;
IG_UNROLL
		for (i = 0; i < 4; i++) {
			p->key.saddr[i] = ig_load32(l3 + 8 + 4 * i);
			p->key.daddr[i] = ig_load32(l3 + 24 + 4 * i);
		}
		l4 = l3 + 40;
		l4_off = l3_off + 40;
		l4_len = plen;
	} else {
		return ig_set(p, XDP_PASS, IG_R_NOT_IP);
	}

	p->l4_off = (__u16)l4_off;
	if (l4 + 20 > end)
		return ig_set(p, XDP_DROP, IG_R_TRUNCATED);
	p->key.sport = ig_load16(l4);
	p->key.dport = ig_load16(l4 + 2);
	if (!ig_is_service(cfg, p->key.dport))
		return ig_set(p, XDP_PASS, IG_R_NOT_SERVICE);
	p->service = 1;
	if (l4_len < 20)
		return ig_set(p, XDP_DROP, IG_R_BAD_TCP_HEADER);
	doff = (__u32)(l4[12] >> 4) * 4;
	if (doff < 20 || doff > l4_len)
		return ig_set(p, XDP_DROP, IG_R_BAD_TCP_HEADER);
	flags = l4[13];
	p->tcp_flags = flags;
	p->seq = ig_bswap32(ig_load32(l4 + 4));
	p->ack_seq = ig_bswap32(ig_load32(l4 + 8));
	if ((flags & IG_TCP_SYN) && (flags & (IG_TCP_FIN | IG_TCP_RST)))
		return ig_set(p, XDP_DROP, IG_R_BAD_TCP_FLAGS);
	if ((flags & IG_TCP_FIN) && (flags & IG_TCP_RST))
		return ig_set(p, XDP_DROP, IG_R_BAD_TCP_FLAGS);
	if (!(flags & (IG_TCP_SYN | IG_TCP_RST | IG_TCP_ACK)))
		return ig_set(p, XDP_DROP, IG_R_BAD_TCP_FLAGS);
	p->pl_off = (__u16)(p->l4_off + doff);
	p->pl_len = (__u16)(l4_len - doff);
	p->action = XDP_PASS;
	p->reason = (flags & IG_TCP_SYN) && !(flags & IG_TCP_ACK) ? IG_R_SYN : IG_R_SEGMENT;
	return 1;
}

/* Marks a rejected request start: a RST answers it when configured. */
IG_INLINE void ig_reject(IG_CFG *cfg, struct ig_parse *p, __u8 reason)
{
	p->action = cfg->send_rst ? XDP_TX : XDP_DROP;
	p->reason = reason;
}

/* HTTP/2: the 24-byte connection preface, then up to IG_MAX_H2_FRAMES frame headers. */
IG_INLINE void ig_check_h2(const __u8 *pl, const __u8 *end, __u32 avail, IG_CFG *cfg,
			   struct ig_parse *p)
{
	const char preface[24] = {'P', 'R', 'I', ' ', '*', ' ', 'H', 'T', 'T', 'P', '/', '2',
				  '.', '0', '\r', '\n', '\r', '\n', 'S', 'M', '\r', '\n', '\r', '\n'};
	__u32 i, off;

	p->tag_flags |= IG_TF_HTTP2;
	if (avail >= 24 && pl + 24 <= end) {
		__u64 a = ig_load64(pl), b = ig_load64(pl + 8), c = ig_load64(pl + 16);
		if (a != 0x5448202a20495250ULL || b != 0x0a0d302e322f5054ULL ||
		    c != 0x0a0d0a0d4d530a0dULL)
			return ig_reject(cfg, p, IG_R_BAD_H2_PREFACE);
	} else {
		/* a segment shorter than the preface: what is there must match */
		for (i = 0; i < 24; i++) {
			const __u8 *q = pl + i;
			if (i >= avail || q + 1 > end)
				break;
			if (q[0] != (__u8)preface[i])
				return ig_reject(cfg, p, IG_R_BAD_H2_PREFACE);
		}
		p->reason = IG_R_REQUEST;
		p->tag_flags |= IG_TF_REQUEST_START;
		return;
	}

	off = 24;
	for (i = 0; i < IG_MAX_H2_FRAMES; i++) {
		const __u8 *f;
		__u32 len, sid;
		__u8 type, fl;
		if (off > 0x3fff)
			break;
		f = pl + off;
		if (off + 9 > avail || f + 9 > end)
			break;
		len = ((__u32)f[0] << 16) | ((__u32)f[1] << 8) | f[2];
		type = f[3];
		fl = f[4];
		sid = ig_bswap32(ig_load32(f + 5)) & 0x7fffffff;
		if (len > cfg->h2_max_frame)
			return ig_reject(cfg, p, IG_R_BAD_H2_FRAME);
		if (i == 0 && (type != 4 || (fl & 1)))
			return ig_reject(cfg, p, IG_R_BAD_H2_FRAME); /* preface must go on with SETTINGS */
		switch (type) {
		case 0: /* DATA */
		case 9: /* CONTINUATION */
			if (sid == 0)
				return ig_reject(cfg, p, IG_R_BAD_H2_FRAME);
			break;
		case 1: /* HEADERS: a client opens odd streams */
			if (sid == 0 || !(sid & 1))
				return ig_reject(cfg, p, IG_R_BAD_H2_FRAME);
			break;
		case 2: /* PRIORITY */
			if (sid == 0 || len != 5)
				return ig_reject(cfg, p, IG_R_BAD_H2_FRAME);
			break;
		case 3: /* RST_STREAM */
			if (sid == 0 || len != 4)
				return ig_reject(cfg, p, IG_R_BAD_H2_FRAME);
			break;
		case 4: /* SETTINGS */
			if (sid != 0 || len % 6 != 0 || ((fl & 1) && len != 0))
				return ig_reject(cfg, p, IG_R_BAD_H2_FRAME);
			break;
		case 5: /* PUSH_PROMISE: never from a client */
			return ig_reject(cfg, p, IG_R_BAD_H2_FRAME);
		case 6: /* PING */
			if (sid != 0 || len != 8)
				return ig_reject(cfg, p, IG_R_BAD_H2_FRAME);
			break;
		case 7: /* GOAWAY */
			if (sid != 0 || len < 8)
				return ig_reject(cfg, p, IG_R_BAD_H2_FRAME);
			break;
		case 8: /* WINDOW_UPDATE */
			if (len != 4)
				return ig_reject(cfg, p, IG_R_BAD_H2_FRAME);
			break;
		default: /* unknown types are ignored (RFC 9113 section 4.1) */
			break;
		}
		/* the next header would start past 0x3fff: the loop ends there anyway. Stopping
		 * here bounds off for the verifier (h2_max_frame is a run-time rule) */
		if (len > 0x3fff)
			break;
		off += 9 + len;
	}
	p->reason = IG_R_REQUEST;
	p->tag_flags |= IG_TF_REQUEST_START;
}

/* Looks for "x-infergate-priority: <digit>" in the header block of hdr_len bytes at hdr_off.
 * One verifier path per step: the position advances without branches. */
IG_INLINE __u8 ig_find_priority(const __u8 *data, const __u8 *end, __u32 hdr_off, __u32 avail32)
{
	const __u8 *h, *q;
	/* 64-bit counters: no zero-extension of 32-bit values in every step */
	__u64 i = 0, n, line = 1, avail = avail32;

	if (hdr_off > 0x7ff)
		return IG_CLASS_NONE;
	IG_BARRIER_VAR(hdr_off);
	h = data + (hdr_off & 0x7ff); /* the mask is for the verifier: hdr_off <= 0x7ff already */
	for (n = 0; n < IG_MAX_HDR_STEPS; n++) {
		__u64 w, m, none;
		if (i > 0x7ff)
			break;
		IG_BARRIER_VAR(i);
		q = h + (i & 0x7ff);
		if (line) {
			__u64 a, b, c;
			/* a header line: the name, a digit and CRLF need 24 bytes */
			if (i + 24 > avail || q + 24 > end)
				break;
			if (q[0] == '\r')
				break; /* end of the header block */
			a = ig_load64(q) | 0x2020202020202020ULL;
			b = ig_load64(q + 8) | 0x2020202020202020ULL;
			c = ig_load64(q + 16);
			/* "x-infergate-priority:" = "x-inferg" "ate-prio" "rity:", compared lower-cased
			 * ('-' and ':' already have bit 0x20 set) */
			if (a == 0x677265666e692d78ULL && b == 0x6f6972702d657461ULL &&
			    ((c | 0x2020202020ULL) & 0xffffffffffULL) == 0x3a79746972ULL) {
				__u8 v1 = (__u8)(c >> 40), v2 = (__u8)(c >> 48);
				if (v1 == ' ' || v1 == '\t')
					v1 = v2;
				if (v1 >= '0' && v1 < '0' + IG_NUM_CLASSES)
					return (__u8)(v1 - '0');
				return IG_CLASS_NONE;
			}
		}
		if (i + 8 > avail || q + 8 > end)
			break;
		w = ig_load64(q);
		m = ig_zero_bytes(w ^ 0x0a0a0a0a0a0a0a0aULL);
		none = ((m | (0 - m)) >> 63) ^ 1; /* 1 when the word holds no LF */
		/* next word, or the byte after the first LF */
		i += ig_first_flag_bf(m) + 1 + 7 * none;
		line = 1 - none;
	}
	return IG_CLASS_NONE;
}

/* The first 32 bytes of a request target as little-endian words, and which of their bytes the
 * segment holds. */
struct ig_target_words {
	__u64 w[IG_PREFIX_WORDS];
	__u64 have[IG_PREFIX_WORDS];
};

/* The path prefix rules over a target: the class of the first matching rule with one
 * (IG_CLASS_NONE: none), or -1 when allow-prefixes exist and none matches. Bytes the segment
 * does not hold match (the rest of the target is in a later segment). Without branches per
 * word: the rules are run-time values, one verifier path per prefix. The BPF program runs it as
 * a global subprogram (IG_MATCH_PREFIXES). */
IG_INLINE int ig_match_prefixes(IG_CFG *cfg, const struct ig_target_words *t)
{
	int allowed = 0, any_allow = 0, cls = IG_CLASS_NONE;
	__u32 n, i;
IG_UNROLL
	for (n = 0; n < IG_MAX_PREFIXES; n++) {
		__u64 diff = 0;
		int match;
		if (n >= cfg->nprefixes)
			break;
		/* words past the prefix's length have word = mask = 0 and match */
IG_UNROLL
		for (i = 0; i < IG_PREFIX_WORDS; i++)
			diff |= (t->w[i] & cfg->prefix[n].mask[i] & t->have[i]) ^
				(cfg->prefix[n].word[i] & t->have[i]);
		match = diff == 0;
		any_allow |= cfg->prefix[n].allow;
		allowed |= match & cfg->prefix[n].allow;
		if (match && cls == IG_CLASS_NONE)
			cls = cfg->prefix[n].cls;
	}
	if (any_allow && !allowed)
		return -1;
	return cls;
}
#ifndef IG_MATCH_PREFIXES
#define IG_MATCH_PREFIXES ig_match_prefixes
#endif

/* Stage 1: method, start of the target, path prefixes and classes; the HTTP/2 preface.
 * Returns 1 when ig_scan_target must judge the rest of the request line. */
IG_INLINE int ig_classify_start(const __u8 *data, const __u8 *end, IG_CFG *cfg,
				struct ig_parse *p, int known_first)
{
	const __u8 *pl, *t, *q;
	__u32 avail, mlen = 0, i, tavail;
	__u64 key = 0;
	int looks = 0;

	if (p->pl_off > 0x3ff)
		return 0; /* headers longer than any we build: leave it to the kernel */
	pl = data + p->pl_off;
	/* the IP length check proved pl + pl_len <= end; every access below is still checked
	 * against end for the verifier. Bytes past pl_len (Ethernet padding) are ignored. */
	avail = p->pl_len;
	if (known_first)
		p->tag_flags |= IG_TF_FIRST_SEGMENT;

	/* method token: 1..8 upper-case letters, then SP */
	if (avail >= 9 && pl + 9 <= end) {
		/* one word: the first SP, and every byte before it in 'A'..'Z' */
		__u64 w = ig_load64(pl), sp = ig_zero_bytes(w ^ 0x2020202020202020ULL);
		__u64 bytes, letters;
		if (sp)
			mlen = ig_first_flag_bf(sp);
		else
			mlen = pl[8] == ' ' ? 8 : 0;
		IG_BARRIER_VAR(mlen);
		mlen &= 0xf;
		bytes = mlen >= 8 ? ~0ULL : (1ULL << (8 * mlen)) - 1;
		/* for 7-bit bytes: >= 'A' sets the high bit of b + 0x3f, > 'Z' that of b + 0x25 */
		letters = ((w + 0x3f3f3f3f3f3f3f3fULL) & ~(w + 0x2525252525252525ULL) & ~w) & IG_HIGHS;
		if (mlen > 0 && (letters & bytes) == (IG_HIGHS & bytes)) {
			looks = 1;
			key = w & bytes;
		}
	} else {
		int letters = 1;
		for (i = 0; i < 9; i++) {
			__u8 c;
			q = pl + i;
			if (i >= avail || q + 1 > end)
				break;
			c = q[0];
			if (c == ' ') {
				if (i > 0) {
					looks = 1;
					mlen = i;
				}
				break;
			}
			if (c < 'A' || c > 'Z' || i == 8) {
				letters = 0;
				break;
			}
			key |= (__u64)c << (8 * i);
		}
		if (!looks && letters && i > 0 && i < 9 && i >= avail) {
			/* The segment ends inside the method (a client writing byte by byte): a
			 * request start if it is a prefix of an allowed method or of "PRI". */
			__u64 m = i >= 8 ? ~0ULL : (1ULL << (8 * i)) - 1; /* no shift by 64 */
			__u32 j;
			int ok = 0;
IG_UNROLL
			for (j = 0; j < IG_MAX_METHODS; j++)
				if (j < cfg->nmethods && (cfg->method_key[j] & m) == key)
					ok = 1;
			if (ok) {
				p->tag_flags |= IG_TF_REQUEST_START;
				p->reason = IG_R_REQUEST;
				return 0;
			}
			if ((0x495250ULL & m) == key && i <= 3) {
				ig_check_h2(pl, end, avail, cfg, p);
				return 0;
			}
			if (known_first)
				ig_reject(cfg, p, IG_R_BAD_METHOD);
			return 0;
		}
	}
	if (!looks) {
		if (known_first)
			ig_reject(cfg, p, IG_R_BAD_REQUEST_LINE);
		return 0; /* a continuation: nothing one segment can prove */
	}
	if (key == 0x495250ULL) { /* "PRI" */
		ig_check_h2(pl, end, avail, cfg, p);
		return 0;
	}
	p->tag_flags |= IG_TF_REQUEST_START;
	{
		int ok = 0;
IG_UNROLL
		for (i = 0; i < IG_MAX_METHODS; i++)
			if (i < cfg->nmethods && cfg->method_key[i] == key)
				ok = 1;
		if (!ok)
			{ ig_reject(cfg, p, IG_R_BAD_METHOD); return 0; }
	}

	/* request target: origin-form, under an allowed prefix */
	if (mlen > 8)
		return 0;
	t = pl + mlen + 1;
	tavail = avail - mlen - 1;
	if (mlen + 1 >= avail || t + 1 > end) {
		p->reason = IG_R_REQUEST; /* the segment ends here: nothing more to prove */
		return 0;
	}
	if (t[0] != '/')
		{ ig_reject(cfg, p, IG_R_BAD_PATH); return 0; }
	{
		struct ig_target_words tw = {};
		__u64 *w = tw.w, *have = tw.have;
		int cls;
		if (tavail >= 32 && t + 32 <= end) {
IG_UNROLL
			for (i = 0; i < IG_PREFIX_WORDS; i++) {
				w[i] = ig_load64(t + 8 * i);
				have[i] = ~0ULL;
			}
		} else if (tavail < 32 && t + tavail <= end) {
			/* A short target: whole words, then the last partial word taken as the top
			 * bytes of the 8 that end the target (the headers before the payload make
			 * sure the frame holds 8 bytes there): word loads, no byte loop. */
			__u32 e = (__u32)p->pl_off + mlen + 1 + tavail; /* frame offset of the end */
IG_UNROLL
			for (i = 0; i < IG_PREFIX_WORDS; i++) {
				__u32 o = 8 * i, r;
				if (o >= tavail)
					break;
				r = tavail - o;
				if (r >= 8) {
					q = t + o;
					if (q + 8 > end)
						break;
					w[i] = ig_load64(q);
					have[i] = ~0ULL;
				} else {
					IG_BARRIER_VAR(e);
					q = data + ((e - 8) & 0x7ff); /* e - 8 < 0x7ff: the mask is for the verifier */
					if (q + 8 > end)
						break;
					w[i] = ig_load64(q) >> (8 * (8 - r));
					have[i] = (1ULL << (8 * r)) - 1;
				}
			}
		} else {
			/* (not reached for a frame that passed ig_parse_l2l4: the IP length proved
			 * the payload is in the frame) */
			for (i = 0; i < 32; i++) {
				IG_BARRIER_VAR(i);
				q = t + (i & 0x3fff); /* the mask is for the verifier: i <= 0x3fff already */
				if (i >= tavail || q + 1 > end)
					break;
				w[i / 8] |= (__u64)q[0] << (8 * (i % 8));
				have[i / 8] |= 0xffULL << (8 * (i % 8));
			}
		}
		cls = IG_MATCH_PREFIXES(cfg, &tw);
		if (cls < 0)
			{ ig_reject(cfg, p, IG_R_BAD_PATH); return 0; }
		p->cls = (__u8)cls;
	}

	p->t_off = (__u16)(p->pl_off + mlen + 1);
	p->t_len = (__u16)tavail;
	p->reason = IG_R_REQUEST; /* provisional: ig_scan_target judges the rest */
	return 1;
}

/* Flags the bytes of a target word that end or break it: < 0x21, >= 0x80 or == 0x7f (the +1
 * carries into the high bit). The lowest flagged byte is exact. */
IG_INLINE __u64 ig_target_flags(__u64 w)
{
	return ((w - 0x2121212121212121ULL) | w | (w + 0x0101010101010101ULL)) & IG_HIGHS;
}

/* Stage 2a of an HTTP/1 request start: skips visible-ASCII words of the target. Returns the
 * offset in the target where byte-wise judging starts, 0 when there is nothing to judge (more
 * than IG_MAX_TARGET_WORDS clean words). Four words per loop step while 32 bytes are there,
 * then word by word: the same words, the same answer as one word per step, a quarter of the
 * loop overhead on a long target. */
IG_INLINE __u32 ig_scan_target_words(const __u8 *data, const __u8 *end, struct ig_parse *p)
{
	const __u8 *t, *q;
	__u32 i, n, k, tavail = p->t_len, toff = p->t_off;

	if (toff > 0x7ff || tavail == 0)
		return 0;
	IG_BARRIER_VAR(toff);
	t = data + (toff & 0x7ff); /* the mask is for the verifier: toff <= 0x7ff already */
	/* find the SP that ends the target; every byte before it must be visible ASCII */
	i = 1;
	for (n = 0; n < IG_MAX_TARGET_WORDS; n += 4) {
		__u64 m0, m1, m2, m3;
		IG_BARRIER_VAR(i);
		q = t + (i & 0x7ff); /* the mask is for the verifier: i <= 1 + 8 * 128 already */
		if (i + 32 > tavail || q + 32 > end)
			break;
		m0 = ig_target_flags(ig_load64(q));
		m1 = ig_target_flags(ig_load64(q + 8));
		m2 = ig_target_flags(ig_load64(q + 16));
		m3 = ig_target_flags(ig_load64(q + 24));
		if (m0 | m1 | m2 | m3) {
			if (m0)
				return i + ig_first_flag(m0);
			if (m1)
				return i + 8 + ig_first_flag(m1);
			if (m2)
				return i + 16 + ig_first_flag(m2);
			return i + 24 + ig_first_flag(m3);
		}
		i += 32;
	}
	if (n >= IG_MAX_TARGET_WORDS)
		return 0; /* a very long target: userspace judges it */
	/* fewer than 32 bytes left: at most three whole words (never past the word limit: n <= 124) */
IG_UNROLL
	for (k = 0; k < 3; k++) {
		__u64 m;
		IG_BARRIER_VAR(i);
		q = t + (i & 0x7ff);
		if (i + 8 > tavail || q + 8 > end)
			break;
		m = ig_target_flags(ig_load64(q));
		if (m)
			return i + ig_first_flag(m);
		i += 8;
	}
	return i;
}

/* Stage 2b: from the byte the word scan stopped at (i, relative to the target), find the SP
 * that ends the target, then check the version. */
IG_INLINE void ig_check_target_end(const __u8 *data, const __u8 *end, IG_CFG *cfg,
				   struct ig_parse *p, __u32 i)
{
	const __u8 *t, *v, *q;
	__u32 n, tavail = p->t_len, toff = p->t_off;

	if (i == 0 || i > 0x3fff || toff > 0x7ff)
		return;
	IG_BARRIER_VAR(toff);
	t = data + (toff & 0x7ff); /* the mask is for the verifier: toff <= 0x7ff already */
	/* byte-wise over at most 8 bytes: the flagged byte, or the tail of the segment */
IG_UNROLL
	for (n = 0; n < 8; n++) {
		__u8 c;
		if (i > 0x3fff || i >= tavail) {
			p->reason = IG_R_REQUEST; /* segment ends inside the target */
			return;
		}
		IG_BARRIER_VAR(i);
		q = t + (i & 0x3fff); /* the mask is for the verifier: i <= 0x3fff already */
		if (q + 1 > end) {
			p->reason = IG_R_REQUEST;
			return;
		}
		c = q[0];
		if (c == ' ')
			break;
		if (c < 0x21 || c > 0x7e)
			return ig_reject(cfg, p, IG_R_BAD_REQUEST_LINE);
		i++;
	}
	if (n == 8) {
		p->reason = IG_R_REQUEST;
		return;
	}

	/* "HTTP/1.0\r\n" or "HTTP/1.1\r\n" */
	if (i > 0x3fff)
		return;
	IG_BARRIER_VAR(i);
	v = t + ((i + 1) & 0x3fff);
	if (i + 1 + 10 <= tavail && v + 10 <= end) {
		__u64 a = ig_load64(v);
		if ((a & 0x00ffffffffffffffULL) != 0x002e312f50545448ULL ||
		    (v[7] != '0' && v[7] != '1')) {
			if ((a & 0xffffffffffULL) == 0x2f50545448ULL)
				return ig_reject(cfg, p, IG_R_BAD_VERSION);
			return ig_reject(cfg, p, IG_R_BAD_REQUEST_LINE);
		}
		if (v[8] != '\r' || v[9] != '\n')
			return ig_reject(cfg, p, IG_R_BAD_REQUEST_LINE);
	} else {
		const char ver[10] = {'H', 'T', 'T', 'P', '/', '1', '.', '1', '\r', '\n'};
		for (n = 0; n < 10; n++) {
			__u8 c;
			q = v + (n & 0xf);
			if (i + 1 + n >= tavail || q + 1 > end)
				break;
			c = q[0];
			if (n == 7 ? (c != '0' && c != '1') : c != (__u8)ver[n])
				return ig_reject(cfg, p, n >= 5 && n < 8 ? IG_R_BAD_VERSION
									 : IG_R_BAD_REQUEST_LINE);
		}
		p->reason = IG_R_REQUEST;
		return;
	}
	p->reason = IG_R_REQUEST;

	if (i + 11 < tavail) {
		p->hdr_off = (__u16)(p->t_off + i + 11);
		p->hdr_len = (__u16)(tavail - (i + 11));
	}
}

/* Stage 2: the rest of the target and the version. On success sets hdr_off/hdr_len to the
 * header block that follows (for ig_find_priority). */
IG_INLINE void ig_scan_target(const __u8 *data, const __u8 *end, IG_CFG *cfg, struct ig_parse *p)
{
	ig_check_target_end(data, end, cfg, p, ig_scan_target_words(data, end, p));
}

/* Judges the payload of a non-SYN service segment (all stages; the BPF program runs stages 2
 * and 3 as separate subprograms so the verifier checks each once). known_first: the program
 * knows this is the connection's first data segment (it saw the SYN), so it must start a
 * request. */
IG_INLINE void ig_classify_payload(const __u8 *data, const __u8 *end, IG_CFG *cfg,
				   struct ig_parse *p, int known_first)
{
	if (!ig_classify_start(data, end, cfg, p, known_first))
		return;
	ig_scan_target(data, end, cfg, p);
	if (p->reason == IG_R_REQUEST && p->hdr_len && cfg->priority_header &&
	    p->cls == IG_CLASS_NONE)
		p->cls = ig_find_priority(data, end, p->hdr_off, p->hdr_len);
}

/* Checksums: ig_csum_add32 / ig_csum_fold (common/checksum.h) over words as loaded. */

/* Writes the Ethernet and IP headers of a reply to the parsed segment in place: MACs,
 * addresses swapped, the VLAN tag kept, IP options dropped, IPv4 checksum in full. tcp_len:
 * the TCP header and options that follow. Returns the offset of the TCP header (the frame
 * must already have its final length), or -1 when the frame is too short; *psum: the TCP
 * pseudo-header sum. */
IG_INLINE int ig_write_reply_l3(__u8 *data, const __u8 *end, const struct ig_parse *p,
				__u32 tcp_len, __u32 *psum)
{
	__u8 mac[12];
	__u8 *ip;
	__u32 sum, i;

	if (data + 14 > end)
		return -1;
IG_UNROLL
	for (i = 0; i < 12; i++)
		mac[i] = data[i];
IG_UNROLL
	for (i = 0; i < 6; i++) {
		data[i] = mac[6 + i];
		data[6 + i] = mac[i];
	}
	if (p->vlan) {
		if (data + 18 > end)
			return -1;
		ig_store16(data + 12, p->vlan_proto);
		ig_store16(data + 14, p->vlan_tci);
		ip = data + 18;
	} else {
		ip = data + 14;
	}
	if (p->key.family == 6) {
		if (ip + 40 > end)
			return -1;
		ig_store16(ip - 2, ig_bswap16(IG_ETH_P_IPV6));
		ig_store32(ip, ig_bswap32(0x60000000));
		ig_store16(ip + 4, ig_bswap16((__u16)tcp_len));
		ip[6] = 6;
		ip[7] = 64;
		sum = 0;
IG_UNROLL
		for (i = 0; i < 4; i++) {
			ig_store32(ip + 8 + 4 * i, p->key.daddr[i]);
			ig_store32(ip + 24 + 4 * i, p->key.saddr[i]);
			sum = ig_csum_add32(sum, p->key.saddr[i]);
			sum = ig_csum_add32(sum, p->key.daddr[i]);
		}
		*psum = ig_csum_add32(sum, ig_bswap32(6 + tcp_len));
		return (p->vlan ? 18 : 14) + 40;
	}
	if (ip + 20 > end)
		return -1;
	ig_store16(ip - 2, ig_bswap16(IG_ETH_P_IP));
	ig_store32(ip, ig_bswap32(0x45000000 | (20 + tcp_len)));
	ig_store16(ip + 4, 0);
	ig_store16(ip + 6, ig_bswap16(0x4000)); /* DF */
	ip[8] = 64;
	ip[9] = 6;
	ig_store16(ip + 10, 0);
	ig_store32(ip + 12, p->key.daddr[0]);
	ig_store32(ip + 16, p->key.saddr[0]);
	sum = ig_csum_add32(0, ig_bswap32(0x45000000 | (20 + tcp_len)));
	sum = ig_csum_add32(sum, ig_bswap32(0x00004000));
	sum = ig_csum_add32(sum, ig_bswap32(0x40060000));
	sum = ig_csum_add32(sum, p->key.saddr[0]);
	sum = ig_csum_add32(sum, p->key.daddr[0]);
	ig_store16(ip + 10, ig_csum_fold(sum));
	sum = ig_csum_add32(0, p->key.saddr[0]);
	sum = ig_csum_add32(sum, p->key.daddr[0]);
	*psum = ig_csum_add32(sum, ig_bswap32(6 + tcp_len));
	return (p->vlan ? 18 : 14) + 20;
}

/* Rewrites the frame in place into a TCP RST (with ACK) answering the parsed segment: MACs,
 * addresses and ports swapped, the VLAN tag kept, IP options dropped, seq = the segment's
 * ack, ack = the segment's end. Returns the new frame length (the caller shrinks the frame),
 * or -1 when the frame is too short to hold it. Checksums are computed in full. */
/* After ig_write_reply_l3 returned off: the reply's ports (swapped), seq and ack, also added to
 * *psum. Returns the TCP header, or 0 when off is out of range or the frame holds fewer than
 * `need` bytes of TCP header. */
IG_INLINE __u8 *ig_write_reply_tcp(__u8 *data, const __u8 *end, const struct ig_parse *p,
				   int off, __u32 need, __u32 seq, __u32 ack, __u32 *psum)
{
	__u8 *tcp;

	if (off < 0 || off > 64)
		return 0;
	tcp = data + off;
	if (tcp + need > end)
		return 0;
	ig_store16(tcp, p->key.dport);
	ig_store16(tcp + 2, p->key.sport);
	ig_store32(tcp + 4, ig_bswap32(seq));
	ig_store32(tcp + 8, ig_bswap32(ack));
	*psum = ig_csum_add32(*psum, ((__u32)p->key.sport << 16) | p->key.dport);
	*psum = ig_csum_add32(*psum, ig_bswap32(seq));
	*psum = ig_csum_add32(*psum, ig_bswap32(ack));
	return tcp;
}

IG_INLINE int ig_build_rst(__u8 *data, const __u8 *end, const struct ig_parse *p)
{
	__u8 *tcp;
	__u32 sum = 0;
	__u32 seq = (p->tcp_flags & IG_TCP_ACK) ? p->ack_seq : 0;
	__u32 ack = p->seq + p->pl_len + ((p->tcp_flags & IG_TCP_SYN) ? 1 : 0) +
		    ((p->tcp_flags & IG_TCP_FIN) ? 1 : 0);
	int off = ig_write_reply_l3(data, end, p, 20, &sum);

	tcp = ig_write_reply_tcp(data, end, p, off, 20, seq, ack, &sum);
	if (!tcp)
		return -1;
	tcp[12] = 5 << 4;
	tcp[13] = IG_TCP_RST | IG_TCP_ACK;
	ig_store32(tcp + 14, 0); /* window 0, checksum 0 for now */
	ig_store16(tcp + 18, 0); /* urgent pointer */
	sum = ig_csum_add32(sum, ig_bswap32(0x50140000));
	ig_store16(tcp + 16, ig_csum_fold(sum));
	return off + 20;
}

/* What a SYN offered, as ig_parse_syn_opts found it. */
struct ig_syn_opts {
	__u32 tsval;
	__u16 mss;   /* 0: no MSS option */
	__s8 wscale; /* -1: none */
	__u8 sack;
	__u8 ts;
	__u8 pad[3];
};

#define IG_MAX_TCP_OPT_STEPS 20 /* options (NOPs included) looked at in a SYN */

/* The MSS, window scale, SACK-permitted and timestamp options of a parsed SYN. A malformed
 * option ends the walk; what was found before it counts. */
IG_INLINE void ig_parse_syn_opts(const __u8 *data, const __u8 *end, const struct ig_parse *p,
				 struct ig_syn_opts *o)
{
	const __u8 *opt, *q;
	__u32 i = 0, n, olen;

	o->tsval = 0;
	o->mss = 0;
	o->wscale = -1;
	o->sack = 0;
	o->ts = 0;
	if (p->l4_off > 0x3ff || p->pl_off < p->l4_off + 20)
		return;
	olen = (__u32)p->pl_off - p->l4_off - 20;
	if (olen > 40)
		return;
	opt = data + p->l4_off + 20;
	for (n = 0; n < IG_MAX_TCP_OPT_STEPS; n++) {
		__u32 kind, len;
		if (i >= olen)
			break;
		IG_BARRIER_VAR(i);
		q = opt + (i & 0x3f); /* the mask is for the verifier: i < olen <= 40 already */
		if (q + 2 > end) {
			break;
		}
		kind = q[0];
		if (kind == 0)
			break;
		if (kind == 1) {
			i++;
			continue;
		}
		len = q[1];
		if (len < 2 || i + len > olen)
			break;
		if (kind == 2 && len == 4) {
			if (q + 4 > end)
				break;
			o->mss = ig_bswap16(ig_load16(q + 2));
		} else if (kind == 3 && len == 3) {
			if (q + 3 > end)
				break;
			o->wscale = (__s8)(q[2] > 14 ? 14 : q[2]);
		} else if (kind == 4 && len == 2) {
			o->sack = 1;
		} else if (kind == 8 && len == 10) {
			if (q + 10 > end)
				break;
			o->ts = 1;
			o->tsval = ig_bswap32(ig_load32(q + 2));
		}
		i += len;
	}
}

/* The TCP header length of our SYN-ACK to a SYN that offered `o`. */
IG_INLINE __u32 ig_synack_tcp_len(const struct ig_syn_opts *o)
{
	return 20 + 4 + (o->ts ? 12 : (o->sack ? 4 : 0)) + (o->wscale >= 0 ? 4 : 0);
}

/* Rewrites the frame in place into the SYN-ACK answering a parsed SYN: seq = isn (our cookie),
 * ack = the client's ISN + 1, window 65535, options in Linux's order: MSS (mss), then
 * SACK-permitted and timestamps (TSval = tsval, TSecr = the client's TSval) when offered, then
 * window scale (wscale) when offered. The frame must already be ig_synack_tcp_len() + the L2
 * and IP headers long (the caller grows it; IP options are dropped). Returns the frame length
 * or -1. Checksums in full. */
IG_INLINE int ig_build_synack(__u8 *data, const __u8 *end, const struct ig_parse *p,
			      const struct ig_syn_opts *o, __u32 isn, __u32 tsval, __u16 mss,
			      __u8 wscale)
{
	__u8 *tcp;
	__u32 w[5], n = 0, i, sum = 0, tcp_len = ig_synack_tcp_len(o);
	__u32 ack = p->seq + 1;
	int off;

	w[n++] = ig_bswap32(0x02040000 | mss);
	if (o->ts) {
		w[n++] = ig_bswap32(o->sack ? 0x0402080a : 0x0101080a);
		w[n++] = ig_bswap32(tsval);
		w[n++] = ig_bswap32(o->tsval);
	} else if (o->sack) {
		w[n++] = ig_bswap32(0x01010402);
	}
	if (o->wscale >= 0)
		w[n++] = ig_bswap32(0x01030300 | wscale);
	off = ig_write_reply_l3(data, end, p, tcp_len, &sum);
	tcp = ig_write_reply_tcp(data, end, p, off, 24, isn, ack, &sum);
	if (!tcp)
		return -1;
	ig_store32(tcp + 12, ig_bswap32((tcp_len / 4) << 28 | (__u32)(IG_TCP_SYN | IG_TCP_ACK) << 16 |
					0xffff));
	ig_store32(tcp + 16, 0); /* checksum (for now), urgent pointer */
	sum = ig_csum_add32(sum, ig_bswap32((tcp_len / 4) << 28 |
					    (__u32)(IG_TCP_SYN | IG_TCP_ACK) << 16 | 0xffff));
IG_UNROLL
	for (i = 0; i < 5; i++) {
		if (i < n) {
			if (tcp + 24 + 4 * i > end)
				return -1;
			ig_store32(tcp + 20 + 4 * i, w[i]);
			sum = ig_csum_add32(sum, w[i]);
		}
	}
	ig_store16(tcp + 16, ig_csum_fold(sum));
	return off + (int)tcp_len;
}

#endif /* INFERGATE_XDP_CLASSIFIER_H */
