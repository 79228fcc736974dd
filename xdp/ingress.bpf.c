// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/* infergate's XDP ingress program: validate, drop, rate-limit and tag requests at the NIC.
 *
 * The stateless part (parsing, HTTP/1 request line, HTTP/2 preface, the RST) is classifier.h,
 * shared with host C++. This file adds what needs memory across packets:
 *   - ig_flows: per connection (a direct-mapped array, see struct ig_flow_val), the first data
 *     sequence number (so the first segment must start a request), the latest request's tag
 *     (looked up by userspace in xdp-filter mode), and flows we reset (their later data
 *     segments are dropped);
 *   - ig_buckets: per-source token buckets for SYNs and request starts;
 *   - ig_cidrs: source CIDR -> class / rate-limit exemption;
 *   - ig_state: the overload level, the cookie mode and which ig_rules entry is in force, set
 *     by userspace at run time;
 *   - ig_rules: the rules (struct ig_config: methods, paths, rate limits, ...), two entries so
 *     that a reload writes one while packets read the other;
 *   - ig_cookie: the SYN cookie keys (dataplane/tcp/syncookie.h), shared with the TCP stack;
 *   - ig_rst_tokens: a per-CPU budget for the RSTs the program sends;
 *   - per-CPU counters for every (action, reason) and per (class, tag verdict).
 * afxdp mode with cookie mode on: service SYNs are answered here with SYN cookies (no state),
 * the client's pure ACK is dropped (deferred accept) and its first data segment, which carries
 * the same proof, is judged and then handed to the stack flagged IG_TF_COOKIE (or answered
 * with a RST here when rejected). See docs/XDP.md, "SYN cookies".
 * Load-time knobs (afxdp, SYN cookies, RST transmit, flow table size) are in the read-only
 * ig_cfg, so the verifier prunes what is off; the rules are read from ig_rules per packet.
 */
#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>

/* The path prefix rules as a global subprogram (defined below): verified once, whatever the
 * path through stage 1 that reaches it. */
struct ig_config;
struct ig_target_words;
int ig_match_prefixes_sub(const struct ig_config *cfg, const struct ig_target_words *t);
#define IG_MATCH_PREFIXES ig_match_prefixes_sub
#include "classifier.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The load-time fields only (ingress_shared.h, struct ig_config); the rest is zero here. */
const volatile struct ig_config ig_cfg = {};
/* The flow-hash key: 128 bits from getrandom(), set by XdpFilter before loading. */
const volatile struct ig_sipkey ig_flow_secret = {};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, IG_NUM_ACTIONS * IG_R_MAX);
	__type(key, __u32);
	__type(value, struct ig_counter);
} ig_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, IG_NUM_CLASSES * IG_TV_MAX);
	__type(key, __u32);
	__type(value, __u64);
} ig_class_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536); /* set to flow_mask + 1 at load time */
	__type(key, __u32);
	__type(value, struct ig_flow_val);
} ig_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32[4]);
	__type(value, struct ig_bucket);
} ig_buckets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ig_cidr_key);
	__type(value, struct ig_cidr_val);
} ig_cidrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ig_runtime);
} ig_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ig_cookie_keys);
} ig_cookie SEC(".maps");

/* The rules: entry ig_runtime.rules_slot is in force, the other one is where a reload writes. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct ig_config);
} ig_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ig_rst_bucket);
} ig_rst_tokens SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} ig_xsks SEC(".maps");

/* Source address as 16 bytes, IPv4 mapped into ::ffff:0:0/96. */
static __always_inline void ig_src16(const struct ig_parse *p, __u32 a[4])
{
	if (p->key.family == 4) {
		a[0] = 0;
		a[1] = 0;
		a[2] = ig_bswap32(0x0000ffff);
		a[3] = p->key.saddr[0];
	} else {
		a[0] = p->key.saddr[0];
		a[1] = p->key.saddr[1];
		a[2] = p->key.saddr[2];
		a[3] = p->key.saddr[3];
	}
}

/* The key of a source's token buckets: its address cut to the configured prefix (IPv6 /64 by
 * default: one host owns a whole /64, so per-address buckets would not limit it). */
