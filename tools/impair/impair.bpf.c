// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/* infergate's fault injector: a cls_bpf (direct-action) program on a clsact hook, egress or
 * ingress, that drops, duplicates and reorders IP packets with configured probabilities.
 *
 * - drop: TC_ACT_STOLEN, not TC_ACT_SHOT: at egress SHOT returns NET_XMIT_DROP and the local
 *   TCP sender would see (and immediately retry) the loss; STOLEN reports success, like a
 *   loss on the wire.
 * - duplicate: bpf_clone_redirect() of the packet to the same hook, then the original passes.
 * - reorder ("hold a packet back and release it after the next one"): BPF cannot keep an skb
 *   across invocations, so the held frame's bytes are copied into a map slot and the skb is
 *   stolen. The next matching packet Q (same ethertype and IP protocol) is sent as a clone,
 *   then Q's skb is rewritten in place into the held frame (bpf_skb_change_tail +
 *   bpf_skb_store_bytes) and sent as a second clone; the original is stolen. Both copies
 *   leave through the same path (dev_queue_xmit at egress, the backlog at ingress) in that
 *   order, so the held frame really arrives after Q.
 * Our own copies carry skb->mark == ig_imp_mark and pass untouched (mark cleared) when they
 * come through the hook again.
 *
 * Decisions come from impair_decide.h: packet i is decided by (seed, i) alone.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <linux/types.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "impair_decide.h"
#include "impair_shared.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Load-time knobs. */
const volatile __u32 ig_imp_ingress = 0; /* 1: attached to clsact ingress, 0: egress */
const volatile __u32 ig_imp_mark = IG_IMPAIR_DEFAULT_MARK;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ig_impair_config);
} ig_imp_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ig_impair_seq);
} ig_imp_seq SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ig_impair_held);
} ig_imp_held SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, IG_IMP_NUM_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} ig_imp_counters SEC(".maps");

static __always_inline void count(__u32 which)
{
	__u64 *c = bpf_map_lookup_elem(&ig_imp_counters, &which);

	if (c)
		*c += 1;
}

/* Sends a copy of the skb, as it is now, through the hook's own path; our mark lets the copy
 * pass when it comes through this program again. */
static __always_inline long send_copy(struct __sk_buff *skb)
{
	__u32 mark = skb->mark;
	long err;

	skb->mark = ig_imp_mark;
	err = bpf_clone_redirect(skb, skb->ifindex, ig_imp_ingress ? BPF_F_INGRESS : 0);
	skb->mark = mark;
	return err;
}

/* True when the packet carries L4 payload. Only such packets are held back or used to release a
 * held one: at the egress hook a TCP data segment's checksum is still partial (finished after
 * TC by the stack or the device), while the kernel's own control replies (RSTs, TIME_WAIT
 * ACKs) carry a complete one; swapping bytes between the two kinds would yield a frame with a
 * wrong checksum, which the receiver counts as corruption, not reordering. */
static __always_inline int has_payload(struct __sk_buff *skb, __u16 ethertype, __u8 l4)
{
	__u32 l3_len, l4_off;
	__u8 b[2];

	if (l4 != IPPROTO_TCP)
		return 1;
	if (ethertype == bpf_htons(ETH_P_IP)) {
		__u16 tot;
		if (bpf_skb_load_bytes(skb, ETH_HLEN, b, 1) ||
		    bpf_skb_load_bytes(skb, ETH_HLEN + 2, &tot, 2))
			return 0;
		l4_off = (b[0] & 0xf) * 4;
		l3_len = bpf_ntohs(tot);
	} else {
		__u16 plen;
		if (bpf_skb_load_bytes(skb, ETH_HLEN + 4, &plen, 2))
			return 0;
		l4_off = 40;
		l3_len = 40 + bpf_ntohs(plen);
	}
	if (l4_off < 20 || l4_off > 60 ||
	    bpf_skb_load_bytes(skb, ETH_HLEN + l4_off + 12, b, 1))
		return 0;
	return l3_len > l4_off + (__u32)((b[0] >> 4) * 4);
}

/* Sends Q (the current packet), then the held frame; the caller steals the original. Returns
 * 0 when Q left (the original must then be stolen), <0 when nothing was sent. */
