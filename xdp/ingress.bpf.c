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
 *   - ig_state: the overload level, raised by userspace at run time;
 *   - per-CPU counters for every (action, reason) and per (class, tag verdict).
 * Load-time knobs are in the read-only ig_cfg, so the verifier prunes what is off.
 */
#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>

#include "classifier.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile struct ig_config ig_cfg = {};

struct ig_runtime {
	__u32 overload_level; /* 0 = admit every class; n = admit classes < IG_NUM_CLASSES - n */
	__u32 pad;
};

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

/* Class and exemption from the source CIDR rules. */
static __always_inline void ig_cidr_lookup(const struct ig_parse *p, __u8 *cls, __u8 *exempt)
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
	}
}

static __always_inline __u32 ig_overload_level(void)
{
	__u32 zero = 0;
	struct ig_runtime *rt = bpf_map_lookup_elem(&ig_state, &zero);
	return rt ? rt->overload_level : 0;
}

static __always_inline int ig_admitted(__u8 cls, __u32 level)
{
	return (__u32)cls + level < IG_NUM_CLASSES;
}

/* Returns 1 if the source may go on (syn: a SYN; otherwise a request start). */
static __always_inline int ig_rate_ok(const struct ig_parse *p, __u64 now, int syn)
{
	struct ig_bucket *b, fresh = {};
	__u32 a[4];
	__u64 rate = syn ? ig_cfg.syn_rate : ig_cfg.req_rate;
	__u64 burst = syn ? ig_cfg.syn_burst : ig_cfg.req_burst;

	if (rate == 0)
		return 1;
	ig_src16(p, a);
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
__attribute__((noinline)) int ig_target_end_sub(struct xdp_md *ctx, struct ig_parse *p, __u32 i)
{
	const __u8 *data = (const __u8 *)(long)ctx->data;
	const __u8 *end = (const __u8 *)(long)ctx->data_end;
	if (!p)
		return 0;
	ig_check_target_end(data, end, &ig_cfg, p, i);
	return 0;
}

__attribute__((noinline)) int ig_scan_target_sub(struct xdp_md *ctx, struct ig_parse *p)
{
	const __u8 *data = (const __u8 *)(long)ctx->data;
	const __u8 *end = (const __u8 *)(long)ctx->data_end;
	if (!p)
		return 0;
	/* = ig_scan_target(); the call resets what the verifier knows about i, so the rest is
	 * checked once rather than once per word count */
	return ig_target_end_sub(ctx, p, ig_scan_target_words(data, end, p));
}

__attribute__((noinline)) int ig_find_priority_sub(struct xdp_md *ctx, __u32 off, __u32 len)
{
	const __u8 *data = (const __u8 *)(long)ctx->data;
	const __u8 *end = (const __u8 *)(long)ctx->data_end;
	return ig_find_priority(data, end, off, len);
}

/* The flow slot of a parsed segment, and its check (state bits clear). */
static __always_inline struct ig_flow_val *ig_flow_slot(const struct ig_parse *p, __u32 *check)
{
	__u64 h = ig_flow_hash(&p->key);
	__u32 idx = (__u32)h & ig_cfg.flow_mask;
	*check = ig_flow_check(h);
	return bpf_map_lookup_elem(&ig_flows, &idx);
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

	if (ig_parse_l2l4(data, end, &ig_cfg, &p)) {
		struct ig_flow_val *fv = 0;
		__u32 check = 0;
		int known_first = 0;

		if (p.reason == IG_R_SYN) {
			__u8 cls = IG_CLASS_NONE, exempt = 0;
			if (ig_cfg.cidr_rules)
				ig_cidr_lookup(&p, &cls, &exempt);
			if (cls >= IG_NUM_CLASSES)
				cls = ig_cfg.default_cls;
			if (!ig_admitted(cls, ig_overload_level())) {
				p.action = XDP_DROP;
				p.reason = IG_R_SYN_OVERLOAD;
			} else if (ig_cfg.syn_rate && !exempt &&
				   !ig_rate_ok(&p, bpf_ktime_get_ns(), 1)) {
				p.action = XDP_DROP;
				p.reason = IG_R_SYN_RATE_LIMITED;
			} else if (ig_cfg.track_flows) {
				fv = ig_flow_slot(&p, &check);
				if (fv) /* one 8-byte store: first_seq and check */
					*(__u64 *)fv = ((__u64)(check | IG_FLOW_SYN_SEEN) << 32) | (p.seq + 1);
			}
		} else if (p.pl_len) {
			/* Data. Segments without data (ACK, FIN, RST) start nothing and are passed
			 * without a flow lookup; a client's RST on a flow we reset then reaches the
			 * kernel socket and frees it. */
			if (ig_cfg.track_flows) {
				fv = ig_flow_slot(&p, &check);
				if (fv) {
					__u64 w = *(volatile __u64 *)fv;
					__u32 st = (__u32)(w >> 32);
					if (st == (check | IG_FLOW_REJECTED)) {
						p.action = XDP_DROP;
						p.reason = IG_R_REJECTED_FLOW;
						goto out;
					}
					if (st == (check | IG_FLOW_SYN_SEEN) && (__u32)w == p.seq)
						known_first = 1;
				}
			}
			/* = ig_classify_payload(), stage by stage */
			if (ig_classify_start(data, end, &ig_cfg, &p, known_first)) {
				ig_scan_target_sub(ctx, &p);
				if (p.reason == IG_R_REQUEST && p.hdr_len && ig_cfg.priority_header &&
				    p.cls == IG_CLASS_NONE)
					p.cls = (__u8)ig_find_priority_sub(ctx, p.hdr_off, p.hdr_len);
				/* packet pointers do not survive a call: reload them */
				data = (__u8 *)(long)ctx->data;
				end = (__u8 *)(long)ctx->data_end;
			}
			if (p.reason == IG_R_REQUEST) {
				__u8 cls = IG_CLASS_NONE, exempt = 0;
				__u8 verdict = IG_TV_ADMIT;
				if (ig_cfg.track_flows || ig_cfg.write_meta || ig_cfg.req_rate)
					tag.rx_ns = bpf_ktime_get_ns();
				if (ig_cfg.cidr_rules)
					ig_cidr_lookup(&p, &cls, &exempt);
				if (cls >= IG_NUM_CLASSES)
					cls = p.cls;
				if (cls >= IG_NUM_CLASSES)
					cls = ig_cfg.default_cls;
				if (cls >= IG_NUM_CLASSES)
					cls = IG_NUM_CLASSES - 1;
				if (!ig_admitted(cls, ig_overload_level()))
					verdict = IG_TV_OVERLOAD;
				else if (ig_cfg.req_rate && !exempt && !ig_rate_ok(&p, tag.rx_ns, 0))
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
			} else if (p.action != XDP_PASS && !known_first && !ig_cfg.reject_mid_stream &&
				   p.reason >= IG_R_BAD_REQUEST_LINE && p.reason <= IG_R_BAD_H2_FRAME) {
				/* One frame cannot prove that mid-stream bytes start a request: they may
				 * be a binary body that happens to begin like one. */
				p.action = XDP_PASS;
				p.reason = IG_R_SEGMENT;
			} else if (p.action != XDP_PASS) {
				if (fv)
					*(__u64 *)fv = (__u64)(check | IG_FLOW_REJECTED) << 32;
			}
		}
	}
out:
	if (p.action == XDP_TX) {
		int len;
		if (ig_cfg.redirect_xsk && ig_cfg.write_meta) {
			/* afxdp: the connection lives in userspace's TCP stack, not the kernel's. Hand
			 * it the original frame flagged IG_TF_REJECTED: the stack sends the RST from its
			 * own sequence space and frees the connection at once. With no socket bound on
			 * this queue, fall back to answering with the RST here. */
			long act = bpf_redirect_map(&ig_xsks, ctx->rx_queue_index, XDP_PASS);
			if (act == XDP_REDIRECT) {
				struct ig_tag *meta;
				tag.rx_ns = bpf_ktime_get_ns();
				tag.cls = IG_CLASS_NONE;
				tag.reason = p.reason;
				tag.verdict = IG_TV_ADMIT;
				tag.flags = p.tag_flags | IG_TF_REJECTED;
				tag.magic = IG_TAG_MAGIC;
				if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(struct ig_tag)) == 0) {
					meta = (struct ig_tag *)(long)ctx->data_meta;
					data = (__u8 *)(long)ctx->data;
					if ((__u8 *)(meta + 1) <= data) {
						*meta = tag;
						ig_count(XDP_REDIRECT, p.reason, frame_len);
						return XDP_REDIRECT;
					}
				}
				/* no room for the flag: the stack could not tell; answer here */
			}
			/* packet pointers do not survive the helper calls: reload them */
			data = (__u8 *)(long)ctx->data;
			end = (__u8 *)(long)ctx->data_end;
		}
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

	if (ig_cfg.write_meta) {
		struct ig_tag *meta;
		if (!have_tag) {
			tag.rx_ns = bpf_ktime_get_ns();
			tag.cls = IG_CLASS_NONE;
			tag.reason = p.reason;
			tag.verdict = IG_TV_ADMIT;
			tag.flags = p.tag_flags;
			tag.magic = IG_TAG_MAGIC;
		}
		if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(struct ig_tag)) == 0) {
			meta = (struct ig_tag *)(long)ctx->data_meta;
			data = (__u8 *)(long)ctx->data;
			if ((__u8 *)(meta + 1) <= data)
				*meta = tag;
		}
	}
	if (ig_cfg.redirect_xsk) {
		/* afxdp: to the socket of this rx queue; XDP_PASS when none is bound there */
		long act = bpf_redirect_map(&ig_xsks, ctx->rx_queue_index, XDP_PASS);
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