static __always_inline void ig_src_key(const struct ig_config *r, const struct ig_parse *p,
				       __u32 a[4])
{
	if (p->key.family == 4) {
		a[0] = 0;
		a[1] = 0;
		a[2] = ig_bswap32(0x0000ffff);
		a[3] = p->key.saddr[0] & r->src_mask4;
	} else {
		a[0] = p->key.saddr[0] & r->src_mask6[0];
		a[1] = p->key.saddr[1] & r->src_mask6[1];
		a[2] = p->key.saddr[2] & r->src_mask6[2];
		a[3] = p->key.saddr[3] & r->src_mask6[3];
	}
}

/* Refills and takes one token. Returns 1 if the source is within its rate. Buckets are
 * updated without atomics: under concurrent CPUs the limit is approximate (it errs towards
 * admitting), which is what a per-source flood limit needs. */
static __always_inline int ig_take(__u64 *tokens, __u64 *last, __u64 now, __u64 rate, __u64 burst)
{
	const __u64 unit = 1000000000ULL;
	__u64 cap = burst * unit, elapsed = now - *last, t = *tokens;
	if (*last == 0) {
		t = cap; /* a new source starts with a full bucket */
	} else {
		if (elapsed > 100 * unit)
			elapsed = 100 * unit;
		t += elapsed * rate;
		if (t > cap)
			t = cap;
	}
	*last = now;
	if (t < unit) {
		*tokens = t;
		return 0;
	}
	*tokens = t - unit;
	return 1;
}

/* Class, exemption and trust from the source CIDR rules (one LPM lookup). */
static __always_inline void ig_cidr_lookup(const struct ig_parse *p, __u8 *cls, __u8 *exempt,
					   __u8 *trusted)
{
	struct ig_cidr_key k = {.prefixlen = 128};
	struct ig_cidr_val *v;
	__u32 a[4];
	ig_src16(p, a);
	__builtin_memcpy(k.addr, a, 16);
	v = bpf_map_lookup_elem(&ig_cidrs, &k);
	if (v) {
		*cls = v->cls;
		*exempt = v->exempt;
		*trusted = v->trusted;
	}
}

static __always_inline struct ig_runtime *ig_runtime_get(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&ig_state, &zero);
}

static __always_inline __u32 ig_overload_level(void)
{
	struct ig_runtime *rt = ig_runtime_get();
	return rt ? rt->overload_level : 0;
}

/* The rules in force, looked up once per packet; the pointer is handed to the global
 * subprograms, so one packet is judged by one entry even when a reload flips rules_slot
 * meanwhile. */
static __always_inline const struct ig_config *ig_rules_get(void)
{
	struct ig_runtime *rt = ig_runtime_get();
	__u32 s = rt ? rt->rules_slot & 1 : 0;
	return bpf_map_lookup_elem(&ig_rules, &s);
}

/* One token from this CPU's RST budget. */
static __always_inline int ig_rst_ok(const struct ig_config *r)
{
	__u32 zero = 0;
	struct ig_rst_bucket *b;
	if (r->rst_rate == 0)
		return 1;
	b = bpf_map_lookup_elem(&ig_rst_tokens, &zero);
	if (!b)
		return 1;
	return ig_take(&b->tokens, &b->last_ns, bpf_ktime_get_ns(), r->rst_rate, r->rst_burst);
}

static __always_inline int ig_admitted(__u8 cls, __u32 level)
{
	return (__u32)cls + level < IG_NUM_CLASSES;
}

/* Returns 1 if the source may go on (syn: a SYN; otherwise a request start). */
static __always_inline int ig_rate_ok(const struct ig_config *r, const struct ig_parse *p,
				      __u64 now, int syn)
{
	struct ig_bucket *b, fresh = {};
	__u32 a[4];
	__u64 rate = syn ? r->syn_rate : r->req_rate;
	__u64 burst = syn ? r->syn_burst : r->req_burst;

	if (rate == 0)
		return 1;
	ig_src_key(r, p, a);
	b = bpf_map_lookup_elem(&ig_buckets, a);
	if (!b) {
		bpf_map_update_elem(&ig_buckets, a, &fresh, BPF_NOEXIST);
		b = bpf_map_lookup_elem(&ig_buckets, a);
		if (!b)
			return 1;
	}
	if (syn)
		return ig_take(&b->syn_tokens, &b->syn_last_ns, now, rate, burst);
	return ig_take(&b->req_tokens, &b->req_last_ns, now, rate, burst);
}