static __always_inline long release_after(struct __sk_buff *skb, struct ig_impair_held *held)
{
	__u32 len = held->len;
	long err;

	if (len < ETH_HLEN || len > IG_IMPAIR_MAX_HELD)
		return -1;
	err = send_copy(skb);
	if (err)
		return err;
	if (bpf_skb_change_tail(skb, len, 0) ||
	    bpf_skb_store_bytes(skb, 0, held->data, len, 0) ||
	    send_copy(skb)) {
		count(IG_IMP_ERRORS); /* Q went out; the held frame is lost */
		return 0;
	}
	count(IG_IMP_RELEASED);
	return 0;
}

SEC("tc")
int ig_impair(struct __sk_buff *skb)
{
	struct ig_impair_config *cfg;
	struct ig_impair_held *held;
	struct ig_impair_seq *seq;
	__u32 zero = 0, decision;
	__u16 ethertype;
	__u8 l4 = 0;

	if (skb->mark == ig_imp_mark) {
		skb->mark = 0;
		count(IG_IMP_REINJECTED);
		return TC_ACT_OK;
	}
	count(IG_IMP_PACKETS);
	cfg = bpf_map_lookup_elem(&ig_imp_config, &zero);
	seq = bpf_map_lookup_elem(&ig_imp_seq, &zero);
	held = bpf_map_lookup_elem(&ig_imp_held, &zero);
	if (!cfg || !seq || !held || !cfg->enabled)
		return TC_ACT_OK;

	if (bpf_skb_load_bytes(skb, 12, &ethertype, sizeof(ethertype)))
		return TC_ACT_OK;
	if (ethertype == bpf_htons(ETH_P_IP)) {
		if (bpf_skb_load_bytes(skb, ETH_HLEN + 9, &l4, 1))
			return TC_ACT_OK;
	} else if (ethertype == bpf_htons(ETH_P_IPV6)) {
		if (bpf_skb_load_bytes(skb, ETH_HLEN + 6, &l4, 1))
			return TC_ACT_OK;
	} else {
		return TC_ACT_OK; /* ARP, LLDP, ...: never impaired */
	}
	if (cfg->l4_proto && cfg->l4_proto != l4)
		return TC_ACT_OK;

	count(IG_IMP_MATCHED);
	decision = ig_impair_decide(cfg, __sync_fetch_and_add(&seq->next, 1));

	if (decision == IG_IMP_DROP) {
		count(IG_IMP_DROPPED);
		return TC_ACT_STOLEN;
	}
	if (decision == IG_IMP_HOLD) {
		__u32 len = skb->len;

		if (len < ETH_HLEN || len > IG_IMPAIR_MAX_HELD || skb->gso_segs > 1 ||
		    !has_payload(skb, ethertype, l4)) {
			count(IG_IMP_HOLD_SKIPPED);
		} else if (__sync_val_compare_and_swap(&held->state, IG_IMP_HELD_EMPTY,
						       IG_IMP_HELD_FILLING) == IG_IMP_HELD_EMPTY) {
			if (bpf_skb_load_bytes(skb, 0, held->data, len)) {
				__sync_fetch_and_sub(&held->state, IG_IMP_HELD_FILLING);
				count(IG_IMP_ERRORS);
				return TC_ACT_OK;
			}
			held->len = len;
			held->ethertype = ethertype;
			held->l4_proto = l4;
			__sync_fetch_and_add(&held->state, 1); /* FILLING -> FULL */
			count(IG_IMP_HELD);
			return TC_ACT_STOLEN;
		} else {
			count(IG_IMP_HOLD_BUSY);
		}
	}
	if (decision == IG_IMP_DUP) {
		if (send_copy(skb))
			count(IG_IMP_ERRORS);
		else
			count(IG_IMP_DUPLICATED);
	}

	/* Release a held frame right behind this packet. */
	if (held->state == IG_IMP_HELD_FULL && held->ethertype == ethertype && held->l4_proto == l4 &&
	    skb->gso_segs <= 1 && has_payload(skb, ethertype, l4) &&
	    __sync_val_compare_and_swap(&held->state, IG_IMP_HELD_FULL, IG_IMP_HELD_RELEASING) ==
		    IG_IMP_HELD_FULL) {
		long err = release_after(skb, held);

		if (err) {
			__sync_fetch_and_sub(&held->state, 1); /* RELEASING -> FULL: try again later */
			count(IG_IMP_ERRORS);
			return TC_ACT_OK;
		}
		__sync_fetch_and_sub(&held->state, IG_IMP_HELD_RELEASING); /* -> EMPTY */
		return TC_ACT_STOLEN;
	}
	return TC_ACT_OK;
}