static __always_inline void ig_count(__u8 action, __u8 reason, __u64 bytes)
{
	__u32 idx = (__u32)action * IG_R_MAX + reason;
	struct ig_counter *c = bpf_map_lookup_elem(&ig_counters, &idx);
	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

static __always_inline void ig_count_class(__u8 cls, __u8 verdict)
{
	__u32 idx = (__u32)cls * IG_TV_MAX + verdict;
	__u64 *c;
	if (idx >= IG_NUM_CLASSES * IG_TV_MAX)
		return;
	c = bpf_map_lookup_elem(&ig_class_counters, &idx);
	if (c)
		(*c)++;
}

/* Stages 2 and 3 of the HTTP/1 check run as global subprograms: the verifier checks each once
 * with its arguments unknown, instead of once per path through stage 1. */
__attribute__((noinline)) int ig_target_end_sub(struct xdp_md *ctx, struct ig_parse *p, __u32 i,
					   const struct ig_config *r)
{
	const __u8 *data = (const __u8 *)(long)ctx->data;
	const __u8 *end = (const __u8 *)(long)ctx->data_end;
	if (!p || !r)
		return 0;
	ig_check_target_end(data, end, r, p, i);
	return 0;
}

__attribute__((noinline)) int ig_scan_target_sub(struct xdp_md *ctx, struct ig_parse *p,
					    const struct ig_config *r)
{
	const __u8 *data = (const __u8 *)(long)ctx->data;
	const __u8 *end = (const __u8 *)(long)ctx->data_end;
	if (!p)
		return 0;
	/* = ig_scan_target(); the call resets what the verifier knows about i, so the rest is
	 * checked once rather than once per word count */
	return ig_target_end_sub(ctx, p, ig_scan_target_words(data, end, p), r);
}

__attribute__((noinline)) int ig_match_prefixes_sub(const struct ig_config *cfg,
						    const struct ig_target_words *t)
{
	if (!cfg || !t)
		return IG_CLASS_NONE;
	return ig_match_prefixes(cfg, t);
}

/* Ethernet, VLAN, IP and TCP headers (a global subprogram: verified once; the main program
 * goes on from one state, whatever the headers were). */
__attribute__((noinline)) int ig_parse_sub(struct xdp_md *ctx, struct ig_parse *p,
					   const struct ig_config *r)
{
	const __u8 *data = (const __u8 *)(long)ctx->data;
	const __u8 *end = (const __u8 *)(long)ctx->data_end;
	if (!p || !r)
		return 0;
	return ig_parse_l2l4(data, end, r, p);
}

/* Stage 1 (method, target start, path prefixes and classes; the HTTP/2 preface) as a global
 * subprogram: the rules are run-time values, so its loops are verified once here rather than
 * once per path through the main program. */
__attribute__((noinline)) int ig_classify_start_sub(struct xdp_md *ctx, struct ig_parse *p,
						    int known_first, const struct ig_config *r)
{
	const __u8 *data = (const __u8 *)(long)ctx->data;
	const __u8 *end = (const __u8 *)(long)ctx->data_end;
	if (!p || !r)
		return 0;
	return ig_classify_start(data, end, r, p, known_first);
}

__attribute__((noinline)) int ig_find_priority_sub(struct xdp_md *ctx, __u32 off, __u32 len)
{
	const __u8 *data = (const __u8 *)(long)ctx->data;
	const __u8 *end = (const __u8 *)(long)ctx->data_end;
	return ig_find_priority(data, end, off, len);
}

/* The SYN's options (a global subprogram: the option walk is verified once). */
__attribute__((noinline)) int ig_syn_opts_sub(struct xdp_md *ctx, struct ig_parse *p,
					      struct ig_syn_opts *o)
{
	const __u8 *data = (const __u8 *)(long)ctx->data;
	const __u8 *end = (const __u8 *)(long)ctx->data_end;
	if (!p || !o)
		return 0;
	ig_parse_syn_opts(data, end, p, o);
	return 0;
}

/* A key that was never set (all zero) is public: nothing it signs may count. */
static __always_inline int ig_key_set(const struct ig_sipkey *k)
{
	return (k->k0 | k->k1) != 0;
}

/* 1 when the segment's ack - 1 is a cookie of ours for its seq - 1 (the client's ISN). */
__attribute__((noinline)) int ig_cookie_valid_sub(struct ig_parse *p)
{
	struct ig_cookie_opts o;
	struct ig_cookie_keys *k;
	__u32 zero = 0;
	__u32 cookie;
	if (!p)
		return 0;
	k = bpf_map_lookup_elem(&ig_cookie, &zero);
	if (!k)
		return 0;
	cookie = p->ack_seq - 1;
	if (!ig_key_set(&k->key[(cookie >> 8) & 1]))
		return 0;
	return ig_cookie_check(k, p->key.saddr, p->key.daddr, p->key.sport, p->key.dport,
			       p->key.family == 6, p->seq - 1, cookie, &o);
}

/* Our cookie (ISN) for a SYN into *isn. Returns 0 when no key is set (the stack answers). */
__attribute__((noinline)) int ig_cookie_make_sub(struct ig_parse *p, struct ig_syn_opts *o,
						 __u32 *isn)
{
	struct ig_cookie_keys *k;
	__u32 zero = 0, opts;
	if (!p || !o || !isn)
		return 0;
	k = bpf_map_lookup_elem(&ig_cookie, &zero);
	if (!k || !ig_key_set(&k->key[k->gen & 1]))
		return 0;
	opts = ig_cookie_encode_opts(o->mss ? o->mss : 536, o->wscale, o->sack, o->ts);
	*isn = ig_cookie_make(k, p->key.saddr, p->key.daddr, p->key.sport, p->key.dport,
			      p->key.family == 6, p->seq, opts);
	return 1;
}

/* Answers a SYN with a cookie SYN-ACK, rewriting the frame in place. Returns the XDP action,
 * or -1 when there are no keys yet (the SYN goes on to the stack). */
static __always_inline int ig_answer_syn(struct xdp_md *ctx, struct ig_parse *p, __u64 frame_len)
{
	struct ig_syn_opts o = {};
	__u8 *data, *end;
	__u32 isn = 0, tsval, len;
	__u16 mss = ig_cfg.synack_mss;

	ig_syn_opts_sub(ctx, p, &o);
	if (!ig_cookie_make_sub(p, &o, &isn))
		return -1;
	/* TSval: a millisecond clock with a per-flow offset (our ISN, keyed), like the kernel's
	 * secure_tcp_ts_off; the stack continues from the TSecr it receives. */
	tsval = (__u32)(bpf_ktime_get_ns() / 1000000) + isn;
	if (p->key.family == 6)
		mss -= 20;
	len = (p->vlan ? 18 : 14) + (p->key.family == 6 ? 40 : 20) + ig_synack_tcp_len(&o);
	if (bpf_xdp_adjust_tail(ctx, (int)len - (int)frame_len)) {
		ig_count(XDP_DROP, IG_R_TRUNCATED, frame_len);
		return XDP_DROP;
	}
	data = (__u8 *)(long)ctx->data;
	end = (__u8 *)(long)ctx->data_end;
	if (ig_build_synack(data, end, p, &o, isn, tsval, mss, ig_cfg.synack_wscale) < 0) {
		ig_count(XDP_DROP, IG_R_TRUNCATED, frame_len);
		return XDP_DROP;
	}
	ig_count(XDP_TX, IG_R_SYN_COOKIE_SENT, frame_len);
	if (ig_cfg.tx_redirect)
		return bpf_redirect(ctx->ingress_ifindex, 0);
	return XDP_TX;
}

/* The flow slot of a parsed segment, and its check (state bits clear). */
static __always_inline struct ig_flow_val *ig_flow_slot(const struct ig_parse *p, __u32 *check)
{
	struct ig_sipkey k = {.k0 = ig_flow_secret.k0, .k1 = ig_flow_secret.k1};
	__u64 h = ig_flow_hash(&k, &p->key);
	__u32 idx = (__u32)h & ig_cfg.flow_mask;
	*check = ig_flow_check(h);
	return bpf_map_lookup_elem(&ig_flows, &idx);
}

/* A REJECTED slot still counts (its reject_ttl_ns has not passed). */
static __always_inline int ig_reject_live(const struct ig_config *r, const struct ig_flow_val *fv,
					  __u64 now)
{
	return now - fv->tag.rx_ns < r->reject_ttl_ns;
}

/* The tag into the XDP metadata area. 0 when written; on failure the frame is unchanged. */
static __always_inline int ig_put_meta(struct xdp_md *ctx, const struct ig_tag *tag)
{
	struct ig_tag *meta;
	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(struct ig_tag)))
		return -1;
	meta = (struct ig_tag *)(long)ctx->data_meta;
	if ((void *)(meta + 1) > (void *)(long)ctx->data)
		return -1;
	*meta = *tag;
	return 0;
}

/* The tag as the frame's first 16 bytes. 0 when written; on failure the frame is unchanged. */
static __always_inline int ig_put_prefix(struct xdp_md *ctx, const struct ig_tag *tag)
{
	struct ig_tag *pre;
	if (bpf_xdp_adjust_head(ctx, -(int)sizeof(struct ig_tag)))
		return -1;
	pre = (struct ig_tag *)(long)ctx->data;
	if ((void *)(pre + 1) > (void *)(long)ctx->data_end) {
		bpf_xdp_adjust_head(ctx, (int)sizeof(struct ig_tag));
		return -1;
	}
	*pre = *tag;
	return 0;
}

/* Writes *tag where userspace reads it (enum ig_tag_mode) on a frame already redirected to the
 * socket. 0 when written; on failure the frame is unchanged. Metadata mode falls back to the
 * prefix for a frame the driver gave no metadata room (the AF_XDP device looks for either);
 * prefix mode never calls bpf_xdp_adjust_meta, so a kernel that refuses the helper verifies
 * it (only the loaded mode's branches survive verification). Packet pointers do not survive
 * it: callers reload them. */
static __always_inline int ig_put_tag(struct xdp_md *ctx, const struct ig_tag *tag)
{
	if (ig_cfg.tag_mode == IG_TAG_NONE)
		return -1;
	if (ig_cfg.tag_mode == IG_TAG_META && ig_put_meta(ctx, tag) == 0)
		return 0;
	return ig_put_prefix(ctx, tag);
}

SEC("xdp")
int ig_xdp_ingress(struct xdp_md *ctx)
{
	__u8 *data = (__u8 *)(long)ctx->data;
	__u8 *end = (__u8 *)(long)ctx->data_end;
	__u64 frame_len = ctx->data_end - ctx->data;
	struct ig_parse p = {};
	struct ig_tag tag = {};
	int have_tag = 0;
	int cookie_flow = 0; /* the ack is our cookie and the stack never saw the SYN */
	const struct ig_config *rules = ig_rules_get();

	if (!rules) { /* cannot happen (an array entry below max_entries) */
		ig_count(XDP_PASS, IG_R_NONE, frame_len);
		return XDP_PASS;
	}
	if (ig_parse_sub(ctx, &p, rules)) {
		struct ig_flow_val *fv = 0;
		__u32 check = 0;
		int known_first = 0, proven = 0;

		if (p.reason == IG_R_SYN) {
			__u8 cls = IG_CLASS_NONE, exempt = 0, trusted = 0;
			struct ig_runtime *rt = ig_runtime_get();
			if (rules->cidr_classes) /* trust alone does not matter to a SYN */
				ig_cidr_lookup(&p, &cls, &exempt, &trusted);
			if (cls >= IG_NUM_CLASSES)
				cls = rules->default_cls;
			if (!ig_admitted(cls, rt ? rt->overload_level : 0)) {
				p.action = XDP_DROP;
				p.reason = IG_R_SYN_OVERLOAD;
				goto out;
			}
			if (ig_cfg.syn_cookies && rt && rt->cookie_mode == IG_COOKIE_ON) {
				/* answered here, not charged to the SYN bucket: the source is
				 * spoofable until the handshake completes */
				int act = ig_answer_syn(ctx, &p, frame_len);
				if (act >= 0)
					return act;
			}
			if (rules->syn_rate && !exempt && !ig_rate_ok(rules, &p, bpf_ktime_get_ns(), 1)) {
				p.action = XDP_DROP;
				p.reason = IG_R_SYN_RATE_LIMITED;
			} else if (rules->track_flows) {
				fv = ig_flow_slot(&p, &check);
				if (fv) {
					__u32 st = (__u32)(*(volatile __u64 *)fv >> 32);
					/* never rewrite a slot holding this flow: a spoofed SYN with a
					 * victim's 4-tuple must not move first_seq nor drop a tag; a
					 * REJECTED one only once its time has passed */
					if ((st & ~3u) != check ||
					    (st == (check | IG_FLOW_REJECTED) &&
					     !ig_reject_live(rules, fv, bpf_ktime_get_ns())))
						/* one 8-byte store: first_seq and check */
						*(__u64 *)fv = ((__u64)(check | IG_FLOW_SYN_SEEN) << 32) |
							       (p.seq + 1);
				}
			}
		} else {
			int cookie_on = 0, match = 0;
			if (ig_cfg.syn_cookies && (p.tcp_flags & IG_TCP_ACK)) {
				struct ig_runtime *rt = ig_runtime_get();
				if (rt && (rt->cookie_mode == IG_COOKIE_ON ||
					   (rt->cookie_check_until_ns &&
					    bpf_ktime_get_ns() < rt->cookie_check_until_ns)))
					cookie_on = 1;
			}
			/* Segments without data (ACK, FIN, RST) start nothing and are passed without
			 * a flow lookup (outside cookie mode); a client's RST on a flow we reset then
			 * reaches the kernel socket and frees it. */
			if (!p.pl_len && !cookie_on)
				goto out;
			if (rules->track_flows) {
				fv = ig_flow_slot(&p, &check);
				if (fv) {
					__u64 w = *(volatile __u64 *)fv;
					__u32 st = (__u32)(w >> 32);
					if ((st & ~3u) == check) {
						match = 1;
						if (st == (check | IG_FLOW_REJECTED)) {
							/* only the rejected segment's neighbourhood, and
							 * only for a while: a later incarnation (or the
							 * victim of a spoofed reject) has another seq */
							if (p.seq - (__u32)w < IG_REJECT_WINDOW &&
							    ig_reject_live(rules, fv, bpf_ktime_get_ns())) {
								if (p.pl_len) {
									p.action = XDP_DROP;
									p.reason = IG_R_REJECTED_FLOW;
								}
								goto out;
							}
							match = 0;
						} else if (st == (check | IG_FLOW_SYN_SEEN) &&
							   (__u32)w == p.seq) {
							known_first = 1;
						} else if (st == (check | IG_FLOW_TAGGED) &&
							   (fv->tag.flags & IG_TF_PROVEN)) {
							proven = 1;
							p.tag_flags |= IG_TF_PROVEN;
						}
					}
				}
			}
			if (cookie_on && !match && !(p.tcp_flags & IG_TCP_RST)) {
				if (ig_cookie_valid_sub(&p)) {
					if (!p.pl_len) {
						if (!(p.tcp_flags & IG_TCP_FIN)) {
							/* deferred accept: the first data segment carries
							 * the same proof and creates the connection */
							p.action = XDP_DROP;
							p.reason = IG_R_COOKIE_ACK_DEFERRED;
						}
						goto out;
					}
					cookie_flow = 1;
					known_first = 1;
					proven = 1;
					p.tag_flags |= IG_TF_COOKIE | IG_TF_PROVEN;
					if (rules->syn_rate) {
						/* the connection token its SYN was not charged */
						__u8 c2 = IG_CLASS_NONE, ex = 0, tr = 0;
						if (rules->cidr_classes)
							ig_cidr_lookup(&p, &c2, &ex, &tr);
						if (!ex && !ig_rate_ok(rules, &p, bpf_ktime_get_ns(), 1)) {
							ig_reject(rules, &p, IG_R_SYN_RATE_LIMITED);
							goto rejected;
						}
					}
				} else if (!p.pl_len) {
					p.reason = IG_R_COOKIE_NO_MATCH;
					goto out;
				}
			}
			if (!p.pl_len)
				goto out;
			if (ig_cfg.prove_handshake && known_first && !cookie_flow && rules->req_rate &&
			    ig_cookie_valid_sub(&p)) {
				/* the stack's ISNs are cookies too: the first data segment acking one
				 * proves the handshake */
				proven = 1;
				p.tag_flags |= IG_TF_PROVEN;
			}
			/* source rules of a request start: at most one LPM lookup, made only when an
			 * answer can count: a class or exemption rule exists (cidr_classes), or the
			 * entries say who is trusted and a priority header could set the class (a
			 * header block, no class from the path). The header is scanned only when it
			 * can count: no source class (that would win), from a trusted source (or
			 * from all, when configured so). */
			__u8 src_cls = IG_CLASS_NONE, src_exempt = 0, src_trusted = 0, src_done = 0;
			/* = ig_classify_payload(), stage by stage */
			if (ig_classify_start_sub(ctx, &p, known_first, rules)) {
				ig_scan_target_sub(ctx, &p, rules);
				if (p.reason == IG_R_REQUEST && rules->cidr_rules &&
				    (rules->cidr_classes || (p.hdr_len && p.cls == IG_CLASS_NONE))) {
					ig_cidr_lookup(&p, &src_cls, &src_exempt, &src_trusted);
					src_done = 1;
				}
				if (p.reason == IG_R_REQUEST && p.hdr_len && p.cls == IG_CLASS_NONE &&
				    src_cls >= IG_NUM_CLASSES &&
				    (rules->priority_header == IG_PRIO_HDR_ALL ||
				     (rules->priority_header == IG_PRIO_HDR_TRUSTED && src_trusted)))
					p.cls = (__u8)ig_find_priority_sub(ctx, p.hdr_off, p.hdr_len);
				/* packet pointers do not survive a call: reload them */
				data = (__u8 *)(long)ctx->data;
				end = (__u8 *)(long)ctx->data_end;
			}
			if (p.reason == IG_R_REQUEST) {
				__u8 verdict = IG_TV_ADMIT;
				if (rules->cidr_classes && !src_done)
					ig_cidr_lookup(&p, &src_cls, &src_exempt, &src_trusted);
				__u8 cls = src_cls, exempt = src_exempt;
				if (rules->track_flows || ig_cfg.tag_mode || rules->req_rate)
					tag.rx_ns = bpf_ktime_get_ns();
				if (cls >= IG_NUM_CLASSES)
					cls = p.cls;
				if (cls >= IG_NUM_CLASSES)
					cls = rules->default_cls;
				if (cls >= IG_NUM_CLASSES)
					cls = IG_NUM_CLASSES - 1;
				if (!ig_admitted(cls, ig_overload_level()))
					verdict = IG_TV_OVERLOAD;
				else if (rules->req_rate && !exempt &&
					 (!ig_cfg.prove_handshake || proven) &&
					 !ig_rate_ok(rules, &p, tag.rx_ns, 0))
					/* afxdp: only a proven source is charged; a spoofed request
					 * start cannot drain a victim's bucket */
					verdict = IG_TV_RATE_LIMITED;
				tag.cls = cls;
				tag.reason = IG_R_REQUEST;
				tag.verdict = verdict;
				tag.flags = p.tag_flags;
				tag.magic = IG_TAG_MAGIC;
				have_tag = 1;
				ig_count_class(cls, verdict);
				if (fv) {
					fv->tag = tag;
					fv->check = check | IG_FLOW_TAGGED;
				}
			} else if (p.action != XDP_PASS && !known_first && !rules->reject_mid_stream &&
				   p.reason >= IG_R_BAD_REQUEST_LINE && p.reason <= IG_R_BAD_H2_FRAME) {
				/* One frame cannot prove that mid-stream bytes start a request: they may
				 * be a binary body that happens to begin like one. */
				p.action = XDP_PASS;
				p.reason = IG_R_SEGMENT;
			} else if (p.action != XDP_PASS) {
rejected:
				if (fv) {
					/* drops the retransmissions and followers of this segment only
					 * (IG_REJECT_WINDOW), for reject_ttl_ns */
					fv->tag.rx_ns = bpf_ktime_get_ns();
					*(__u64 *)fv = ((__u64)(check | IG_FLOW_REJECTED) << 32) | p.seq;
				}
			}
		}
	}
out:
	if (p.action == XDP_TX) {
		int len;
		if (ig_cfg.redirect_xsk && ig_cfg.tag_mode && !cookie_flow) {
			/* afxdp: the connection lives in userspace's TCP stack, not the kernel's. Hand
			 * it the original frame flagged IG_TF_REJECTED: the stack sends the RST from its
			 * own sequence space and frees the connection at once. With no socket bound on
			 * this queue, fall back to answering with the RST here. (A cookie flow is not
			 * in the stack: the program answers it.) */
			long act = bpf_redirect_map(&ig_xsks, ctx->rx_queue_index, XDP_PASS);
			if (act == XDP_REDIRECT) {
				tag.rx_ns = bpf_ktime_get_ns();
				tag.cls = IG_CLASS_NONE;
				tag.reason = p.reason;
				tag.verdict = IG_TV_ADMIT;
				tag.flags = p.tag_flags | IG_TF_REJECTED;
				tag.magic = IG_TAG_MAGIC;
				if (ig_put_tag(ctx, &tag) == 0) {
					ig_count(XDP_REDIRECT, p.reason, frame_len);
					return XDP_REDIRECT;
				}
				/* no room for the flag (the frame is unchanged): the stack could not
				 * tell; answer here */
			}
		}
		if (!ig_rst_ok(rules)) {
			ig_count(XDP_DROP, IG_R_RST_RATE_LIMITED, frame_len);
			return XDP_DROP;
		}
		/* packet pointers do not survive the helper calls: reload them */
		data = (__u8 *)(long)ctx->data;
		end = (__u8 *)(long)ctx->data_end;
		ig_count(p.action, p.reason, frame_len);
		len = ig_build_rst(data, end, &p);
		if (len < 0 || len > 0xffff)
			return XDP_DROP;
		if (bpf_xdp_adjust_tail(ctx, len - (int)frame_len))
			return XDP_DROP;
		if (ig_cfg.tx_redirect) /* out of the interface it came in on, like XDP_TX */
			return bpf_redirect(ctx->ingress_ifindex, 0);
		return XDP_TX;
	}
	if (p.action != XDP_PASS || !p.service) {
		ig_count(p.action, p.reason, frame_len);
		return p.action;
	}

	if (ig_cfg.tag_mode && !have_tag) {
		/* Not a request start: no clock read (~30 ns). Userspace stamps segments with its
		 * own clock; the program's time matters only for the flow map, the rate buckets and
		 * rejected flows, which a request start or a reset sets. */
		tag.rx_ns = 0;
		tag.cls = IG_CLASS_NONE;
		tag.reason = p.reason;
		tag.verdict = IG_TV_ADMIT;
		tag.flags = p.tag_flags;
		tag.magic = IG_TAG_MAGIC;
	}
	/* Metadata can be written before the redirect is known: a frame passed to the kernel
	 * carries it harmlessly. A prefix only once the frame goes to the socket. */
	int meta_done = 0;
	if (ig_cfg.tag_mode == IG_TAG_META)
		meta_done = ig_put_meta(ctx, &tag) == 0;
	if (cookie_flow)
		p.reason = IG_R_COOKIE_VALID; /* counted as such; the tag keeps IG_R_REQUEST */
	if (ig_cfg.redirect_xsk) {
		/* afxdp: to the socket of this rx queue; XDP_PASS when none is bound there. A frame
		 * the stack gets carries its tag (metadata, else a prefix) or is dropped. */
		long act = bpf_redirect_map(&ig_xsks, ctx->rx_queue_index, XDP_PASS);
		if (act == XDP_REDIRECT && ig_cfg.tag_mode && !meta_done && ig_put_prefix(ctx, &tag)) {
			ig_count(XDP_DROP, IG_R_NO_TAG_ROOM, frame_len);
			return XDP_DROP;
		}
		ig_count(act == XDP_REDIRECT ? XDP_REDIRECT : XDP_PASS, p.reason, frame_len);
		return (int)act;
	}
	ig_count(XDP_PASS, p.reason, frame_len);
	return XDP_PASS;
}

/* The bare baseline the benchmark measures next to ig_xdp_ingress. */
SEC("xdp")
int ig_xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}
